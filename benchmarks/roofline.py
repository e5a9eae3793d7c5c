"""This machine's roofline, measured in the same run as the benchmark.

- memory bandwidth: a large fp32 tensor is summed (read only), copied (read + write) and
  multiplied as a matrix by a vector (read, as decoding reads its weights); the best of a few
  repeats in bytes moved per second.
- matmul throughput: a square fp32 matmul, best of a few repeats, in GFLOP/s.

Batch-1 decoding reads every weight but the input embedding table once per token, so its
roofline is ``tokens/s <= bandwidth / decode_bytes``; prefill is bounded by matmul throughput.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch


@dataclass(slots=True, frozen=True)
class Roofline:
    read_gb_s: float     # sum of a large tensor
    copy_gb_s: float     # copy of a large tensor (counted as read + write)
    gemv_gb_s: float     # matrix-vector product over a large matrix (its bytes)
    matmul_gflop_s: float
    threads: int

    @property
    def bandwidth_gb_s(self) -> float:
        """The bandwidth decoding can use: the best of read-only, copy and GEMV."""
        return max(self.read_gb_s, self.copy_gb_s, self.gemv_gb_s)

    def decode_tokens_per_s(self, decode_bytes: int) -> float:
        """Upper bound for batch-1 decoding of a model that streams ``decode_bytes`` of weights
        per token."""
        return self.bandwidth_gb_s * 1e9 / decode_bytes

    def to_dict(self) -> dict:
        return asdict(self) | {"bandwidth_gb_s": self.bandwidth_gb_s}


def _best(fn, repeats: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(mbytes: int = 512, matmul_n: int = 1024, repeats: int = 5) -> Roofline:
    """Measure bandwidth on a ``mbytes`` MB tensor and matmul on ``matmul_n`` x ``matmul_n``."""
    n = mbytes * (1 << 20) // 4 // 4096 * 4096
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)
    t_read = _best(lambda: src.sum(), repeats)
    t_copy = _best(lambda: dst.copy_(src), repeats)
    mat, vec = src.view(-1, 4096), torch.ones(4096)
    t_gemv = _best(lambda: torch.mv(mat, vec), repeats)
    a = torch.randn(matmul_n, matmul_n)
    b = torch.randn(matmul_n, matmul_n)
    t_mm = _best(lambda: a @ b, repeats)
    nbytes = n * 4
    return Roofline(read_gb_s=nbytes / t_read / 1e9, copy_gb_s=2 * nbytes / t_copy / 1e9,
                    gemv_gb_s=nbytes / t_gemv / 1e9,
                    matmul_gflop_s=2 * matmul_n ** 3 / t_mm / 1e9,
                    threads=torch.get_num_threads())
