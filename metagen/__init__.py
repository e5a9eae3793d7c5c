"""metagen: inference-time algorithms for large language models.

From decoding to meta-generation (Welleck et al., 2024): token-level generators, meta-generators
that call them, and an engine that makes both efficient, with compute accounted in every result.
"""

from typing import Any

from metagen._version import __version__
from metagen.beam_params import BeamSearchParams
from metagen.errors import (
    CapabilityError,
    EngineDeadError,
    InsufficientSamples,
    InvalidParameterError,
    InvalidPromptError,
    MetagenError,
    ModelLoadError,
    NumericalError,
)
from metagen.generators.base import Capabilities, Generator, Prompt
from metagen.strategies import (
    Budget,
    StrategyGenerator,
    adaptive_self_consistency,
    best_first,
    best_of_n,
    deepconf,
    dvts,
    mbr,
    mcts,
    particle_filtering,
    rebase,
    refine_with_feedback,
    rejection_sampling,
    self_consistency,
    self_refine,
    step_beam_search,
    tree_of_thoughts,
    treefinement,
    weighted_vote,
)
from metagen.strategies.registry import strategy_exports
from metagen.types import Completion, Result, SamplingParams, Usage

__all__ = [
    "BeamSearchParams",
    "Budget",
    "Capabilities",
    "CapabilityError",
    "Completion",
    "EngineDeadError",
    "Generator",
    "InsufficientSamples",
    "InvalidParameterError",
    "InvalidPromptError",
    "MetagenError",
    "ModelLoadError",
    "NumericalError",
    "Prompt",
    "Result",
    "SamplingParams",
    "StrategyGenerator",
    "Usage",
    "__version__",
    "adaptive_self_consistency",
    "best_first",
    "best_of_n",
    "deepconf",
    "dvts",
    "mbr",
    "mcts",
    "particle_filtering",
    "rebase",
    "refine_with_feedback",
    "rejection_sampling",
    "self_consistency",
    "self_refine",
    "step_beam_search",
    "tree_of_thoughts",
    "treefinement",
    "weighted_vote",
]
# every registered strategy is exported; those not imported above by name (typed) come from the
# registry through __getattr__
__all__ += [name for name in strategy_exports() if name not in __all__]


def __getattr__(name: str) -> Any:  # lazy: importing metagen must not import torch
    if name == "BeamSearchGenerator":
        from metagen.generators.beam import BeamSearchGenerator
        return BeamSearchGenerator
    if name == "HFGenerator":
        from metagen.generators.hf import HFGenerator
        return HFGenerator
    if name == "LocalGenerator":
        from metagen.generators.local import LocalGenerator
        return LocalGenerator
    if name == "LogitArithmeticGenerator":
        from metagen.generators.logit_arithmetic import LogitArithmeticGenerator
        return LogitArithmeticGenerator
    if name == "OpenAIGenerator":  # lazy: importing metagen must not import httpx
        from metagen.generators.openai import OpenAIGenerator
        return OpenAIGenerator
    if name == "MockGenerator":
        from metagen.generators.mock import MockGenerator
        return MockGenerator
    function = strategy_exports().get(name)
    if function is not None:
        return function
    raise AttributeError(f"module 'metagen' has no attribute {name!r}")
