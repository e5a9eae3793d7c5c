"""RemoteProcessRewardModel: a process reward model served over HTTP, under the same retry layer
and failure semantics as :class:`~metagen.scorers.RemoteRewardModel` (a failed call raises its
typed :class:`~metagen.errors.BackendError` naming the model; it is never a step score).

``api`` (exact shapes in :mod:`metagen.scorers.remote_wire`):

- ``"json"``: ``POST /score`` with ``{"model", "prompts", "steps": [[str, ...], ...]}`` ->
  ``{"step_scores": [[float, ...], ...]}``, one finite float per step; the server lays the
  steps out for its model itself.
- ``"pooling"``: vLLM ``POST /pooling`` on a token classifier served with token-wise pooling
  (``vllm serve <prm> --runner pooling``: Qwen2.5-Math-PRM's ``*ForProcessRewardModel``, any
  ``*ForTokenClassification``), whose ``data[i].data`` has one output vector per token of the
  input. The text is laid out exactly as the local PRM reads it -- ``format=None``: ``prompt +
  "".join(steps)`` (a chat prompt: its chat template with the steps as the assistant's turn),
  read at each step's last token (as :class:`~metagen.scorers.HFProcessRewardModel`); a
  ``"separator"`` :class:`PRMFormat`:
  rendered by :func:`~metagen.scorers.prm_render.render_steps`, read at each separator (as
  :class:`~metagen.scorers.FormattedPRM`). The step positions are found on the client: vLLM's
  ``/tokenize`` gives no character offsets, so the client tokenizes with the reward model's
  own ``tokenizer`` (its folder or a loaded fast tokenizer), finds the positions with the same
  code as the local PRMs, and sends the token ids as ``PoolingCompletionRequest.input``
  (``list[list[int]]``), which the server pools as given. A reply whose ``data[i].data`` does
  not have one row per token sent is a :class:`~metagen.errors.BackendProtocolError`. The step
  score is the row's ``positive_label`` value (index 1 for Qwen2.5-Math-PRM; none needed for
  a one-value head).
- ``"classify"`` gives one value per sequence, not per step: refused (``CapabilityError``).

Token-probability layouts (step-tag, chat-turns, generative) need next-token logits at the
score positions, which ``/pooling`` of a classifier does not return: serve those behind the
JSON contract (``CapabilityError`` otherwise).

``score(prompts, completions)`` splits each completion into steps (``format.step_delimiter``,
or lines when there is no format) and aggregates its step scores with ``aggregation``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Prompt
from metagen.scorers.base import StepAggregation, aggregate_steps, check_step_chains
from metagen.scorers.hf_reward import step_positions, split_steps
from metagen.scorers.prm_format import PRMFormat, resolve_format
from metagen.scorers.prm_render import layout, render_steps, tokenize_rendered
from metagen.scorers.remote_base import RemoteScorer, chunks, load_tokenizer
from metagen.scorers.remote_wire import (
    Api, Label, json_prompt, parse_json_steps, parse_token_pooled, resolve_label)


class RemoteProcessRewardModel(RemoteScorer):
    """A :class:`~metagen.scorers.ProcessRewardModel` over HTTP (see the module docstring).

    ``format`` (a :data:`~metagen.scorers.PRM_PRESETS` name or a :class:`PRMFormat`) and
    ``tokenizer`` matter for ``api="pooling"``; with ``api="json"`` the format only tells
    ``score`` how to split completions. Other options as
    :class:`~metagen.scorers.RemoteRewardModel`. Raises ``CapabilityError`` for an api/format
    pair that cannot give step scores, ``InvalidParameterError`` for a bad option, and
    ``ModelLoadError`` for a tokenizer that cannot be loaded or has no offsets.
    """

    def __init__(self, base_url: str, model: str, *, api: Api = "json",
                 api_key: str | None = None, format: str | PRMFormat | None = None,
                 tokenizer: Any = None, positive_label: Label = None,
                 labels: Sequence[str] | None = None, aggregation: StepAggregation = "last",
                 **options: Any) -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        self.format = None if format is None else resolve_format(format)
        self.positive = resolve_label(positive_label, labels)
        self.aggregation = aggregation
        if api == "classify":
            raise CapabilityError("/classify returns one value per sequence, a process reward "
                                  "needs one per step: use api='pooling' (a token classifier) "
                                  "or api='json'")
        self.tokenizer: Any = None
        if api == "pooling":
            if self.format is not None and self.format.kind != "separator":
                raise CapabilityError(
                    f"a {self.format.kind!r} PRM reads next-token probabilities, which vLLM's "
                    "/pooling of a classifier does not return; serve it behind api='json'")
            self.tokenizer = load_tokenizer(tokenizer, "for api='pooling' (token ids and step "
                                            "positions)")
        super().__init__(base_url, model, api=api, api_key=api_key, **options)

    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        """One score per step of each (prompt, steps) pair; raises the typed error of a failed
        request (never a made-up score)."""
        check_step_chains(prompts, steps)
        if not prompts:
            return []
        if self.api == "json":
            pairs = list(zip(prompts, steps))
            bodies = [{"model": self.model, "prompts": [json_prompt(p) for p, _ in part],
                       "steps": [list(chain) for _, chain in part]}
                      for part in chunks(pairs, self.batch_size)]
            lengths = [[len(chain) for chain in b["steps"]] for b in bodies]
            return self._call(bodies, lambda k, data: parse_json_steps(data, lengths[k]))
        rows = [self._encode(prompt, chain) for prompt, chain in zip(prompts, steps)]
        parts = chunks(rows, self.batch_size)
        bodies = [{"model": self.model, "input": [ids for ids, _ in part]} for part in parts]
        return self._call(bodies, lambda k, data: parse_token_pooled(
            data, [pos for _, pos in parts[k]], [len(ids) for ids, _ in parts[k]],
            self.positive))

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        """Step scores of each completion aggregated with ``aggregation``."""
        delimiter = None if self.format is None else self.format.step_delimiter
        chains = [split_steps(c) if delimiter is None
                  else [s for s in c.split(delimiter) if s.strip()] for c in completions]
        if any(not chain for chain in chains):
            raise InvalidParameterError("completions", completions,
                                        "a completion with no non-blank step has no score")
        return [aggregate_steps(s, self.aggregation) for s in self.score_steps(prompts, chains)]

    def _encode(self, prompt: Prompt, chain: Sequence[str]) -> tuple[list[int], list[int]]:
        """(token ids, step score positions) of one row, laid out as the local PRM reads it."""
        if self.format is not None:
            return tokenize_rendered(self.tokenizer,
                                     render_steps(self.format, self.tokenizer, prompt, chain))
        lay = layout(self.tokenizer, prompt, "".join(chain), special=True)
        enc = self.tokenizer(lay.text, add_special_tokens=lay.special,
                             return_offsets_mapping=True, return_special_tokens_mask=True)
        return list(enc["input_ids"]), step_positions(lay.step_ends(chain), enc)
