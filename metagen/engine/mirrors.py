"""Mirrors: requests on a second engine that follow other sequences' tokens, with their own KV.

A model that must read exactly what another engine's sequence holds (a speculative draft model;
the amateur or experts of logit arithmetic) runs on its own :class:`LLMEngine` -- its own block
manager, KV cache, radix cache and continuous batching. Each followed sequence (a ``key``
chosen by the caller) has one *mirror* request there, whose rows are handed to ``driver``
(:mod:`metagen.engine.request_driver`) instead of being sampled. :meth:`Mirrors.sync` makes a
mirror hold exactly a given token list: it rolls the mirror back to the common prefix (keeping
the KV of the tokens it shares) and appends the rest, so the mirror engine's next steps compute
the new tokens and hand the logits of the last one to the driver. A mirror whose request the
mirror engine dropped (an aborted step) is recreated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from metagen.decoding import SequenceState
from metagen.engine.detokenizer import Detokenizer
from metagen.engine.request_driver import RequestDriver
from metagen.engine.sequence import Request
from metagen.types import SamplingParams

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.sequence import Sequence as Seq

MIRROR_PARAMS = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)


class Mirrors:
    """The mirror requests of one engine (see the module docstring); single-threaded."""

    def __init__(self, engine: LLMEngine, driver: RequestDriver) -> None:
        self.engine = engine
        self.driver = driver
        self._rids: dict[int, str] = {}  # key -> mirror request id
        self._keys: dict[str, int] = {}  # mirror request id -> key

    def keys(self) -> list[int]:
        return list(self._rids)

    def request_of(self, key: int) -> Request | None:
        """The live mirror request of ``key``, if any."""
        rid = self._rids.get(key)
        return None if rid is None else self.engine.requests.get(rid)

    def key_of(self, seq: Seq) -> int:
        """The key whose mirror ``seq`` (a sequence of the mirror engine) is."""
        return self._keys[seq.request.request_id]

    def sync(self, key: int, tokens: Sequence[int]) -> Seq | None:
        """The mirror of ``key`` holding exactly ``tokens`` (the last one uncomputed at least),
        or None when the mirror engine cannot hold them (``len(tokens) >= max_model_len``)."""
        eng = self.engine
        if len(tokens) >= eng.max_model_len:
            return None
        rid = self._rids.get(key)
        if rid is not None and rid not in eng.requests:  # dropped by a failed mirror step
            self.forget(key)
            rid = None
        if rid is None:
            rid = eng.new_request_id("mirror")
            req = Request(rid, list(tokens), MIRROR_PARAMS, driver=self.driver)
            self._rids[key], self._keys[rid] = rid, key
            return eng.enqueue(req, SequenceState(MIRROR_PARAMS, list(tokens)),
                               Detokenizer(None, ()))
        seq = eng.requests[rid].seqs[0]
        common, limit = 0, min(len(seq.token_ids), len(tokens))
        while common < limit and seq.token_ids[common] == tokens[common]:
            common += 1
        if common < seq.num_prompt_tokens:  # another prompt under the same key: restart
            self.forget(key)
            return self.sync(key, tokens)
        eng.truncate(seq.seq_id, common, then=tokens[common:])
        return seq

    def forget(self, key: int) -> None:
        """Abort the mirror of ``key`` (its full blocks stay in the mirror's prefix cache)."""
        rid = self._rids.pop(key, None)
        if rid is not None:
            del self._keys[rid]
            self.engine.abort(rid)
