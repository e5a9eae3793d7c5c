"""The rlimits every backend sets in the child before it runs anything."""

from __future__ import annotations

import math
import resource

from metagen.sandbox.limits import Limits


def rlimit_table(limits: Limits, *, address_space: int) -> list[tuple[int, int]]:
    """``(resource, value)`` pairs, soft = hard, computed in the parent (the child only calls
    ``setrlimit``). Hard limits cannot be raised again by an unprivileged program."""
    cpu = max(1, math.ceil(limits.cpu_seconds))
    return [(resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, limits.disk_bytes),
            (resource.RLIMIT_NOFILE, limits.max_open_files),
            (resource.RLIMIT_NPROC, limits.max_processes),
            (resource.RLIMIT_AS, address_space), (resource.RLIMIT_CORE, 0)]


def apply_rlimits(table: list[tuple[int, int]]) -> None:
    """Set each rlimit (soft = hard). Runs in the forked child: no allocation-heavy work."""
    for res, value in table:
        resource.setrlimit(res, (value, value))
