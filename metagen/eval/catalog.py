"""``metagen eval``'s view of the strategy registry (:mod:`metagen.strategies.registry`): the
strategies a run may name, what each reads and how ``--strategy-arg`` entries reach them.
Eval keeps no strategy list of its own: a module of ``metagen.strategies`` with a ``SPEC`` is
evaluated as its family says, with no eval file edited.

- ``greedy`` (:mod:`metagen.eval.greedy`) is eval's own baseline, not a library strategy;
- a ``subsampled`` spec is evaluated over the ONE sample set of the run, through
  :meth:`~metagen.strategies.spec.StrategySpec.selector` over the stored scores of the scorer
  it reads (:func:`stored_scorer`);
- every other family (``each_n``, ``adaptive``, ``refinement``) is its own seeded run at each N
  (:func:`metagen.eval.direct.spec_item`).

The scorers a strategy reads are its ``needs``, plus its ``optional`` ones the run configures
(``weighted_vote`` reads the reward when ``--reward`` is given, else weighs by the samples'
log-probabilities). Their names are the store's: ``reward``, ``confidence``, ``prm``; a
``feedback`` need is met by the task (:attr:`metagen.eval.tasks.TaskSpec.feedback`), never
loaded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.strategies.spec import StrategySpec

GREEDY = "greedy"
SURFACE = "eval"
FEEDBACK = "feedback"  # the need a task meets; every other need is a loaded scorer
SUBSAMPLED = "subsampled"


def eval_specs() -> dict[str, StrategySpec]:
    """The registered strategies available on the ``eval`` surface, in registry order."""
    from metagen.strategies.registry import specs

    return {name: spec for name, spec in specs().items() if spec.available(SURFACE)}


def strategy_names() -> tuple[str, ...]:
    """Every name a run may give: the registry's (``eval`` surface), then ``greedy``."""
    return (*eval_specs(), GREEDY)


def spec_of(name: str) -> StrategySpec:
    """The spec of ``name``; ``InvalidParameterError`` naming ``strategy`` otherwise (also for
    ``greedy``, which has none)."""
    found = eval_specs().get(name)
    if found is None:
        raise InvalidParameterError("strategy", name, "must be one of "
                                    f"{', '.join(strategy_names())}")
    return found


def is_subsampled(name: str) -> bool:
    """True for a strategy evaluated by subsampling the run's one sample set."""
    return name != GREEDY and spec_of(name).family == SUBSAMPLED


def reads(name: str, configured: Collection[str]) -> frozenset[str]:
    """The needs and the ``configured`` optional scorers of strategy ``name`` (none for
    ``greedy``), ``feedback`` included."""
    if name == GREEDY:
        return frozenset()
    spec = spec_of(name)
    return frozenset(spec.needs | (spec.optional & set(configured)))


def loaded_scorers(names: Sequence[str], configured: Collection[str]) -> set[str]:
    """The scorers to load for strategies ``names``: the union of what they read, less the
    task's ``feedback``."""
    return {x for name in names for x in reads(name, configured)} - {FEEDBACK}


def stored_scorer(name: str, configured: Collection[str]) -> str | None:
    """The scorer whose stored scores subsampled strategy ``name`` selects with (``reward``,
    ``confidence``), or None when it reads none."""
    got = sorted(reads(name, configured) - {FEEDBACK})
    if len(got) > 1:
        raise InvalidParameterError("strategy", name, f"reads {got}: a subsampled strategy "
                                    "selects with one stored scorer at most")
    return got[0] if got else None


def split_strategy_args(names: Sequence[str], args: Mapping[str, Any]
                        ) -> dict[str, dict[str, Any]]:
    """Strategy name -> its ``--strategy-arg`` entries: each key goes to every strategy of
    ``names`` whose config has it, checked by :meth:`StrategySpec.options` (an error names the
    key). A key that no strategy of the run takes raises ``InvalidParameterError`` naming
    ``strategy_arg`` with the keys they do take."""
    fields = {name: {p.name for p in spec_of(name).params()} for name in names
              if name != GREEDY}
    known = sorted(set().union(*fields.values())) if fields else []
    for key, value in args.items():
        if key not in known:
            raise InvalidParameterError("strategy_arg", f"{key}={value}", "no strategy of the "
                                        f"run ({', '.join(names)}) takes {key!r}; known: "
                                        f"{', '.join(known) or 'none'}")
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = {k: v for k, v in args.items() if k in fields.get(name, ())}
        out[name] = spec_of(name).options(mine) if name != GREEDY else {}
    return out


def strategies_help() -> str:
    """The ``--strategy`` help text, from the registry (families, their names, each one's
    needs)."""
    by_family: dict[str, list[str]] = {}
    for name, spec in eval_specs().items():
        needs = [*sorted(spec.needs), *(f"{x} when given" for x in sorted(spec.optional))]
        by_family.setdefault(spec.family, []).append(
            f"{name} ({', '.join(needs)})" if needs else name)
    what = {SUBSAMPLED: "sharing ONE set of samples drawn at the largest N",
            "each_n": "each its own run at each N", "adaptive": "at most N, stopping early",
            "refinement": "revising at most N attempts"}
    parts = [f"{family} ({what.get(family, family)}): {', '.join(found)}"
             for family, found in by_family.items()]
    return ("One or several, comma-separated, from the strategy registry; in brackets the "
            "scorer each needs (reward: --reward, prm: --prm, confidence: the policy's own, "
            "feedback: the task's, e.g. the code tasks' unit tests). " + "; ".join(parts)
            + f"; or {GREEDY} (one temperature-0 sample, N=1 only; alone it takes no --n but 1).")


def strategy_args_help() -> str:
    """The ``--strategy-arg`` help text: where the keys come from."""
    return ("Goes to each strategy of the run whose parameters include KEY (repeatable); a "
            "KEY none of them takes is refused, with the keys they take.")
