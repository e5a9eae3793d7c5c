"""Resource limits of one sandboxed run."""

from __future__ import annotations

from dataclasses import dataclass, fields

from metagen.errors import InvalidParameterError

_MIN_MEMORY = 32 << 20  # the interpreter itself needs this much address space


@dataclass(frozen=True)
class Limits:
    """Limits applied to one run; every field is validated at construction.

    ``wall_seconds``: parent-side wall clock, after which the whole process tree is killed.
    ``cpu_seconds``: CPU time (RLIMIT_CPU, whole seconds, rounded up).
    ``memory_bytes``: memory (per-run cgroup where available, plus an address-space rlimit).
    ``max_processes``: processes and threads (per-run cgroup ``pids.max`` plus RLIMIT_NPROC).
    ``disk_bytes``: the most the program may write: the largest single file (RLIMIT_FSIZE), and
    where the backend has a quota, the total it may add to all its writable places together
    (``bubblewrap``: the work tmpfs, which also holds ``/dev/shm``).
    ``max_output_bytes``: bytes kept of stdout and of stderr each; more ends the run.
    ``max_open_files``: file descriptors (RLIMIT_NOFILE).
    A bad value raises :class:`InvalidParameterError` naming the field.
    """

    wall_seconds: float = 10.0
    cpu_seconds: float = 10.0
    memory_bytes: int = 512 << 20
    max_processes: int = 64
    disk_bytes: int = 64 << 20
    max_output_bytes: int = 1 << 20
    max_open_files: int = 256

    def __post_init__(self) -> None:
        bounds: dict[str, tuple[float, float]] = {
            "wall_seconds": (0.01, 86400.0), "cpu_seconds": (0.01, 86400.0),
            "memory_bytes": (_MIN_MEMORY, 1 << 50), "max_processes": (1, 1 << 20),
            "disk_bytes": (4096, 1 << 50), "max_output_bytes": (0, 1 << 40),
            "max_open_files": (16, 1 << 20)}
        for f in fields(self):
            value = getattr(self, f.name)
            lo, hi = bounds[f.name]
            integral = f.name not in ("wall_seconds", "cpu_seconds")
            if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
                raise InvalidParameterError(
                    f.name, value, "must be an int" if integral else "must be a number")
            if not lo <= value <= hi:  # also rejects NaN
                raise InvalidParameterError(f.name, value, f"must be in [{lo:g}, {hi:g}]")
