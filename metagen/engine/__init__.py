"""metagen.engine: the built-in inference engine (paged KV cache, radix prefix cache,
continuous batching, fork, Hydragen shared-prefix attention) for Llama-family models.

Entry points: :class:`LLMEngine` (token-level: ``add_request``/``step``/``fork``/``abort``/
``generate``/``stream``/``score``), :class:`EngineConfig`, and the raw forward
:class:`ModelRunner` (see :mod:`metagen.engine.model_runner`). The text-level
``Generator`` is :class:`metagen.generators.local.LocalGenerator`.
"""

from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.outputs import EngineStats, RequestOutput, StreamDelta

__all__ = ["EngineConfig", "EngineStats", "ExtendRequest", "LLMEngine", "ModelRunner",
           "RequestOutput", "StreamDelta"]
