"""Request bodies and strict reply parsing for remote reward models, as pure functions.

Three wire formats (``api``):

- ``"pooling"`` -- vLLM's ``POST /pooling`` (``PoolingCompletionRequest``): ``{"model", "input"}``
  where ``input`` is a list of strings or a list of token-id lists; the reply
  (``PoolingResponse``) is ``{"data": [{"index", "object": "pooling", "data"}], "usage":
  {"prompt_tokens", ...}}`` with ``data[i].data`` the pooled output: one vector (``list[float]``)
  per sequence for a sequence classifier, one vector per token (``list[list[float]]``) for a
  token classifier, with the server's activation applied (softmax / sigmoid: vLLM's default
  ``use_activation``).
- ``"classify"`` -- vLLM's ``POST /classify`` (``ClassificationCompletionRequest``):
  ``{"model", "input": [str, ...]}``; the reply (``ClassificationResponse``) has
  ``data[i] = {"index", "label", "probs", "num_classes"}`` (newer vLLM: ``"probabilities"``).
- ``"json"`` -- metagen's plain contract, ``POST /score``: ``{"model", "prompts", "completions"}``
  -> ``{"scores": [float, ...]}`` and ``{"model", "prompts", "steps"}`` ->
  ``{"step_scores": [[float, ...], ...]}``; an optional ``"usage": {"prompt_tokens": int}``.

Every parser checks the reply strictly -- one item per input with each ``index`` once, the
right number of values, finite real numbers -- and raises
:class:`~metagen.errors.BackendProtocolError` (never ``IndexError`` / ``KeyError``, never a
made-up score). Items are returned in input order (by ``index``, not reply order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from metagen.errors import (
    BackendProtocolError, InvalidParameterError, InvalidPromptError, NumericalError)
from metagen.scorers.callables import check_scores
from metagen.generators.base import Prompt

Api = Literal["pooling", "classify", "json"]
APIS: tuple[Api, ...] = ("pooling", "classify", "json")
PATHS: dict[Api, str] = {"pooling": "/pooling", "classify": "/classify", "json": "/score"}
Label = int | str | None


def invalid(message: str, cause: BaseException | None = None) -> BackendProtocolError:
    return BackendProtocolError(f"invalid reward reply: {message}", cause=cause)


def scores_of(values: Any, n: int, what: str) -> list[float]:
    """``n`` finite numbers from a reply field (else ``BackendProtocolError``)."""
    try:
        return check_scores(values, n, who=f"the server's {what}")
    except (TypeError, ValueError, NumericalError) as exc:
        raise invalid(str(exc), exc) from None


def reply_tokens(data: Any) -> int | None:
    """``usage.prompt_tokens`` (else ``total_tokens``) of a reply; None when absent."""
    usage = data.get("usage") if isinstance(data, Mapping) else None
    if isinstance(usage, Mapping):
        for key in ("prompt_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


def items_of(data: Any, n: int) -> list[Mapping[str, Any]]:
    """The ``data`` items of a vLLM pooling/classify reply, in input order."""
    items = data.get("data") if isinstance(data, Mapping) else None
    if not isinstance(items, list) or len(items) != n:
        got = len(items) if isinstance(items, list) else type(items).__name__
        raise invalid(f"'data' must be a list of {n} items, got {got}")
    out: list[Mapping[str, Any] | None] = [None] * n
    for item in items:
        index = item.get("index") if isinstance(item, Mapping) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n \
                or out[index] is not None:
            raise invalid(f"item index {index!r} is not a new index in [0, {n})")
        out[index] = item
    return [item for item in out if item is not None]


def pick(vector: Any, positive: int | None, what: str) -> float:
    """The positive label's value in one classifier output: a single value needs no label, a
    vector of several needs ``positive`` (declared, never guessed)."""
    if isinstance(vector, (int, float)) and not isinstance(vector, bool):
        vector = [vector]
    if not isinstance(vector, list) or not vector:
        raise invalid(f"{what} must be a non-empty list of numbers, got {vector!r:.80}")
    if len(vector) == 1 and positive in (None, 0):
        return scores_of(vector, 1, what)[0]
    if positive is None:
        raise InvalidParameterError("positive_label", None, f"the reward model returns "
                                    f"{len(vector)} class values; declare which one is the "
                                    "positive label (an index, or a name with labels=...)")
    if positive >= len(vector):
        raise invalid(f"{what} has {len(vector)} values, positive_label is index {positive}")
    return scores_of([vector[positive]], 1, what)[0]


def resolve_label(positive_label: Label, labels: Sequence[str] | None) -> int | None:
    """The index of the declared positive label (a name is looked up in ``labels``)."""
    if labels is not None and (isinstance(labels, str) or not all(
            isinstance(x, str) for x in labels) or len(set(labels)) != len(labels)):
        raise InvalidParameterError("labels", labels, "must be the model's distinct label "
                                    "names in index order")
    if positive_label is None:
        return None
    if isinstance(positive_label, bool) or not isinstance(positive_label, (int, str)):
        raise InvalidParameterError("positive_label", positive_label, "must be an index, a "
                                    "label name or None")
    if isinstance(positive_label, int):
        if positive_label < 0 or (labels is not None and positive_label >= len(labels)):
            raise InvalidParameterError("positive_label", positive_label,
                                        "must be a valid label index")
        return positive_label
    if labels is None or positive_label not in labels:
        raise InvalidParameterError("positive_label", positive_label, "a label name needs "
                                    "labels=[the model's label names in index order] "
                                    "containing it")
    return list(labels).index(positive_label)


def parse_pooled(data: Any, n: int, positive: int | None,
                 labels: Sequence[str] | None = None) -> list[float]:
    """One score per input of a ``/pooling`` reply of a sequence classifier. With ``labels``
    declared, each vector must hold one value per label: vLLM answers ``/pooling`` of a causal
    LM served with ``--runner pooling`` (and no ``--convert classify``) with its embedding, whose
    "positive label" would be one coordinate of a hidden state."""
    items = items_of(data, n)
    if labels is not None:
        for i, item in enumerate(items):
            vector = item.get("data")
            if isinstance(vector, list) and len(vector) != len(labels):
                raise invalid(f"data[{i}].data has {len(vector)} values for {len(labels)} "
                              "declared labels: not this classifier's output (a causal LM "
                              "served with --runner pooling is an embedding model)")
    return [pick(item.get("data"), positive, f"data[{i}].data")
            for i, item in enumerate(items)]


def parse_token_pooled(data: Any, positions: Sequence[Sequence[int]], lengths: Sequence[int],
                       positive: int | None) -> list[list[float]]:
    """The scores at ``positions[i]`` of a ``/pooling`` reply of a token classifier; input ``i``
    had ``lengths[i]`` tokens, and its reply must have one row per token."""
    out = []
    for i, item in enumerate(items_of(data, len(positions))):
        rows = item.get("data")
        if not isinstance(rows, list) or len(rows) != lengths[i]:
            got = len(rows) if isinstance(rows, list) else type(rows).__name__
            raise invalid(f"data[{i}].data must have one row per token ({lengths[i]}), got "
                          f"{got} (is the server pooling per token?)")
        out.append([pick(rows[p], positive, f"data[{i}].data[{p}]") for p in positions[i]])
    return out


def parse_classified(data: Any, n: int, positive: int | None,
                     labels: Sequence[str] | None) -> list[float]:
    """The positive label's probability per input of a ``/classify`` reply. When ``labels``
    are declared the reply's ``label`` (its argmax) must agree with them."""
    out = []
    for i, item in enumerate(items_of(data, n)):
        probs = item.get("probs", item.get("probabilities"))
        values = scores_of(probs, len(probs) if isinstance(probs, list) else -1,
                           f"data[{i}].probs")
        classes = item.get("num_classes", len(values))
        if classes != len(values) or (labels is not None and len(labels) != len(values)):
            raise invalid(f"data[{i}] has {len(values)} probabilities for num_classes="
                          f"{classes!r} and {len(labels or values)} declared labels")
        label = item.get("label")
        if labels is not None and label is not None \
                and label != labels[max(range(len(values)), key=values.__getitem__)]:
            raise invalid(f"data[{i}].label {label!r} is not the declared name of its most "
                          f"probable class; check labels={list(labels)!r}")
        out.append(pick(values, positive, f"data[{i}].probs"))
    return out


def parse_json_scores(data: Any, n: int) -> list[float]:
    """``{"scores": [n floats]}`` of the plain contract."""
    scores = data.get("scores") if isinstance(data, Mapping) else None
    if not isinstance(scores, list):
        raise invalid(f"expected {{'scores': [...]}}, got {str(data)[:80]!r}")
    return scores_of(scores, n, "scores")


def parse_json_steps(data: Any, lengths: Sequence[int]) -> list[list[float]]:
    """``{"step_scores": [[one float per step], ...]}`` of the plain contract."""
    rows = data.get("step_scores") if isinstance(data, Mapping) else None
    if not isinstance(rows, list) or len(rows) != len(lengths):
        raise invalid(f"expected {{'step_scores': [{len(lengths)} lists]}}, got "
                      f"{str(data)[:80]!r}")
    return [scores_of(row, k, f"step_scores[{i}]") for i, (row, k)
            in enumerate(zip(rows, lengths))]


def json_prompt(prompt: Prompt) -> Any:
    """A prompt for the plain contract: a string as is, chat messages as plain dicts."""
    if isinstance(prompt, str):
        return prompt
    try:
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    except (TypeError, KeyError) as exc:
        raise InvalidPromptError("prompts", prompt, "must be a string or a list of "
                                 "{'role', 'content'} messages") from exc
