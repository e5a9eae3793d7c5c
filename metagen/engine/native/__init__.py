"""Native CPU kernels, plain C built at first use (see :mod:`.build`) into one library
(:mod:`.library`); each has a PyTorch fallback, so nothing here is required.

- :mod:`.small_matmul`: ``x @ W`` for a few rows (``small_matmul.c``);
- :mod:`.decode_step`: every decoder layer of a step of a few tokens (``decode_step.c``);
- :mod:`.int8_matmul`: ``x @ W^T * scale`` for a few rows and int8 weights (``int8_matmul.c``),
  also used by the decode step on a model quantized to int8;
- :mod:`.sample_rows`: sampling's draw and ``logsumexp`` over each row's vocabulary
  (``sample_rows.c``), used by the engine's CPU sampler;
- ``simd.h``: the AVX-512 / AVX2 vocabulary both are written in;
- ``pool.c``: the thread pool both split their work across (:mod:`.threads`: torch's count).
"""

from metagen.engine.native.build import NativeBuildError
from metagen.engine.native.decode_step import DecodeStep, StepPlan
from metagen.engine.native.small_matmul import SmallMatmul, load as load_small_matmul

__all__ = ["DecodeStep", "NativeBuildError", "SmallMatmul", "StepPlan", "load_small_matmul"]
