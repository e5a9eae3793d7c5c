"""Native CPU kernels, plain C built at first use (see :mod:`.build`); each has a PyTorch
fallback, so nothing here is required."""

from metagen.engine.native.build import NativeBuildError
from metagen.engine.native.small_matmul import SmallMatmul, load as load_small_matmul

__all__ = ["NativeBuildError", "SmallMatmul", "load_small_matmul"]
