"""A run's seeds: pure functions of (run seed, item id[, N or subset size]).

A sample's seed never depends on batch size, order or concurrency (L8, L11): the runner asks the
generator for ``n`` samples of one item with ``SamplingParams(seed=item_seed(run_seed, item_id))``,
and a seeded generator makes sample ``j`` a pure function of (that seed, ``j``). The store keeps
(item seed, sample index) with each sample: ``generate([prompt], SamplingParams(n > j,
seed=item_seed))`` reproduces sample ``j`` on a seeded backend.
"""

from __future__ import annotations

import hashlib

from metagen.types import SEED_MAX


def _digest(*parts: object) -> int:
    text = "\x1f".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % SEED_MAX


def item_seed(run_seed: int, item_id: str) -> int:
    """The seed of one item's sampling call, in [0, 2**63 - 1)."""
    return _digest("item", run_seed, item_id)


def subset_seed(run_seed: int, item_id: str, k: int) -> int:
    """The seed of the random size-``k`` subsets of one item's samples."""
    return _digest("subsets", run_seed, item_id, k)


def direct_seed(run_seed: int, item_id: str, n: int) -> int:
    """The seed of a strategy run directly at budget ``n`` on one item (no subsampling)."""
    return _digest("direct", run_seed, item_id, n)
