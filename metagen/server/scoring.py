"""Scoring routes over the server's named scorers (``--orm NAME=SPEC``, ``--prm NAME=SPEC``), so a
metagen server is a reward-model server that :class:`~metagen.scorers.RemoteRewardModel` and
:class:`~metagen.scorers.RemoteProcessRewardModel` (``metagen eval --reward pooling+URL...``)
read:

- ``POST /pooling`` -- vLLM's wire shape, for ORMs with a classification or value head
  (:class:`~metagen.scorers.HFRewardModel`): ``{"model": ORM name, "input": str | [str, ...] |
  [[int, ...], ...]}`` -> ``{"object": "list", "data": [{"index": i, "object": "pooling",
  "data": [class values]}], "usage": {...}}``. Strings are tokenized with the ORM's tokenizer
  and its special tokens (vLLM's default); token ids are read as given. ``data`` is the head's
  class vector at the last token, activation applied as vLLM does (1 label: sigmoid; more:
  softmax), so ``pooling+URL?model=NAME`` (``&positive_label=1`` for 2 labels) scores exactly as
  the local folder: the client sends ``prompt + completion`` or, with ``tokenizer=``, the token
  ids :class:`~metagen.scorers.HFRewardModel` reads.

  A generative verifier (a causal LM read by its confidence in the completion,
  :class:`~metagen.scorers.LikelihoodVerifier`: the testbed ORM) needs to know where the
  completion starts, which a pooled sequence does not say: ``/pooling`` refuses it (400 naming
  ``model``) rather than score something else; serve it through ``/score``.
- ``POST /score`` -- metagen's JSON contract (:mod:`metagen.scorers.remote_wire`), for every
  scorer: ``{"model": ORM, "prompts", "completions"}`` -> ``{"scores": [...]}`` (the ORM's own
  ``score``), ``{"model": PRM, "prompts", "steps"}`` -> ``{"step_scores": [[...], ...]}``.
  Prompts are strings or chat message lists.

An unknown ``model`` is a 404 (``model_not_found``), a malformed field a 400 naming it. One
scoring call runs at a time, in a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from metagen.scorers.usage import usage_of
from metagen.server.errors import ApiError, api_error, bad_request

T = TypeVar("T")


class ScoringRoutes:
    """``/pooling`` and ``/score`` over named ORMs and PRMs (see the module docstring)."""

    def __init__(self, rewards: Mapping[str, Any], prms: Mapping[str, Any]) -> None:
        self.rewards, self.prms = dict(rewards), dict(prms)
        self._lock = threading.Lock()

    async def pooling(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The ``/pooling`` reply of ``body``."""
        name, scorer = _named(body, self.rewards, "--orm")
        pool = getattr(scorer, "pool", None)
        if pool is None:
            raise bad_request("model", f"{name!r} is a {type(scorer).__name__}, not a "
                              "classification or value head: /pooling input carries no "
                              "prompt/completion boundary to read it at; use POST /score "
                              f"(json+URL?model={name})")
        ids = _input_ids(body.get("input"), scorer.tokenizer)
        vectors = await self._run(lambda: pool(ids))
        tokens = sum(len(row) for row in ids)
        return {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                "model": name,
                "data": [{"index": i, "object": "pooling", "data": v}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                          "completion_tokens": 0}}

    async def score(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The ``/score`` reply of ``body``: ``completions`` for an ORM, ``steps`` for a PRM."""
        steps = "steps" in body
        if steps == ("completions" in body):
            raise bad_request("completions", "give completions (an ORM) or steps (a PRM)")
        name, scorer = _named(body, self.prms if steps else self.rewards,
                              "--prm" if steps else "--orm")
        field = "steps" if steps else "completions"
        prompts, items = body.get("prompts"), body.get(field)
        if not isinstance(prompts, list) or not prompts:
            raise bad_request("prompts", "prompts must be a non-empty list")
        if not isinstance(items, list) or len(items) != len(prompts):
            raise bad_request(field, f"{field} must be a list of {len(prompts)} items, one per "
                              "prompt")
        before = usage_of(scorer).scorer_tokens
        if steps:
            step_scores = await self._run(lambda: scorer.score_steps(prompts, items))
            out: dict[str, Any] = {"step_scores": step_scores}
        else:
            out = {"scores": await self._run(lambda: scorer.score(prompts, items))}
        return {**out, "model": name,
                "usage": {"prompt_tokens": max(0, usage_of(scorer).scorer_tokens - before)}}

    async def _run(self, call: Callable[[], T]) -> T:
        """``call()`` in a worker thread, one at a time; a refused input is a 400 naming it."""
        def locked() -> T:
            with self._lock:
                return call()
        try:
            return await asyncio.to_thread(locked)
        except ApiError:
            raise
        except ValueError as exc:  # InvalidParameterError / InvalidPromptError: the input
            raise api_error(exc) from None


def _named(body: Mapping[str, Any], scorers: Mapping[str, Any], flag: str) -> tuple[str, Any]:
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise bad_request("model", "model is required: the name of a scorer loaded with "
                          f"{flag} NAME=SPEC")
    if name not in scorers:
        known = ", ".join(repr(k) for k in scorers) or f"none (start the server with {flag})"
        raise ApiError(404, f"the model {name[:100]!r} does not exist; loaded: {known}",
                       param="model", code="model_not_found")
    return name, scorers[name]


def _input_ids(value: Any, tokenizer: Any) -> list[list[int]]:
    """``input`` (a string, strings, or token-id lists) as token-id rows; 400 naming ``input``
    for anything else."""
    rows: Sequence[Any] = [value] if isinstance(value, str) else value
    if not isinstance(rows, list) or not rows:
        raise bad_request("input", "input must be a string, a non-empty list of strings or a "
                          "list of token-id lists")
    if all(isinstance(r, str) and r for r in rows):
        return [list(tokenizer(r, add_special_tokens=True)["input_ids"]) for r in rows]
    if all(isinstance(r, list) and r and all(isinstance(t, int) and not isinstance(t, bool)
                                             for t in r) for r in rows):
        return [list(r) for r in rows]
    raise bad_request("input", "input must be non-empty strings or non-empty token-id lists, "
                      "all of one kind")
