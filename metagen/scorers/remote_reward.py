"""RemoteRewardModel: an outcome reward model served over HTTP (vLLM or any server that speaks
metagen's plain JSON contract), under the same retry layer and failure semantics as
:class:`~metagen.OpenAIGenerator`.

``api`` picks the wire format (:mod:`metagen.scorers.remote_wire` has the exact shapes):

- ``"pooling"``: vLLM ``POST /pooling`` with ``{"model", "input": [prompt + completion, ...]}``
  (strings: the server tokenizes them with its default ``add_special_tokens=True``, as
  :class:`~metagen.scorers.HFRewardModel` does); ``data[i].data`` is the sequence classifier's
  output vector, activation applied (``vllm serve <rm> --runner pooling``).
- ``"classify"``: vLLM ``POST /classify`` with the same ``input``; the score is
  ``data[i].probs[positive_label]``.

  With ``tokenizer`` (the reward model's own: its folder or a loaded fast tokenizer) the input
  is laid out and tokenized on the client exactly as :class:`~metagen.scorers.HFRewardModel`
  reads it -- a chat prompt through the tokenizer's chat template with the completion as the
  assistant's turn -- and sent as token ids (``input: list[list[int]]``, which recent vLLM
  takes on both endpoints). Without one, chat prompts are refused (``InvalidPromptError``
  naming ``prompts``) for these two apis.
- ``"json"``: ``POST /score`` with ``{"model", "prompts", "completions"}`` ->
  ``{"scores": [float, ...]}`` (prompts may be chat message lists here); the server computes
  the reward however it likes, one finite float per pair, higher is better.

The score is the positive label's value. ``positive_label`` is declared, never guessed: an
index, or a name looked up in ``labels`` (the model's label names in index order; for
``/classify`` the reply's ``label`` is then checked against them). A model with a single
output value (one logit, sigmoid applied by the server) needs none.

Failure semantics (rows C1-C19 apply per request): a request that still fails after the retry
policy raises its typed :class:`~metagen.errors.BackendError` naming this reward model and the
reason; an invalid reply (wrong length, a missing field, NaN or infinity, a non-number) raises
:class:`~metagen.errors.BackendProtocolError` and is not retried. A failed reward call is never
a reward of 0: a strategy that takes this reward sees the exception, not a bad sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.generators.base import Prompt
from metagen.scorers.base import check_same_length, text_only
from metagen.scorers.prm_render import layout
from metagen.scorers.remote_base import RemoteScorer, chunks, load_tokenizer
from metagen.scorers.remote_wire import (
    Api, Label, json_prompt, parse_classified, parse_json_scores, parse_pooled, resolve_label)


class RemoteRewardModel(RemoteScorer):
    """A :class:`~metagen.scorers.RewardModel` over HTTP (see the module docstring).

    ``base_url`` is the server root (``http://host:8000``); ``api_key`` is sent as a bearer
    header only. Connection options (``batch_size``, ``max_concurrency``, ``timeout`` -- the
    deadline of a whole ``score`` call --, ``max_retries``, ``backoff_*``, ``max_retry_after``,
    ``connect_timeout``, ``num_params``) are those of
    :class:`~metagen.scorers.remote_base.RemoteScorer`. Raises ``InvalidParameterError`` naming
    a bad option.
    """

    def __init__(self, base_url: str, model: str, *, api: Api = "pooling",
                 api_key: str | None = None, positive_label: Label = None,
                 labels: Sequence[str] | None = None, tokenizer: Any = None,
                 **options: Any) -> None:
        self.positive = resolve_label(positive_label, labels)
        self.labels = None if labels is None else list(labels)
        self.tokenizer: Any = None if tokenizer is None else load_tokenizer(tokenizer, "")
        super().__init__(base_url, model, api=api, api_key=api_key, **options)

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        """One reward per (prompt, completion), in order; raises the typed error of a failed
        request (see the module docstring)."""
        check_same_length(prompts, completions, "completions")
        if not prompts:
            return []
        pairs = list(zip(prompts, completions))
        if self.api == "json":
            bodies = [{"model": self.model, "prompts": [json_prompt(p) for p, _ in part],
                       "completions": [c for _, c in part]}
                      for part in chunks(pairs, self.batch_size)]
            sizes = [len(b["prompts"]) for b in bodies]
            return self._call(bodies, lambda k, data: parse_json_scores(data, sizes[k]))
        if self.tokenizer is not None:
            inputs: list[Any] = [self._token_ids(p, c) for p, c in pairs]
        else:
            texts = text_only(prompts, "RemoteRewardModel (no tokenizer=)")
            inputs = [p + c for p, c in zip(texts, completions)]
        bodies = [{"model": self.model, "input": part}
                  for part in chunks(inputs, self.batch_size)]
        sizes = [len(b["input"]) for b in bodies]
        if self.api == "classify":
            return self._call(bodies, lambda k, data: parse_classified(
                data, sizes[k], self.positive, self.labels))
        return self._call(bodies, lambda k, data: parse_pooled(data, sizes[k], self.positive,
                                                               self.labels))

    def _token_ids(self, prompt: Prompt, completion: str) -> list[int]:
        """The tokens :class:`~metagen.scorers.HFRewardModel` reads for the pair."""
        lay = layout(self.tokenizer, prompt, completion, special=True)
        return list(self.tokenizer(lay.text, add_special_tokens=lay.special)["input_ids"])
