"""metagen.strategies: meta-generators.

Parallel (this package's first half): best_of_n, self_consistency, weighted_vote, mbr,
rejection_sampling — each makes ONE batched generate call for its samples (rejection sampling one
per round), accepts one prompt or a list, and returns Result(s) with compute and trace. Their
selectors (BestOfN, SelfConsistency, WeightedVote, MBR) reduce groups inside StrategyGenerator,
which makes any of them a generator for another strategy. Budget caps a run.
"""

from metagen.strategies.best_of_n import BestOfN, best_of_n
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.compose import StrategyGenerator
from metagen.strategies.mbr import MBR, expected_utility, mbr, mbr_prune
from metagen.strategies.parallel import run_parallel
from metagen.strategies.rejection import rejection_sampling
from metagen.strategies.selection import Selection, Selector, argmax_first
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
    "Selection",
    "SelfConsistency",
    "Selector",
    "StrategyGenerator",
    "WeightedVote",
    "argmax_first",
    "best_of_n",
    "expected_utility",
    "mbr",
    "mbr_prune",
    "rejection_sampling",
    "run_parallel",
    "self_consistency",
    "vote",
    "weighted_vote",
]
