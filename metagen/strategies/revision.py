"""Sequential revision chains (Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally"):
attempt 1 from the prompt, each next attempt conditioned on the previous one alone
(:data:`~metagen.strategies.refine_prompts.REVISION_TEMPLATE`: the prompt, the attempt,
``"\\nRevision:\\n"``), ``n`` attempts in all; then ONE selection over the chain's attempts:

- ``select="reward"``: the highest-reward attempt (best-of-chain by an outcome reward, one
  batched reward call; ties: the earlier attempt), :class:`~metagen.strategies.best_of_n.BestOfN`;
- ``select="vote"``: a majority vote over the attempts' answers (ties: the answer seen first),
  :class:`~metagen.strategies.voting.SelfConsistency`;
- ``select="last"``: the last attempt.

Unlike :func:`~metagen.strategies.refine.self_refine` there is no critique and no early stop:
the model must have been trained to revise (the testbed's ``revise`` model), and the chain's
length is the compute knob, as the number of samples is parallel sampling's. All live chains
advance together, one generate call per round. A failed attempt (``finish_reason == "error"``)
is counted in ``Result.failures`` and the next round revises the last good attempt (or starts
afresh); an attempt the budget cut short ends its chain but stays a candidate.

Usage: each Result's generator usage is its own chain's calls (every revision prompt's prefill
included, as the generator reports it: tokens prefilled, cached, generated, FLOPs), plus its
share of the reward's usage by generated tokens; ``trace["chain"]`` lists each attempt's text,
tokens and score, ``trace["best_attempt"]`` the chosen index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.generators.metered import apportion
from metagen.scorers.base import RewardLike
from metagen.strategies.best_of_n import BestOfN
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.refine import RefineRun
from metagen.strategies.refine_prompts import REVISION_TEMPLATE, revision_prompt
from metagen.strategies.selection import Selection, Selector
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.voting import SelfConsistency
from metagen.types import Completion, Result, SamplingParams, Usage

Select = Literal["reward", "vote", "last"]


class LastAttempt:
    """Selector: the last candidate of each group (a chain's last attempt)."""

    name = "last"

    @property
    def usage(self) -> Usage:
        return Usage()

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]:
        return [Selection(len(g) - 1, [None] * len(g)) for g in groups]


def chain_selector(select: Select, reward: RewardLike | None,
                   answer_key: AnswerKey | None) -> Selector:
    """The selector of ``select``; ``InvalidParameterError`` naming ``reward`` when
    ``select="reward"`` has none, naming ``select`` for an unknown rule."""
    if select == "reward":
        if reward is None:
            raise InvalidParameterError("reward", None, "select='reward' needs a reward model")
        return BestOfN(reward)
    if select == "vote":
        return SelfConsistency(answer_key=answer_key)
    if select == "last":
        return LastAttempt()
    raise InvalidParameterError("select", select, "must be one of reward, vote, last")


def revision_chain(generator: Generator, prompts: Sequence[Prompt], *, n: int = 4,
                   select: Select = "reward", reward: RewardLike | None = None,
                   answer_key: AnswerKey | None = None, template: str = REVISION_TEMPLATE,
                   params: SamplingParams | None = None,
                   budget: Budget = UNLIMITED) -> list[Result]:
    """A revision chain of ``n`` attempts per (text) prompt, then one selection over each
    chain (see the module docstring); one Result per prompt, its candidates the chain's
    attempts in order. ``template`` holds ``{prompt}`` and ``{attempt}``. Raises
    ``InvalidParameterError`` naming ``n``, ``select``, ``reward``, ``template`` or
    ``prompts`` (chat prompts are refused: the reviser reads a text prompt); what the reward
    model raises propagates."""
    positive_int("n", n)
    for key in ("prompt", "attempt"):
        if not isinstance(template, str) or "{" + key + "}" not in template:
            raise InvalidParameterError("template", template, f"must contain {{{key}}}")
    selector = chain_selector(select, reward, answer_key)
    if any(not isinstance(p, str) for p in prompts):
        raise InvalidParameterError("prompts", prompts, "revision chains take text prompts")
    run = RefineRun("revision_chain", generator, prompts, params, budget)
    texts = [str(t.prompt) for t in run.trees]
    chains: list[list[Completion]] = [[] for _ in texts]
    entries: list[list[dict[str, Any]]] = [[] for _ in texts]
    live = list(range(len(texts)))
    for _ in range(n):
        if not live:
            break
        nexts: list[Prompt] = [revision_prompt(texts[i], chains[i][-1].text, template)
                               if chains[i]
                               else texts[i] for i in live]
        outs = run.generate_one(nexts, chains=live)
        if outs is None:
            break
        for i, c in zip(list(live), outs):
            entry: dict[str, Any] = {"attempt": len(entries[i]), "text": c.text,
                                     "tokens": c.num_tokens, "finish_reason": c.finish_reason}
            entries[i].append(entry)
            if c.finish_reason == "error":
                run.failures[i]["generation_error"] += 1
                entry["error"] = True
                continue
            chains[i].append(c)
            if run.cut_by_budget(c):
                entry["budget_cut"] = True
                live.remove(i)
    return _results(run, texts, chains, entries, selector)


def _results(run: RefineRun, prompts: list[str], chains: list[list[Completion]],
             entries: list[list[dict[str, Any]]], selector: Selector) -> list[Result]:
    """One selection call over every non-empty chain; usages by chain, the selector's added
    by generated tokens."""
    scored = [i for i, ch in enumerate(chains) if ch]
    before = selector.usage
    picks = dict(zip(scored, selector.select([prompts[i] for i in scored],
                                             [chains[i] for i in scored]) if scored else []))
    scorer = selector.usage - before
    weights = [sum(e["tokens"] for e in es) for es in entries]
    run_usages = run.prompt_usages(weights)
    shares = apportion(scorer, weights)
    total = sum(run_usages, scorer)
    out = []
    for i, (chain, es) in enumerate(zip(chains, entries)):
        pick = picks.get(i)
        good = [e for e in es if not e.get("error")]
        for e, score in zip(good, pick.scores if pick else [None] * len(good)):
            e["score"] = score
        trace: dict[str, Any] = {"strategy": run.name, "select": selector.name, "chain": es,
                                 "best_attempt": None if pick is None else pick.index,
                                 "batch_usage": total.to_dict(), "batch_size": len(chains)}
        if pick is not None:
            trace.update(pick.trace)
        out.append(Result(best=None if pick is None else chain[pick.index], candidates=chain,
                          scores=pick.scores if pick else [], usage=run_usages[i] + shares[i],
                          trace=trace, stopped_by_budget=run.stopped_by_budget
                          or any(e.get("budget_cut") for e in es),
                          failures=dict(run.failures[i])))
    return out


@dataclass(frozen=True, slots=True)
class RevisionChainConfig:
    """revision_chain's parameters besides N (its attempts)."""

    template: str = param(REVISION_TEMPLATE, "the revision prompt: {prompt}, {attempt}")


SPECS = [
    StrategySpec("revision_chain", revision_chain, "refinement",
                 "revision chain (best by ORM)", RevisionChainConfig, needs=frozenset({"reward"}),
                 scorer_args={"reward": "reward"}, defaults={"select": "reward"}),
    StrategySpec("revision_vote", revision_chain, "refinement", "revision chain (vote)",
                 RevisionChainConfig, defaults={"select": "vote"}),
]
