"""Prompt scoring for :class:`~metagen.engine.llm_engine.LLMEngine`: log p(continuation | prompt).

A scoring sequence only prefills ``prompt + continuation`` and collects the log-probabilities of
the continuation's tokens from the logits of every position (the runner's ``all_logits`` mode).
Its prefix-cache match is capped so the logits of the prompt's last token are computed. When a
prompt has several continuations it is first prefilled alone and cached, so each continuation
only computes its own tokens (plus the partial last block of the prompt).
"""

from __future__ import annotations

import math
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

    def add_scoring_request(self, tokens: list[int], score_from: int) -> str:
        """Queue a prefill-only request scoring ``tokens[score_from:]`` (already validated:
        use :meth:`score_sequences` for checked, blocking scoring). Its output's ``scores[0]``
        is the summed log-probability."""
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

        An empty continuation scores 0. See :meth:`score_sequences` for checks and errors.
        """
        if len(prompts) != len(continuations):
            raise InvalidPromptError("continuations", f"<{len(continuations)} lists>",
                                     f"need one list per prompt ({len(prompts)})")
        items = [(list(p) + list(c), len(p)) for p, cs in zip(prompts, continuations) for c in cs]
        flat = iter(self.score_sequences(items))
        return [[next(flat) for _ in cs] for cs in continuations]

    def score_sequences(self, items: Sequence[tuple[Sequence[int], int]]) -> list[float]:
        """For each ``(ids, k)`` with ``1 <= k <= len(ids)``: sum over ``t >= k`` of
        log p(ids[t] | ids[:t]). All items run as one batch of prefill-only sequences.

        Every item is validated first (ids in the vocabulary, length within the context).
        When several items share their conditioning prefix ``ids[:k]``, it is prefilled once and
        cached first. Raises :class:`NumericalError` if a score is not finite.
        """
        checked = []
        for ids, k in items:
            ids = check_prompt_ids(ids, self.vocab_size, self.max_model_len + 1, "continuation")
            if not isinstance(k, int) or not 1 <= k <= len(ids):
                raise InvalidPromptError("prompt", k, "the conditioning prefix must hold "
                                         "between 1 token and the whole sequence")
            checked.append((ids, k))
        if self.radix is not None:
            heads: dict[tuple[int, ...], int] = {}
            for ids, k in checked:
                if k < len(ids) and k > self.config.block_size:
                    heads[tuple(ids[:k])] = heads.get(tuple(ids[:k]), 0) + 1
            warm = [list(h) for h, count in heads.items() if count > 1]
            self.run_until_done([self.add_scoring_request(h, len(h)) for h in warm])
        rids = [self.add_scoring_request(ids, k) if k < len(ids) else None for ids, k in checked]
        outs = {o.request_id: o for o in self.run_until_done([r for r in rids if r])}
        result = []
        for r in rids:
            v = 0.0 if r is None else outs[r].scores[0]  # type: ignore[index]
            if not math.isfinite(v):
                raise NumericalError(f"score of request {r} is {v}")
            result.append(v)
        return result

    def _collect_scores(self, seq: Seq, start: int, logits: torch.Tensor) -> None:
        """Add the continuation logprobs predicted by rows of ``logits`` (n, V) for positions
        start .. start+n-1 (row r predicts token start+r+1); finish the sequence when done."""
        n = logits.shape[0]
        # after a preemption the tokens are recomputed: skip targets already collected
        lo = max(seq.score_from + len(seq.score_logprobs), start + 1)  # type: ignore[operator]
        hi = min(start + n, len(seq.token_ids) - 1)
        if lo <= hi:
            rows = logits[lo - 1 - start:hi - start]  # (k, V)
            target = torch.tensor(seq.token_ids[lo:hi + 1], device=rows.device)
            lp = torch.log_softmax(rows.float(), -1).gather(1, target[:, None])[:, 0]
            seq.score_logprobs.extend(lp.tolist())
        if seq.num_uncomputed == 0:
            self._finish(seq, "stop")
