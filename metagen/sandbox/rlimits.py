"""The rlimits every backend sets in the child before it runs anything."""

from __future__ import annotations

import math
import resource

from metagen.sandbox.limits import Limits


def rlimit_table(limits: Limits, *, address_space: int,
                 nproc: bool = True) -> list[tuple[int, int]]:
    """``(resource, value)`` pairs, soft = hard, computed in the parent (the child only calls
    ``setrlimit``). Hard limits cannot be raised again by an unprivileged program.
    ``nproc``: also set RLIMIT_NPROC (which counts all processes of the real uid)."""
    cpu = max(1, math.ceil(limits.cpu_seconds))
    table = [(resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, limits.disk_bytes),
             (resource.RLIMIT_NOFILE, limits.max_open_files),
             (resource.RLIMIT_AS, address_space), (resource.RLIMIT_CORE, 0)]
    return table + [(resource.RLIMIT_NPROC, limits.max_processes)] if nproc else table


def apply_rlimits(table: list[tuple[int, int]]) -> None:
    """Set each rlimit (soft = hard). Runs in the forked child: no allocation-heavy work."""
    for res, value in table:
        resource.setrlimit(res, (value, value))
