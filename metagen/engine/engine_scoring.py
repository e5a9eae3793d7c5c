"""Prompt scoring for :class:`~metagen.engine.llm_engine.LLMEngine`: log p(continuation | prompt).

A scoring sequence only prefills ``prompt + continuation`` and collects the log-probabilities of
the continuation's tokens from the logits of every position (the runner's ``all_logits`` mode).
Its prefix-cache match is capped so the logits of the prompt's last token are computed. When a
prompt has several continuations it is first prefilled alone and cached, so each continuation
only computes its own tokens (plus the partial last block of the prompt).

Failures are per item, as in generation: an item with ids outside the vocabulary, too long, a
bad conditioning length ``k``, or a non-finite log-probability fails alone. With ``errors="raise"`` (the default) the call raises the first failure; with
``errors="return"`` the failed item's slot holds its exception and every other item is scored as
in a call without the failed ones. A sequence whose log-probabilities turn non-finite stops at
once and its KV blocks are not put in the prefix cache.

:class:`EngineScorer` is a collaborator of :class:`~metagen.engine.llm_engine.LLMEngine` that
uses only its public operations (``enqueue``, ``run_until_done``, ``abort``, its sizes);
the engine's step hands each scoring row's logits to
:func:`~metagen.engine.score_rows.collect_scores`, a function of the sequence and the logits that
says whether the sequence is done.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from metagen.decoding import SequenceState
from metagen.engine.detokenizer import Detokenizer
from metagen.engine.sequence import Request
from metagen.engine.validation import check_prompt_ids
from metagen.errors import InvalidParameterError, InvalidPromptError, MetagenError, NumericalError
from metagen.types import SamplingParams

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine

_SCORE_PARAMS = SamplingParams(temperature=0.0, max_tokens=1)
ScoreErrors = Literal["raise", "return"]
_Checked = tuple[list[int], int] | MetagenError  # a validated (ids, k), or why it is not
# run(make): add make()'s requests, run them to completion, return their outputs in order
RunRequests = Callable[[Callable[[], list[str]]], list[Any]]


class EngineScorer:
    """``score`` / ``score_sequences`` over an engine (see the module docstring)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine

    def add_scoring_request(self, tokens: list[int], score_from: int, top: int | None = None
                            ) -> str:
        """Queue a prefill-only request scoring ``tokens[score_from:]`` (already validated:
        use :meth:`score_sequences` for checked, blocking scoring). Its output's ``scores[0]``
        is the summed log-probability, ``token_scores[0]`` the per-token ones; ``error`` is a
        NumericalError if one was not finite. With ``top`` (>= 0), ``token_tops[0]`` holds
        each scored position's ``top`` most likely tokens (as generation's ``top_logprobs``)
        and ``token_ranks[0]`` the rank of the scored token there (1 = most likely)."""
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise InvalidParameterError("top", top, "must be None or an integer >= 0")
        req = Request(self.engine.new_request_id("score"), tokens, _SCORE_PARAMS)
        state = SequenceState(_SCORE_PARAMS, list(tokens))
        seq = self.engine.enqueue(req, state, Detokenizer(None, ()))
        seq.score_from = score_from
        seq.score_top = top
        return req.request_id

    @overload
    def score(self, prompts: Sequence[Sequence[int]],
              continuations: Sequence[Sequence[Sequence[int]]], *,
              errors: Literal["raise"] = "raise") -> list[list[float]]: ...

    @overload
    def score(self, prompts: Sequence[Sequence[int]],
              continuations: Sequence[Sequence[Sequence[int]]], *,
              errors: Literal["return"]) -> list[list[float | MetagenError]]: ...

    def score(self, prompts: Sequence[Sequence[int]],
              continuations: Sequence[Sequence[Sequence[int]]], *,
              errors: ScoreErrors = "raise") -> list[list[Any]]:
        """``out[i][j]`` = sum of log p(continuations[i][j][t] | prompts[i] + earlier tokens).

        An empty continuation scores 0. A prompt/continuation pair that cannot be scored fails
        alone as described in :meth:`score_sequences`; ``prompts`` and ``continuations`` of
        different lengths always raise :class:`InvalidPromptError`.
        """
        _check_errors_mode(errors)
        if len(prompts) != len(continuations):
            raise InvalidPromptError("continuations", f"<{len(continuations)} lists>",
                                     f"need one list per prompt ({len(prompts)})")
        checked = [self._check_item(_joined(p, c)) for p, cs in zip(prompts, continuations)
                   for c in cs]
        flat = iter(self._score_checked(checked, errors, self._run_here))
        return [[next(flat) for _ in cs] for cs in continuations]

    @overload
    def score_sequences(self, items: Sequence[tuple[Sequence[int], int]], *,
                        errors: Literal["raise"] = "raise", run: RunRequests | None = None
                        ) -> list[float]: ...

    @overload
    def score_sequences(self, items: Sequence[tuple[Sequence[int], int]], *,
                        errors: Literal["return"], run: RunRequests | None = None
                        ) -> list[float | MetagenError]: ...

    def score_sequences(self, items: Sequence[tuple[Sequence[int], int]], *,
                        errors: ScoreErrors = "raise", run: RunRequests | None = None
                        ) -> list[Any]:
        """For each ``(ids, k)`` with ``1 <= k <= len(ids)``: sum over ``t >= k`` of
        log p(ids[t] | ids[:t]). All valid items run as one batch of prefill-only sequences.

        Every item is validated first (ids in the vocabulary, length within the context, ``k``
        in range): a bad one is an :class:`InvalidPromptError`; a non-finite score is a
        :class:`NumericalError` whose ``row`` is the item's index. ``errors="raise"`` raises
        the first invalid item before any work, or else the first numerical failure after the
        batch ran; ``errors="return"`` puts each exception in its item's slot. Either way the
        engine stays usable and holds no block for these requests afterwards (beyond the
        prefix cache). When several valid items share their conditioning prefix ``ids[:k]``,
        it is prefilled once and cached first.

        ``run(make)`` runs the requests that ``make()`` adds to this engine until they finish
        and returns their outputs; by default it steps the engine here. A loop that owns the
        engine passes its own, so that ``make()`` runs in the loop's thread.
        """
        _check_errors_mode(errors)
        return self._score_checked([self._check_item(item) for item in items], errors,
                                   run or self._run_here)

    def _check_item(self, item: Any) -> _Checked:
        """``(ids, k)`` validated, or the InvalidPromptError saying why not (not raised)."""
        if isinstance(item, MetagenError):
            return item
        try:
            ids, k = item
        except (TypeError, ValueError):
            return InvalidPromptError("item", item, "must be a pair (token ids, k)")
        try:
            ids = check_prompt_ids(ids, self.engine.vocab_size, self.engine.max_model_len + 1, "continuation")
        except InvalidPromptError as exc:
            return exc
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= len(ids):
            return InvalidPromptError("prompt", k, "the conditioning prefix must hold "
                                      "between 1 token and the whole sequence")
        return ids, k

    def _score_checked(self, checked: list[_Checked], errors: ScoreErrors,
                       run: RunRequests) -> list[Any]:
        if errors == "raise":
            first = next((c for c in checked if isinstance(c, MetagenError)), None)
            if first is not None:
                raise first
        good = [c for c in checked if not isinstance(c, MetagenError)]
        warm = self._shared_heads(good)
        if warm:
            run(lambda: [self.add_scoring_request(h, len(h)) for h in warm])
        todo = [c for c in checked if not isinstance(c, MetagenError) and c[1] < len(c[0])]
        outs = iter(run(lambda: [self.add_scoring_request(*c) for c in todo]))
        result: list[Any] = []
        for i, c in enumerate(checked):
            if isinstance(c, MetagenError):
                result.append(c)
            elif c[1] == len(c[0]):
                result.append(0.0)  # empty continuation
            else:
                out = next(outs)
                r = out.request_id
                v = out.scores[0]  # type: ignore[index]
                err = out.error
                if err is None and not math.isfinite(v):
                    err = NumericalError(f"score of request {r} is {v}", row=i)
                if isinstance(err, NumericalError) and err.row is None:
                    err.row = i
                result.append(v if err is None else err)
        if errors == "raise":
            first = next((v for v in result if isinstance(v, MetagenError)), None)
            if first is not None:
                raise first
        return result

    def _shared_heads(self, checked: list[tuple[list[int], int]]) -> list[list[int]]:
        """Each conditioning prefix longer than a block that several items share: prefilled and
        cached first, each of them then computes only its own tokens."""
        if self.engine.radix is None:
            return []
        heads: dict[tuple[int, ...], int] = {}
        for ids, k in checked:
            if k < len(ids) and k > self.engine.config.block_size:
                heads[tuple(ids[:k])] = heads.get(tuple(ids[:k]), 0) + 1
        return [list(h) for h, count in heads.items() if count > 1]

    def _run_here(self, make: Callable[[], list[str]]) -> list[Any]:
        """Add ``make()``'s requests and step until they finish; abort them (freeing their
        blocks) if that raises."""
        rids = make()
        try:
            return self.engine.run_until_done(rids)
        except BaseException:
            for r in rids:
                self.engine.abort(r)
            raise


def _check_errors_mode(errors: Any) -> None:
    if errors not in ("raise", "return"):
        raise InvalidParameterError("errors", errors, 'must be "raise" or "return"')


def _joined(prompt: Any, continuation: Any) -> tuple[list[int], int] | InvalidPromptError:
    """The ``(prompt + continuation, len(prompt))`` item of :meth:`EngineScorer.score`."""
    for name, part in (("prompt", prompt), ("continuation", continuation)):
        if isinstance(part, (str, bytes)) or not isinstance(part, Sequence):
            return InvalidPromptError(name, part, "must be a list of token ids")
    return list(prompt) + list(continuation), len(prompt)
