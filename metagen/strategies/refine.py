"""Refinement: attempt, get feedback, try again with the feedback in the prompt.

- :func:`refine_with_feedback` — the feedback is external and injected: a verifier's message,
  failing test output, a compiler error (Chen et al. 2024, "Teaching Large Language Models to
  Self-Debug"). ``feedback(prompt, attempt) -> Feedback(ok, message, score)``.
  Each round of feedback counts as one ``scorer_calls`` in the usage.
- :func:`self_refine` — the model critiques its own attempt and rewrites it (Madaan et al. 2023,
  "Self-Refine"); the critique is a generation from ``critique_template``, and the loop ends when
  it contains ``stop_phrase``.

A chain stops on **success** (``Feedback.ok``), on **no progress** (an attempt repeats an earlier
one, or its score has not beaten the best score for ``patience`` attempts), after
``max_attempts`` attempts, or on the **budget** (checked before every call; ``max_tokens`` sized
so ``Budget.max_generated_tokens`` is never exceeded; an attempt the cap cut short is kept but
gets no feedback). All live chains advance together: one
generate call per round for all prompts' attempts (and, for self-refine, one for their critiques).
The answer is the successful attempt, else the highest-scored one (ties: the earlier), else the
last. ``Result.trace["chain"]`` lists every attempt with its feedback, score and tokens;
``trace["stop_reason"]`` says why the chain ended.

Prompts are strings or chat messages. A text prompt's next attempt is asked with a text
template; a chat prompt's as a conversation (the attempt as the assistant's turn, the feedback
as the user's next turn, then a new assistant turn), see :mod:`metagen.strategies.refine_prompts`.
``feedback`` and ``score`` receive the original prompt as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.feedback import Feedback, FeedbackFn  # noqa: F401 (re-exported)
from metagen.generators.base import Generator, Prompt
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.refine_prompts import (  # noqa: F401 (the templates are re-exported)
    CRITIQUE_TEMPLATE,
    CRITIQUE_TURN,
    FEEDBACK_TEMPLATE,
    FEEDBACK_TURN,
    REFINE_TEMPLATE,
    REFINE_TURN,
    check_turn,
    critique_prompt,
    feedback_prompt,
    refine_prompt,
)
from metagen.strategies.step_beam import positive_int
from metagen.strategies.step_search import StepSearch
from metagen.types import Completion, Result, SamplingParams
from metagen.strategies.spec import StrategySpec, param


@dataclass(slots=True)
class Chain:
    """One prompt's refinement chain."""

    prompt: Prompt
    attempts: list[dict[str, Any]] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    next_prompt: Prompt = ""
    best_score: float | None = None
    stale: int = 0
    stop_reason: str | None = None
    tokens: int = 0


class RefineRun(StepSearch):
    """Budget, usage and batched generation of a refinement run (no step scorer)."""

    def __init__(self, name: str, generator: Generator, prompts: Sequence[Prompt],
                 params: SamplingParams | None, budget: Budget) -> None:
        super().__init__(name, generator, prompts, None, params=params, budget=budget)

    def generate_one(self, prefixes: list[Prompt], params: SamplingParams | None = None,
                     chains: Sequence[int] | None = None) -> list[Completion] | None:
        """One completion per prefix, in one call; ``None`` when the budget forbids it.
        ``chains[i]``: the prompt (chain) prefix ``i`` serves, charged its usage."""
        p = params or self.params
        out = self.continue_prefixes(prefixes, [1] * len(prefixes), p.with_(n=1), chains)
        return None if out is None else [c[0] for c in out]

    def count_feedback_call(self) -> None:
        self._own_scorer_calls += 1

    def cut_by_budget(self, c: Completion) -> bool:
        """True when ``c`` was cut short by the budget's token cap (it gets no feedback)."""
        info: dict[str, Any] = {}
        self._note_cut(info, c)
        return bool(info)


def _record_cut(chain: Chain, c: Completion) -> None:
    chain.attempts.append({"attempt": len(chain.attempts), "text": c.text,
                           "tokens": c.num_tokens, "finish_reason": c.finish_reason,
                           "budget_cut": True})
    chain.completions.append(c)
    chain.tokens += c.num_tokens
    chain.stop_reason = "budget"


def _record(run: RefineRun, i: int, chain: Chain, c: Completion, fb: Feedback | None,
            patience: int, max_attempts: int, extra: dict[str, Any] | None = None) -> None:
    """Add an attempt to a chain and decide whether the chain stops."""
    entry: dict[str, Any] = {"attempt": len(chain.attempts), "text": c.text,
                             "tokens": c.num_tokens, "finish_reason": c.finish_reason}
    chain.tokens += c.num_tokens
    if fb is None:  # a failed sample: counted, retried with the same prompt
        run.failures[i]["generation_error"] += 1
        entry["error"] = True
    else:
        entry.update(ok=fb.ok, feedback=fb.message, score=fb.score)
        repeated = any(a.get("text") == c.text and not a.get("error") for a in chain.attempts)
        if fb.score is not None and (chain.best_score is None or fb.score > chain.best_score):
            chain.best_score, chain.stale = fb.score, 0
        else:
            chain.stale += 1
        if fb.ok:
            chain.stop_reason = "success"
        elif repeated or (chain.best_score is not None and chain.stale >= patience):
            chain.stop_reason = "no_progress"
    entry.update(extra or {})
    chain.attempts.append(entry)
    chain.completions.append(c)
    if chain.stop_reason is None and len(chain.attempts) >= max_attempts:
        chain.stop_reason = "max_attempts"


def _record_unreviewed(chain: Chain, c: Completion, max_attempts: int) -> None:
    """Keep an attempt that got no critique (budget, failed critique) as a candidate."""
    chain.attempts.append({"attempt": len(chain.attempts), "text": c.text,
                           "tokens": c.num_tokens, "finish_reason": c.finish_reason,
                           "feedback": None})
    chain.completions.append(c)
    chain.tokens += c.num_tokens
    if len(chain.attempts) >= max_attempts:
        chain.stop_reason = "max_attempts"


def _results(run: RefineRun, chains: list[Chain], trace: dict[str, Any]) -> list[Result]:
    total = run.usage()
    out = []
    usages = run.prompt_usages([c.tokens for c in chains])
    for i, (chain, usage) in enumerate(zip(chains, usages)):
        good = [k for k, a in enumerate(chain.attempts) if not a.get("error")]
        ok = [k for k in good if chain.attempts[k].get("ok")]
        scored = [k for k in good if chain.attempts[k].get("score") is not None]
        best: int | None
        if ok:
            best = ok[0]
        elif scored:
            best = min(scored, key=lambda k: (-chain.attempts[k]["score"], k))
        else:
            best = good[-1] if good else None
        info = {"strategy": run.name, "chain": chain.attempts, "best_attempt": best,
                "stop_reason": chain.stop_reason or ("budget" if run.stopped_by_budget
                                                     else None),
                "batch_usage": total.to_dict(), "batch_size": len(chains)}
        info.update(trace)
        out.append(Result(
            best=None if best is None else chain.completions[best],
            candidates=[chain.completions[k] for k in good],
            scores=[chain.attempts[k].get("score") for k in good], usage=usage, trace=info,
            stopped_by_budget=chain.stop_reason == "budget"
            or (run.stopped_by_budget and chain.stop_reason is None),
            failures=dict(run.failures[i])))
    return out


def _check_common(max_attempts: int, patience: int, template: str, *keys: str) -> None:
    positive_int("max_attempts", max_attempts)
    positive_int("patience", patience)
    for key in keys:
        if "{" + key + "}" not in template:
            raise InvalidParameterError("template", template, f"must contain {{{key}}}")


def refine_with_feedback(generator: Generator, prompts: Sequence[Prompt], feedback: FeedbackFn, *,
                         max_attempts: int = 4, patience: int = 1,
                         template: str = FEEDBACK_TEMPLATE, feedback_turn: str = FEEDBACK_TURN,
                         params: SamplingParams | None = None,
                         budget: Budget = UNLIMITED) -> list[Result]:
    """Refinement with external feedback over a list of prompts; one Result per prompt.

    A text prompt's next attempt is asked with ``template`` (``{prompt}``, ``{attempt}``: the
    last attempt, ``{feedback}``: its message); a chat prompt's with the conversation
    ``messages + [assistant: attempt, user: feedback_turn]`` (``{feedback}`` in it).
    ``feedback`` is called once per attempt; a raising feedback source propagates.
    """
    _check_common(max_attempts, patience, template, "prompt", "attempt", "feedback")
    check_turn("feedback_turn", feedback_turn, "feedback")
    if not callable(feedback):
        raise InvalidParameterError("feedback", feedback, "must be callable(prompt, attempt)")
    run = RefineRun("refine_with_feedback", generator, prompts, params, budget)
    chains = [Chain(t.prompt, next_prompt=t.prompt) for t in run.trees]
    while True:
        live = [i for i, ch in enumerate(chains) if ch.stop_reason is None]
        if not live:
            break
        outs = run.generate_one([chains[i].next_prompt for i in live], chains=live)
        if outs is None:
            break
        run.count_feedback_call()
        for i, c in zip(live, outs):
            ch = chains[i]
            if run.cut_by_budget(c):
                _record_cut(ch, c)
                continue
            fb = None if c.finish_reason == "error" else feedback(ch.prompt, c.text)
            if fb is not None and not isinstance(fb, Feedback):
                raise InvalidParameterError("feedback", fb, "must return a Feedback")
            _record(run, i, ch, c, fb, patience, max_attempts)
            if fb is not None:
                ch.next_prompt = feedback_prompt(ch.prompt, c.text, fb.message, template,
                                                 feedback_turn)
    return _results(run, chains, {"max_attempts": max_attempts, "patience": patience})


def self_refine(generator: Generator, prompts: Sequence[Prompt], *, max_attempts: int = 4,
                stop_phrase: str = "NO ISSUES", score: Callable[[Prompt, str], float] | None = None,
                patience: int = 1, critique_template: str = CRITIQUE_TEMPLATE,
                refine_template: str = REFINE_TEMPLATE, critique_turn: str = CRITIQUE_TURN,
                refine_turn: str = REFINE_TURN, params: SamplingParams | None = None,
                critique_params: SamplingParams | None = None,
                budget: Budget = UNLIMITED) -> list[Result]:
    """Self-Refine over a list of prompts; one Result per prompt.

    Each round: one call for the live chains' attempts, one for their critiques
    (``critique_template`` with ``{prompt}``, ``{attempt}``); success when the critique contains
    ``stop_phrase``. The next attempt's prompt is ``refine_template`` with ``{prompt}``,
    ``{attempt}`` and ``{feedback}`` (the critique). ``score(prompt, attempt)`` (optional) gives
    the progress measure. A chat prompt is continued as a conversation instead: the critique
    is asked with ``messages + [assistant: attempt, user: critique_turn]`` and the next attempt
    with ``... + [assistant: critique, user: refine_turn]``.
    """
    _check_common(max_attempts, patience, critique_template, "prompt", "attempt")
    _check_common(max_attempts, patience, refine_template, "prompt", "attempt", "feedback")
    check_turn("critique_turn", critique_turn)
    check_turn("refine_turn", refine_turn)
    if not isinstance(stop_phrase, str) or not stop_phrase:
        raise InvalidParameterError("stop_phrase", stop_phrase, "must be a non-empty string")
    run = RefineRun("self_refine", generator, prompts, params, budget)
    chains = [Chain(t.prompt, next_prompt=t.prompt) for t in run.trees]
    while True:
        live = [i for i, ch in enumerate(chains) if ch.stop_reason is None]
        if not live:
            break
        outs = run.generate_one([chains[i].next_prompt for i in live], chains=live)
        if outs is None:
            break
        for i, c in zip(live, outs):
            if run.cut_by_budget(c):
                _record_cut(chains[i], c)
        live_outs = [(i, c) for i, c in zip(live, outs) if chains[i].stop_reason is None]
        live, outs = [i for i, _ in live_outs], [c for _, c in live_outs]
        good = [(i, c) for i, c in zip(live, outs) if c.finish_reason != "error"]
        crit_prompts = [critique_prompt(chains[i].prompt, c.text, critique_template,
                                        critique_turn) for i, c in good]
        crits = run.generate_one(crit_prompts, critique_params,
                                 chains=[i for i, _ in good]) if good else []
        if crits is None:
            crits = []  # the budget stopped the critiques: record attempts without feedback
        by_index = {i: cr for (i, _), cr in zip(good, crits)}
        for i, c in zip(live, outs):
            ch = chains[i]
            if c.finish_reason == "error":
                _record(run, i, ch, c, None, patience, max_attempts)
                continue
            cr = by_index.get(i)
            if cr is None or cr.finish_reason == "error":  # budget or a failed critique
                if cr is not None:
                    run.failures[i]["critique_error"] += 1
                _record_unreviewed(ch, c, max_attempts)
                continue
            fb = Feedback(ok=stop_phrase in cr.text, message=cr.text,
                          score=None if score is None else float(score(ch.prompt, c.text)))
            _record(run, i, ch, c, fb, patience, max_attempts,
                    extra={"feedback_tokens": cr.num_tokens})
            ch.tokens += cr.num_tokens
            ch.next_prompt = refine_prompt(ch.prompt, c.text, cr.text, refine_template,
                                           critique_turn, refine_turn)
        if run.stopped_by_budget:
            break
    return _results(run, chains, {"max_attempts": max_attempts, "patience": patience,
                                  "stop_phrase": stop_phrase})


@dataclass(frozen=True, slots=True)
class SelfRefineConfig:
    """self_refine's parameters besides N (its most attempts)."""

    stop_phrase: str = param("NO ISSUES", "the critique that ends refinement")
    patience: int = param(1, "attempts without improvement before stopping", lo=1)


@dataclass(frozen=True, slots=True)
class FeedbackConfig:
    """refine_with_feedback's parameters besides N (its most attempts)."""

    patience: int = param(1, "attempts without improvement before stopping", lo=1)


_NO_TASK = "needs a feedback function (a task's checks, e.g. executed unit tests)"

SPECS = [
    StrategySpec("self_refine", self_refine, "refinement", "self-refine", SelfRefineConfig,
                 scale=lambda n: {"max_attempts": n}),
    StrategySpec("refine_with_feedback", refine_with_feedback, "refinement",
                 "refine with feedback", FeedbackConfig, scale=lambda n: {"max_attempts": n},
                 needs=frozenset({"feedback"}), scorer_args={"feedback": "feedback"},
                 not_on={"serve": _NO_TASK, "cli": _NO_TASK}),
]
