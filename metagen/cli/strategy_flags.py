"""``metagen generate --strategy NAME``: any registered strategy on one prompt, from the command
line (the registry's ``cli`` surface).

``--n`` is the strategy's scale N (its samples, attempts or samples per search step: the spec's
``scale``); the other sampling flags are each sample's parameters. ``--strategy-arg KEY=VALUE``
(repeatable) sets a parameter of the strategy's config (``metagen strategies NAME`` lists them),
checked before any model loads, with errors naming the key. ``--reward`` and ``--prm`` are the
scorers it reads, as scorer specs (:mod:`metagen.scorers.scorer_spec`: a model folder, whose
layout is read from the model; ``likelihood``, the policy's own confidence; a remote
``pooling+URL?model=NAME`` ...), parsed before loading and loaded by the one resolver
(:func:`~metagen.scorers.resolve.resolve_scorer`); the strategies that need one refuse to run
without it. ``best_of_n_confidence`` and ``weighted_vote_confidence`` read the policy's own
confidence (``likelihood`` over a local model).

Output: the prompt and the strategy's choice, or with ``--json`` one object: ``strategy``,
``n``, ``options``, ``text``, ``chosen`` (the chosen completion), ``candidates`` (texts),
``scores``, ``failures``, ``stopped_by_budget``, ``usage`` and ``trace`` (the search tree of a
step search). A run that chose nothing exits with status 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import click

from metagen.cli.flags import key_values, option_group
from metagen.errors import InvalidParameterError
from metagen.scorers.scorer_spec import ScorerSpec, parse_scorer_spec
from metagen.strategies.registry import get, names
from metagen.strategies.spec import Scorers, StrategySpec
from metagen.types import Result, SamplingParams

STRATEGY_FLAGS = [
    click.option("--strategy", default=None, metavar="NAME",
                 help="Run a strategy at scale --n and print its choice: "
                 + ", ".join(names(surface="cli")) + " (`metagen strategies` for the table, "
                 "`metagen strategies NAME` for its parameters)."),
    click.option("--strategy-arg", "strategy_args", multiple=True, metavar="KEY=VALUE",
                 help="A parameter of --strategy (repeatable), e.g. width=2."),
    click.option("--reward", default=None, metavar="SPEC",
                 help="The reward model --strategy reads (best_of_n, rejection_sampling, "
                 "weighted_vote): a model folder, likelihood (the policy's confidence), "
                 "judge+FOLDER or pooling+URL?model=NAME / classify+URL?... / json+URL?..."),
    click.option("--prm", default=None, metavar="SPEC",
                 help="The process reward model of a step search: a model folder, "
                 "PRESET+FOLDER, likelihood, pooling+URL?model=NAME&tokenizer=FOLDER or "
                 "json+URL?model=NAME."),
]
_NAMES = ("strategy", "strategy_args", "reward", "prm")


strategy_flags = option_group(STRATEGY_FLAGS)


@dataclass(frozen=True, slots=True)
class StrategyChoice:
    """The strategy flags, checked: the spec, its options, the scorer folders."""

    spec: StrategySpec
    options: dict[str, Any]
    reward: ScorerSpec | None
    prm: ScorerSpec | None


def pop_strategy(flags: dict[str, Any], remote: bool) -> StrategyChoice | None:
    """Remove the strategy flags from ``flags``; None without ``--strategy``. Raises
    ``InvalidParameterError`` naming ``strategy`` (unknown, not on the CLI, or needing the
    policy's logits on a server), a bad option's key, or the scorer flag the strategy lacks."""
    given = {name: flags.pop(name) for name in _NAMES}
    if given["strategy"] is None:
        for name in ("reward", "prm"):
            if given[name] is not None:
                raise InvalidParameterError(name, given[name], "is read by --strategy")
        if given["strategy_args"]:
            raise InvalidParameterError("strategy_arg", given["strategy_args"][0],
                                        "needs --strategy")
        return None
    spec = get(given["strategy"])
    for surface, applies in (("cli", True), ("openai", remote)):
        if applies and surface in spec.not_on:
            raise InvalidParameterError("strategy", spec.name, spec.not_on[surface])
    options = spec.options(key_values(given["strategy_args"], "strategy_arg"))
    for need in ("reward", "prm"):
        if need in spec.needs and given[need] is None:
            raise InvalidParameterError(need, None, f"{spec.name} needs --{need} SPEC")
    reward = None if given["reward"] is None else parse_scorer_spec(given["reward"], "reward",
                                                                    "reward")
    prm = None if given["prm"] is None else parse_scorer_spec(given["prm"], "prm", "prm")
    return StrategyChoice(spec, options, reward, prm)


def scorers(choice: StrategyChoice, model: str) -> Scorers:
    """The scorers ``choice`` reads, loaded (``model``: the policy's folder, for confidence)."""
    from metagen.scorers.resolve import resolve_scorer

    used = choice.spec.needs | choice.spec.optional
    reward = None if choice.reward is None or "reward" not in used else resolve_scorer(
        choice.reward, "reward", flag="reward", default_folder=model)
    prm = None if choice.prm is None or "prm" not in used else resolve_scorer(
        choice.prm, "prm", flag="prm", default_folder=model)
    confidence = (resolve_scorer("likelihood", "reward", flag="strategy", default_folder=model)
                  if "confidence" in used else None)
    return Scorers(reward=reward, prm=prm, confidence=confidence)


def run_strategy(choice: StrategyChoice, gen: Any, model: str, prompt: str,
                 params: SamplingParams, as_json: bool, report: dict[str, Any]) -> bool:
    """Run the strategy at scale ``params.n`` and print its choice; whether it chose nothing."""
    result = choice.spec.run(gen, prompt, n=params.n, params=params.with_(n=1),
                             scorers=scorers(choice, model), options=choice.options)
    if as_json:
        click.echo(json.dumps(_json(choice, result, params, report), ensure_ascii=False))
    elif result.best is not None:
        click.echo(prompt + result.text)
    if result.best is None:
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(result.failures.items()))
        click.echo(f"error: {choice.spec.name} chose nothing ({failures or 'no candidate'})",
                   err=True)
    return result.best is None


def _json(choice: StrategyChoice, result: Result, params: SamplingParams,
          report: dict[str, Any]) -> dict[str, Any]:
    from metagen.cli.generate import json_usage

    best = result.best
    return {**report, "params": params.with_(n=1).to_dict(), "strategy": choice.spec.name,
            "n": params.n, "options": choice.options, "text": result.text,
            "chosen": None if best is None else best.to_dict(),
            "candidates": [c.text for c in result.candidates], "scores": list(result.scores),
            "failures": dict(result.failures), "stopped_by_budget": result.stopped_by_budget,
            "usage": json_usage(result.usage), "trace": result.trace}
