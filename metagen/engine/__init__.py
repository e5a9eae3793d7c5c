"""metagen.engine: the built-in inference engine (paged KV cache, radix prefix cache,
continuous batching, fork, Hydragen shared-prefix attention) for the architectures of its table
(:mod:`metagen.engine.models.registry`: Llama, Mistral, Qwen2, Qwen3).

Entry points: :class:`LLMEngine` (token-level: ``add_request``/``step``/``fork``/``abort``/
``generate``/``stream``/``score``; beam search with :class:`~metagen.beam_params.BeamSearchParams`
requests, speculative decoding with an engine-wide :class:`Speculator`), built with its drivers
(:class:`EngineDrivers`) by :func:`build_engine` or ``LLMEngine.from_pretrained``;
:class:`EngineConfig`, and the raw forward :class:`ModelRunner` (see
:mod:`metagen.engine.model_runner`). The
text-level ``Generator`` is :class:`metagen.generators.local.LocalGenerator`.
"""

from metagen.engine.beam_search import beam_search, stochastic_beam_search
from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.engine_parts import EngineDrivers
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.outputs import EngineStats, RequestOutput, StreamDelta
from metagen.engine.proposers import NgramProposer
from metagen.engine.speculative_decoding import SpecStats, Speculator

__all__ = ["DraftModelProposer", "EngineConfig", "EngineDrivers", "EngineStats", "ExtendRequest",
           "LLMEngine", "ModelRunner", "NgramProposer", "RequestOutput", "SpecStats", "Speculator",
           "StreamDelta", "beam_search", "build_engine", "stochastic_beam_search"]
