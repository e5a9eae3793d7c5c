"""A per-run cgroup (v1 ``memory`` and ``pids`` controllers, and ``cpuacct`` where mounted) that
contains, measures and kills a process tree."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
OPTIONAL = ("cpuacct",)


def own_cgroup_dir(controller: str, root: Path = ROOT) -> Path | None:
    """This process's cgroup directory for a v1 ``controller``, or None without one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            base = root / controller / path.lstrip("/")
            return base if (base / "cgroup.procs").exists() else None
    return None


def cgroup_writable(controller: str, root: Path = ROOT) -> str | None:
    """None when a child cgroup can be created (and removed) under ours, else the reason."""
    base = own_cgroup_dir(controller, root)
    if base is None:
        return f"no cgroup v1 {controller} controller mounted under {root}"
    probe = base / f"metagen-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cgroup {base} not writable: {exc.strerror}"
    return None


class RunCgroup:
    """One run's cgroups: created with limits, joined by the child before it execs, killed and
    removed by :meth:`close` (which leaves no cgroup directory behind)."""

    def __init__(self, memory_bytes: int, max_processes: int, root: Path = ROOT) -> None:
        name = f"metagen-sandbox-{os.getpid()}-{secrets.token_hex(6)}"
        self.dirs: list[Path] = []
        self._cpuacct: Path | None = None
        try:
            for controller in CONTROLLERS + OPTIONAL:
                base = own_cgroup_dir(controller, root)
                if base is None:
                    if controller in OPTIONAL:
                        continue
                    raise OSError(f"no {controller} cgroup")
                path = base / name
                path.mkdir()
                self.dirs.append(path)
            mem, pids = self.dirs[:2]
            self._cpuacct = self.dirs[2] if len(self.dirs) > 2 else None
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            if (mem / "memory.memsw.limit_in_bytes").exists():
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (pids / "pids.max").write_text(str(max_processes))
        except OSError:
            self.close()
            raise
        self._procs_files = [str(d / "cgroup.procs") for d in self.dirs]

    def join(self) -> None:
        """Move the calling process into every cgroup (called in the child before exec)."""
        pid = str(os.getpid()).encode()
        for path in self._procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of the run (``oom_kill`` in
        ``memory.oom_control``), or the limit was hit (``failcnt``) where that is not shown."""
        try:
            mem = self.dirs[0]
            for line in (mem / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            return int((mem / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError, IndexError):
            return False

    def cpu_seconds(self) -> float | None:
        """CPU time of every process that ran in the cgroup, where ``cpuacct`` is mounted."""
        try:
            return int((self._cpuacct / "cpuacct.usage").read_text()) / 1e9 \
                if self._cpuacct else None
        except (OSError, ValueError):
            return None

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL every process in the cgroups until they are empty."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pids: set[int] = set()
            for d in self.dirs:
                try:
                    pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
                except (OSError, ValueError):
                    pass
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    def close(self) -> None:
        """Kill what is left and remove the cgroup directories."""
        self.kill()
        for d in reversed(self.dirs):
            for _ in range(200):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy until the last task is gone
                    time.sleep(0.005)
        self.dirs = []
