"""The capability check that picks a sandbox backend or refuses (no silent downgrade)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from metagen.errors import InvalidParameterError, SandboxUnavailable
from metagen.sandbox.bubblewrap import SYSTEM_PYTHON, BubblewrapExecutor
from metagen.sandbox.cgroup import CONTROLLERS, cgroup_writable
from metagen.sandbox.executor import Executor
from metagen.sandbox.limits import Limits
from metagen.sandbox.optin import require_code_execution_allowed
from metagen.sandbox.unsafe_local import UnsafeLocalExecutor

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"
ENV_BACKEND = "METAGEN_SANDBOX_BACKEND"
BACKENDS = ("bubblewrap", "unsafe-local")


@dataclass(frozen=True)
class Preflight:
    """What this machine supports. ``backend`` is the backend that will be used, or None when
    none works (``reasons`` says why). ``cgroup`` tells whether each run gets its own memory and
    pids cgroup (which contains fork bombs and memory floods host-wide)."""

    backend: str | None
    bwrap: str | None
    user_namespaces: bool
    cgroup: bool
    reasons: tuple[str, ...]


def preflight(*, bwrap: str = "bwrap", python: str = SYSTEM_PYTHON) -> Preflight:
    """Detect bubblewrap, user namespaces and cgroup writability, and try one tiny sandboxed
    run (``python -c pass``). Never raises for a missing capability: it reports it."""
    reasons: list[str] = []
    path = shutil.which(bwrap)
    if path is None:
        reasons.append(f"bubblewrap binary {bwrap!r} not found; {INSTALL_HINT}")
    userns = os.path.exists("/proc/self/ns/user") and _max_userns() != 0
    if not userns:
        reasons.append("user namespaces are disabled (user.max_user_namespaces = 0)")
    if not os.path.exists(python):
        reasons.append(f"interpreter {python!r} for the sandbox not found")
    cg_problems = [p for p in (cgroup_writable(c) for c in CONTROLLERS) if p]
    works = False
    if path is not None and userns and not reasons:
        ex = BubblewrapExecutor(bwrap=path, python=python, use_cgroup=not cg_problems,
                                allow_code_execution=True)
        res = ex.run("import sys; sys.stdout.write('ok')",
                     limits=Limits(wall_seconds=20, cpu_seconds=10))
        works = res.status == "ok" and res.stdout == "ok"
        if not works:
            reasons.append(f"a trial bubblewrap run failed ({res.status}): "
                           f"{(res.detail or res.stderr)[-300:]}")
    return Preflight("bubblewrap" if works else None, path, userns, works and not cg_problems,
                     tuple(reasons + ([] if works else cg_problems)))


def _max_userns() -> int:
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            return int(f.read())
    except (OSError, ValueError):
        return -1


def default_executor(*, allow_code_execution: bool | None = None,
                     backend: str | None = None, bwrap: str = "bwrap") -> Executor:
    """The executor to use: ``backend`` (or env ``METAGEN_SANDBOX_BACKEND``) when named —
    ``"unsafe-local"`` only this way — else bubblewrap if :func:`preflight` passes.
    Raises :class:`CodeExecutionNotAllowed` without the opt-in and :class:`SandboxUnavailable`
    when no sandbox works; both before anything runs."""
    require_code_execution_allowed(allow_code_execution)
    name = backend if backend is not None else os.environ.get(ENV_BACKEND) or None
    if name is not None and name not in BACKENDS:
        raise InvalidParameterError("backend", name, f"must be one of {BACKENDS}")
    if name == "unsafe-local":
        return UnsafeLocalExecutor(allow_code_execution=allow_code_execution)
    found = _cached_preflight(bwrap)
    if found.backend is None:
        raise SandboxUnavailable(
            "no sandbox for model-written code works here: " + "; ".join(found.reasons)
            + ". Refusing to run it unsandboxed; name backend='unsafe-local' to accept that.",
            found.reasons)
    return BubblewrapExecutor(bwrap=bwrap, use_cgroup=found.cgroup,
                              allow_code_execution=allow_code_execution)


_CACHE: dict[str, Preflight] = {}


def _cached_preflight(bwrap: str) -> Preflight:
    if bwrap not in _CACHE:
        _CACHE[bwrap] = preflight(bwrap=bwrap)
    return _CACHE[bwrap]


def check_code_execution(allow_code_execution: bool | None = None, *,
                         backend: str | None = None, bwrap: str = "bwrap") -> Executor:
    """Call before generating anything: returns the executor that would run the code, or
    raises :class:`CodeExecutionNotAllowed` / :class:`SandboxUnavailable`."""
    return default_executor(allow_code_execution=allow_code_execution, backend=backend,
                            bwrap=bwrap)
