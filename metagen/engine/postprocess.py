"""Postprocess, the last phase of :meth:`~metagen.engine.llm_engine.LLMEngine.step`: stop rules,
finishing a sequence, and assembling the :class:`RequestOutput` of each finished request.

- :func:`stop_rule` decides, after a token is appended to a sampled (or verified) sequence,
  whether the sequence ends and why: a stop token id, end-of-sequence (unless ``ignore_eos``), a
  stop string (looked for only past ``min_tokens``), ``max_tokens`` or the engine's context.
- :func:`finish_sequence` marks a sequence finished (drafts dropped first: they are not output)
  and hands it to the scheduler, which caches and frees its blocks.
- :func:`collect_finished` takes the requests whose sequences have all finished out of the
  engine's tables and returns their outputs (:func:`request_output`).

Functions of what they read and write (no engine object): the engine calls them with its
tables, scheduler and speculator.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, MutableMapping
from typing import TYPE_CHECKING, Protocol

from metagen.engine.outputs import EngineStats, RequestOutput

if TYPE_CHECKING:
    from metagen.engine.sequence import Request, Sequence as Seq

Stop = tuple[str, "str | int | None"]  # (finish_reason, stop_reason)


class FinishSink(Protocol):
    """Where a finished sequence goes: the scheduler (``finish``: cache and free its blocks)."""

    def finish(self, seq: Seq) -> None: ...


class Forgetter(Protocol):
    """A driver keeping per-sequence state (the speculator): ``forget`` drops a finished one's."""

    def forget(self, seq: Seq) -> None: ...


def stop_rule(seq: Seq, tok: int, text_stop: str | None, eos_token_ids: Collection[int],
              max_model_len: int) -> Stop | None:
    """Whether ``seq`` ends on the token ``tok`` just appended to it (its detokenizer's stop
    string match ``text_stop``, None if none): ``("stop", tok)`` for one of the request's
    ``stop_token_ids``, ``("stop", None)`` for end-of-sequence unless ``ignore_eos``,
    ``("stop", text_stop)`` for a stop string, ``("length", None)`` at ``max_tokens`` output
    tokens or ``max_model_len`` tokens in all; else None. The rules apply in that order."""
    p = seq.state.params
    if tok in p.stop_token_ids:
        return "stop", tok
    if tok in eos_token_ids and not p.ignore_eos:
        return "stop", None
    if text_stop is not None:
        return "stop", text_stop
    if len(seq.state.output_ids) >= p.max_tokens or len(seq.token_ids) >= max_model_len:
        return "length", None
    return None


def finish_sequence(seq: Seq, reason: str, stop_reason: str | int | None,
                    scheduler: FinishSink, speculator: Forgetter | None) -> None:
    """End ``seq`` with ``reason`` (``"stop"``, ``"length"``, ``"abort"``, ``"error"``) and
    ``stop_reason``: its unverified drafts are dropped (they are not output, and must not reach
    the prefix cache), the scheduler caches and frees its blocks, its request counts one
    unfinished sequence less and the speculator forgets it. ``seq`` must not be finished."""
    seq.finish_reason, seq.stop_reason = reason, stop_reason
    if seq.num_draft:
        del seq.token_ids[len(seq.token_ids) - seq.num_draft:]
        seq.num_draft, seq.draft_probs = 0, None
        seq.num_computed_tokens = min(seq.num_computed_tokens, len(seq.token_ids))
    scheduler.finish(seq)
    seq.request.num_unfinished -= 1
    if speculator is not None:
        speculator.forget(seq)


def collect_finished(touched: Iterable[Request], requests: MutableMapping[str, Request],
                     seqs: MutableMapping[int, Seq], counters: EngineStats) -> list[RequestOutput]:
    """The outputs of the requests among ``touched`` that have finished and are still in
    ``requests`` (each once, in order of ``touched``); they leave ``requests`` and their
    sequences leave ``seqs``, and their cached prompt tokens are counted in ``counters``."""
    done, seen = [], set()
    for req in touched:
        if id(req) in seen or not req.finished or req.request_id not in requests:
            continue
        seen.add(id(req))
        del requests[req.request_id]
        for seq in req.seqs:
            seqs.pop(seq.seq_id, None)
        counters.cached_prompt_tokens += req.num_cached_tokens
        done.append(request_output(req))
    return done


def request_output(req: Request) -> RequestOutput:
    """The output of the finished request ``req``: its driver's (beam search) with the request's
    compute counters, else one completion per sequence -- with the scores of a scoring request
    (summed and per token, and the top-k and ranks when it asked for them)."""
    if req.driver is not None:
        out = req.driver.output(req)
        out.computed_tokens, out.flops = req.computed_tokens, req.flops
        out.generated_tokens = req.generated_tokens
        return out
    scores = token_scores = tops = ranks = None
    if req.seqs[0].score_from is not None:
        token_scores = [list(s.score_logprobs) for s in req.seqs]
        scores = [float(sum(t)) for t in token_scores]
        if req.seqs[0].score_top is not None:
            tops = [list(s.score_tops) for s in req.seqs]
            ranks = [list(s.score_ranks) for s in req.seqs]
    return RequestOutput(req.request_id, req.prompt_ids, [s.completion() for s in req.seqs],
                         [s.error for s in req.seqs], req.num_cached_tokens, scores,
                         req.computed_tokens, req.generated_tokens, req.flops, token_scores,
                         tops, ranks)
