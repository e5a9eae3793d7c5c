"""Prompt scoring for :class:`~metagen.engine.llm_engine.LLMEngine`: log p(continuation | prompt).

A scoring sequence only prefills ``prompt + continuation`` and collects the log-probabilities of
the continuation's tokens from the logits of every position (the runner's ``all_logits`` mode).
Its prefix-cache match is capped so the logits of the prompt's last token are computed. When a
prompt has several continuations it is first prefilled alone and cached, so each continuation
only computes its own tokens (plus the partial last block of the prompt).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.decoding import SequenceState
from metagen.engine.detokenizer import Detokenizer
from metagen.engine.sequence import Request, Sequence as Seq
from metagen.engine.validation import check_prompt_ids
from metagen.errors import InvalidPromptError, NumericalError
from metagen.types import SamplingParams

_SCORE_PARAMS = SamplingParams(temperature=0.0, max_tokens=1)


class ScoringMixin:
    """``score`` and its helpers; mixed into LLMEngine (uses its scheduler, stats, requests)."""

    def _add_scoring(self, tokens: list[int], score_from: int) -> str:
        rid = f"score-{next(self._req_ids)}"
        req = Request(rid, tokens, _SCORE_PARAMS)
        state = SequenceState(_SCORE_PARAMS, list(tokens))
        seq = self._new_seq(req, state, list(tokens), Detokenizer(None, ()))
        seq.score_from = score_from
        self.requests[rid] = req
        self.stats.prompt_tokens += len(tokens)
        self.stats.requests += 1
        self.scheduler.add(seq)
        return rid

    def score(self, prompts: Sequence[Sequence[int]],
              continuations: Sequence[Sequence[Sequence[int]]]) -> list[list[float]]:
        """``out[i][j]`` = sum of log p(continuations[i][j][t] | prompts[i] + earlier tokens).

        Every prompt and continuation is validated first (ids in the vocabulary, total length
        within the context); an empty continuation scores 0. Raises :class:`NumericalError` if a
        score is not finite.
        """
        if len(prompts) != len(continuations):
            raise InvalidPromptError("continuations", f"<{len(continuations)} lists>",
                                     f"need one list per prompt ({len(prompts)})")
        checked: list[tuple[list[int], list[list[int]]]] = []
        for p, conts in zip(prompts, continuations):
            ids = check_prompt_ids(p, self.vocab_size, self.max_model_len)
            cs = []
            for c in conts:
                cs.append(check_prompt_ids(list(ids) + list(c), self.vocab_size,
                                           self.max_model_len + 1, "continuation")[len(ids):]
                          if len(c) else [])
            checked.append((ids, cs))
        if self.radix is not None:  # warm the cache with prompts that have several continuations
            warm = {tuple(ids) for ids, cs in checked
                    if sum(1 for c in cs if c) > 1 and len(ids) > self.config.block_size}
            self.run_until_done([self._add_scoring(list(t), len(t)) for t in warm])
        ids_grid = [[self._add_scoring(ids + c, len(ids)) if c else None for c in cs]
                    for ids, cs in checked]
        flat = [r for row in ids_grid for r in row if r is not None]
        outs = {o.request_id: o for o in self.run_until_done(flat)}
        result = []
        for row in ids_grid:
            vals = []
            for r in row:
                v = 0.0 if r is None else outs[r].scores[0]  # type: ignore[index]
                if not torch.isfinite(torch.tensor(v)):
                    raise NumericalError(f"score of request {r} is {v}")
                vals.append(v)
            result.append(vals)
        return result

    def _collect_scores(self, seq: Seq, start: int, logits: torch.Tensor) -> None:
        """Add the continuation logprobs predicted by rows of ``logits`` (n, V) for positions
        start .. start+n-1 (row r predicts token start+r+1); finish the sequence when done."""
        n = logits.shape[0]
        lo = max(seq.score_from, start + 1)  # type: ignore[arg-type]
        hi = min(start + n, len(seq.token_ids) - 1)
        if lo <= hi:
            rows = logits[lo - 1 - start:hi - start]  # (k, V)
            target = torch.tensor(seq.token_ids[lo:hi + 1], device=rows.device)
            lp = torch.log_softmax(rows.float(), -1).gather(1, target[:, None])[:, 0]
            seq.score_logprobs.extend(lp.tolist())
        if seq.num_uncomputed == 0:
            self._finish(seq, "stop")
