"""The benchmarks' ``--threads`` option: thread counts to run at, ``default`` meaning torch's."""

from __future__ import annotations

import torch


def thread_counts(spec: str | None = None) -> list[int]:
    """``"1,default"`` (the default) -> [1, torch's default count], duplicates dropped, order
    kept. Raises :class:`ValueError` for a count that is not an integer >= 1."""
    default = torch.get_num_threads()
    parts = (spec or "1,default").split(",")
    counts = [default if p.strip() == "default" else int(p) for p in parts]
    if any(c < 1 for c in counts):
        raise ValueError(f"thread counts must be >= 1, got {spec!r}")
    return list(dict.fromkeys(counts))
