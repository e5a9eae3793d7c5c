"""metagen.strategies: meta-generators.

Parallel (this package's first half): best_of_n, self_consistency, weighted_vote, mbr,
rejection_sampling — each makes ONE batched generate call for its samples (rejection sampling one
per round), accepts one prompt or a list, and returns Result(s) with compute and trace. Their
selectors (BestOfN, SelfConsistency, WeightedVote, MBR) reduce groups inside StrategyGenerator,
which makes any of them a generator for another strategy. Budget caps a run.

Step-level search and refinement (the second half): step_beam_search, dvts, best_first,
tree_of_thoughts, mcts, rebase, self_refine, refine_with_feedback, treefinement.
"""

from types import ModuleType
from typing import Any

from metagen.strategies.adaptive_vote import adaptive_self_consistency
from metagen.strategies.best_first import best_first
from metagen.strategies.best_of_n import BestOfN, best_of_n
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.compose import StrategyGenerator
from metagen.strategies.deepconf import deepconf
from metagen.strategies.dvts import dvts
from metagen.strategies.mbr import MBR, expected_utility, mbr, mbr_prune
from metagen.strategies.mcts import mcts
from metagen.strategies.parallel import run_parallel
from metagen.strategies.particle_filter import particle_filtering
from metagen.strategies.rebase import rebase
from metagen.strategies.refine import Feedback, refine_with_feedback, self_refine
from metagen.strategies.registry import strategy_exports
from metagen.strategies.rejection import rejection_sampling
from metagen.strategies.selection import Selection, Selector, argmax_first
from metagen.strategies.step_beam import step_beam_search
from metagen.strategies.step_scaling import run_step_search
from metagen.strategies.steps import StepDefinition
from metagen.strategies.tot import LMStepValue, tree_of_thoughts
from metagen.strategies.tree import SearchNode, SearchTree
from metagen.strategies.treefinement import treefinement
from metagen.strategies.voting import (
    SelfConsistency,
    WeightedVote,
    self_consistency,
    vote,
    weighted_vote,
)

__all__ = [
    "MBR",
    "UNLIMITED",
    "BestOfN",
    "Budget",
    "Feedback",
    "LMStepValue",
    "SearchNode",
    "SearchTree",
    "Selection",
    "Selector",
    "SelfConsistency",
    "StepDefinition",
    "StrategyGenerator",
    "WeightedVote",
    "adaptive_self_consistency",
    "argmax_first",
    "best_first",
    "best_of_n",
    "deepconf",
    "dvts",
    "expected_utility",
    "mbr",
    "mbr_prune",
    "mcts",
    "rebase",
    "refine_with_feedback",
    "rejection_sampling",
    "particle_filtering",
    "run_parallel",
    "run_step_search",
    "self_consistency",
    "self_refine",
    "step_beam_search",
    "tree_of_thoughts",
    "treefinement",
    "vote",
    "weighted_vote",
]
__all__ += [name for name in strategy_exports() if name not in __all__]
# a strategy module named like its function (first_finish.py) is bound here as the module by
# the import system; the package exports the function, as the imports above do for mbr, dvts...
globals().update({name: fn for name, fn in strategy_exports().items()
                  if isinstance(globals().get(name), ModuleType)})


def __getattr__(name: str) -> Any:
    """A registered strategy not imported above by name (typed imports: from its module)."""
    function = strategy_exports().get(name)
    if function is None:
        raise AttributeError(f"module 'metagen.strategies' has no attribute {name!r}")
    return function
