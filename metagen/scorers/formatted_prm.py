"""Reward models read in their own declared layout: token-probability PRMs (Math-Shepherd,
RLHFlow), step-separator PRMs (Qwen2.5-Math-PRM) and generative verifiers (GenRM).

:class:`FormattedPRM` lays each (prompt, steps) out with its :class:`PRMFormat`
(:mod:`metagen.scorers.prm_render`), runs the backbone once per padded batch of rows (rows
whose prompt renders to the same leading tokens instead share one prompt forward pass, as in
:class:`~metagen.scorers.HFProcessRewardModel`) and applies the head only at the score
positions:

- causal-LM kinds (step-tag, chat-turns, generative): the rows of the output embedding for
  ``good_token`` and ``bad_token``; score = ``softmax([logit_good, logit_bad])[0]``, which is
  ``p(good) / (p(good) + p(bad))`` under the full next-token distribution. Models whose forward
  post-processes logits (a soft cap or a logit scale in the config) are refused.
- separator: the two-label head (a token classifier's Linear, or the ``Linear -> ReLU ->
  Linear`` of Qwen2.5-Math-PRM's ``Qwen2ForProcessRewardModel``); score = ``softmax(head)[1]``.

``score_steps(prompts, steps)`` returns one score per step. For a generative verifier, step k's
score verifies the response ``"".join(steps[:k + 1])`` (one row per prefix, one batched call).
``score(prompts, completions)`` splits each completion at ``format.step_delimiter`` and
aggregates the step scores with ``aggregation`` (a generative verifier scores the whole
completion once). ``usage``: one ``scorer_calls`` per ``score``/``score_steps`` call,
``scorer_tokens`` = tokens computed, FLOPs ``2 x parameters x scorer_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import InvalidParameterError, InvalidPromptError, ModelLoadError
from metagen.scorers.base import (
    StepAggregation, aggregate_steps, check_same_length, check_step_chains)
from metagen.scorers.callables import check_scores
from metagen.scorers.hf_reward import HFScorer
from metagen.scorers.prm_format import PRMFormat
from metagen.scorers.prm_render import PromptLike, Rendered, render_response, render_steps, \
    tokenize_rendered

_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")


class FormattedPRM(HFScorer):
    """A process reward model (and outcome reward via ``score``) read through a
    :class:`PRMFormat`. Build one with :func:`metagen.scorers.load_prm`.

    ``model`` is a causal LM (head = its output embedding) for the step-tag, chat-turns and
    generative kinds; for separator, a two-label token classifier (head = its
    ``score``/``classifier``) or a bare backbone with the MLP head of a ``*ForProcessRewardModel``
    checkpoint. Raises :class:`ModelLoadError` naming ``good_token``/``bad_token`` when one is
    not a single token of the tokenizer.
    """

    def __init__(self, model: Any, tokenizer: Any, *, format: PRMFormat, head: Any,
                 batch_size: int = 16, aggregation: StepAggregation = "last") -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        if not isinstance(format, PRMFormat):
            raise InvalidParameterError("format", format, "must be a PRMFormat")
        super().__init__(model, tokenizer, head=head, batch_size=batch_size)
        self.format = format
        self.aggregation = aggregation
        self._pair: list[int] = []
        if format.kind != "separator":
            for name in _LOGIT_POSTPROCESSING:
                if getattr(model.config, name, None) not in (None, 1.0):
                    raise ModelLoadError(f"{type(model).__name__} post-processes its logits "
                                         f"({name}); token-probability scoring does not")
            self._pair = [_token_id(tokenizer, format.good_token, "good_token"),
                          _token_id(tokenizer, format.bad_token, "bad_token")]

    def score_steps(self, prompts: Sequence[PromptLike], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        check_step_chains(prompts, steps)
        if self.format.kind == "generative":
            rows = [render_response(self.format, self.tokenizer, prompt, "".join(chain[:k + 1]))
                    for prompt, chain in zip(prompts, steps) for k in range(len(chain))]
            flat = [v[0] for v in self._score_rendered(rows)]
            out, at = [], 0
            for chain in steps:
                out.append(check_scores(flat[at:at + len(chain)], len(chain), who="FormattedPRM"))
                at += len(chain)
            return out
        rows = [render_steps(self.format, self.tokenizer, prompt, chain)
                for prompt, chain in zip(prompts, steps)]
        return [check_scores(v, len(chain), who="FormattedPRM")
                for v, chain in zip(self._score_rendered(rows), steps)]

    def score(self, prompts: Sequence[PromptLike], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        if self.format.kind == "generative":
            rows = [render_response(self.format, self.tokenizer, p, c)
                    for p, c in zip(prompts, completions)]
            return check_scores([v[0] for v in self._score_rendered(rows)], len(rows),
                                who="FormattedPRM") if rows else []
        chains = [[s for s in c.split(self.format.step_delimiter) if s.strip()]
                  for c in completions]
        if any(not chain for chain in chains):
            raise InvalidParameterError("completions", completions,
                                        "a completion with no non-blank step has no score")
        return [aggregate_steps(s, self.aggregation) for s in self.score_steps(prompts, chains)]

    def _score_rendered(self, rows: list[Rendered]) -> list[list[float]]:
        if not rows:
            return []
        ids, positions, prefixes = [], [], []
        for row in rows:
            row_ids, row_positions = tokenize_rendered(self.tokenizer, row)
            if self.max_length is not None and len(row_ids) > self.max_length:
                raise InvalidPromptError("prompts", f"<{len(row_ids)} tokens>",
                                         f"longer than the scorer's context {self.max_length}")
            ids.append(row_ids)
            positions.append(row_positions)
            prefixes.append(self._shared_prefix(row, row_ids))
        # a prompt only one row uses gains nothing from a separate prompt pass: such rows go to
        # the padded batches (one forward per batch of rows)
        counts: dict[tuple[int, ...], int] = {}
        for r, p in enumerate(prefixes):
            counts[tuple(ids[r][:p])] = counts.get(tuple(ids[r][:p]), 0) + 1
        prefixes = [p if counts[tuple(ids[r][:p])] > 1 else 0 for r, p in enumerate(prefixes)]
        return self._values(ids, positions, prefixes)

    def _shared_prefix(self, row: Rendered, ids: list[int]) -> int:
        """How many leading tokens the row shares with ``row.prefix`` tokenized alone (the common
        prefix: a token merged across the prompt's end, such as a trailing space, is left to the
        row). Rows are grouped by their own leading tokens, so any length is exact."""
        if not row.prefix:
            return 0
        key = ("1" if row.chat else "0") + row.prefix
        cached = self._prompt_ids.get(key)
        if cached is None:
            cached = list(self.tokenizer(row.prefix, add_special_tokens=not row.chat)
                          ["input_ids"])
            if len(self._prompt_ids) > 4096:
                self._prompt_ids.clear()
            self._prompt_ids[key] = cached
        n = 0
        for a, b in zip(ids, cached):
            if a != b:
                break
            n += 1
        return n

    def _head_scores(self, picked: Any, ids: list[int], positions: list[int]) -> list[float]:
        """(S, H) hidden states -> S scores (see the module docstring)."""
        import torch

        if not self._pair:  # separator: the two-label classifier (a Linear or an MLP)
            dtype = next(self.head.parameters()).dtype
            logits = self.head(picked.to(dtype)).float()  # (S, L)
            if logits.shape[-1] != 2:
                raise ModelLoadError(f"a separator PRM needs a 2-label head, this one has "
                                     f"{logits.shape[-1]}")
            return logits.softmax(-1)[:, 1].tolist()
        weight = self.head.weight
        bias = self.head.bias[self._pair] if getattr(self.head, "bias", None) is not None \
            else None
        logits = torch.nn.functional.linear(picked.to(weight.dtype), weight[self._pair],
                                            bias).float()  # (S, 2): good, bad
        return logits.softmax(-1)[:, 0].tolist()


def _token_id(tokenizer: Any, token: str, param: str) -> int:
    """The id of ``token`` as the official recipes read it: the tokenizer's own encoding of the
    text alone (no special tokens), which must be one token once a lone leading word-prefix piece
    (``"▁"``) is dropped. So Math-Shepherd's ``"+"`` is the word-initial ``"▁+"`` of its Mistral
    tokenizer (``encode("+ -")[1:]`` in its card) and RLHFlow's is Llama 3's bare ``"+"``
    (``encode("+")[-1]``). A vocabulary entry that encodes otherwise is taken as is."""
    ids = list(tokenizer(token, add_special_tokens=False)["input_ids"])
    if len(ids) == 2 and tokenizer.convert_ids_to_tokens(ids[0]) == "\u2581":
        ids = ids[1:]
    if len(ids) == 1:
        return int(ids[0])
    vocab = tokenizer.get_vocab()
    if token in vocab:
        return int(vocab[token])
    raise ModelLoadError(f"{param}={token!r} is not a single token of this tokenizer (encodes to "
                         f"{ids}); declare PRMFormat({param}=...) as one vocabulary token")
