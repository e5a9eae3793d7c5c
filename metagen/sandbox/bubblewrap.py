"""The default backend: bubblewrap namespaces, a per-run cgroup, rlimits, an unprivileged uid.

What a run gets: new user, pid, mount, network, IPC, UTS and cgroup namespaces (no network at
all, not even loopback to the host); a read-only view of ``/usr`` (and the ``/lib*``, ``/bin``
links or binds) and a few ``/etc`` files, nothing else of the host (no home, no project, no
``/tmp``); a private size-capped tmpfs ``/work`` as the only writable place (``/dev/shm`` is a
link to its folder ``/work/.shm``, so shared memory counts against the same one quota; ``/dev``
itself is a read-only tmpfs holding only ``null``, ``zero``, ``full``, ``random``, ``urandom``,
``tty`` and the ``fd``/``stdin``/``stdout``/``stderr`` links: no pseudo-terminals); an empty
environment; uid/gid 65534 inside, no capabilities, no further user namespaces; when started as
root, bubblewrap itself runs as uid 65534 too. Where the v1 ``memory`` and ``pids`` cgroups are
writable each run gets its own (``memory.limit_in_bytes``, ``pids.max``), which also lets the
parent kill every process of the run. The pid namespace ends with its init, so nothing survives.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import IO

from metagen.errors import SandboxUnavailable
from metagen.sandbox.cgroup import CONTROLLERS, RunCgroup, cgroup_writable
from metagen.sandbox.classify import classify, decode_wait_status
from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult
from metagen.sandbox.rlimits import apply_rlimits, rlimit_table
from metagen.sandbox.supervise import supervise
from metagen.sandbox.workfiles import checked_run, staged

NAME = "bubblewrap"
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/mime.types")
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = {"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2", "fd": "/proc/self/fd", "core": "/proc/kcore"}
SHM_DIR = "/work/.shm"  # /dev/shm links here: inside the one size-capped tmpfs
_ENV = {"HOME": "/work", "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
        "TMPDIR": "/work", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}


class BubblewrapExecutor:
    """Runs programs with ``bwrap`` (see the module docstring for what is isolated).

    ``bwrap``: the binary (name or path). ``python``: the interpreter inside, default the system
    ``/usr/bin/python3`` (its own prefix is bound read-only when it is outside ``/usr``).
    ``use_cgroup``: None = use per-run cgroups when writable, True = require them (else
    :class:`SandboxUnavailable`), False = never. ``allow_code_execution``: the opt-in (None reads
    ``METAGEN_ALLOW_CODE_EXECUTION``), checked by every :meth:`run`. The constructor does not
    probe ``bwrap``; a binary that cannot start makes runs return ``sandbox_error``
    (use :func:`metagen.sandbox.preflight` to check a machine up front).
    """

    name = NAME

    def __init__(self, *, bwrap: str = "bwrap", python: str = SYSTEM_PYTHON,
                 use_cgroup: bool | None = None,
                 allow_code_execution: bool | None = None) -> None:
        self.bwrap = shutil.which(bwrap) or bwrap
        self.python = python
        self.allow_code_execution = allow_code_execution
        problem = None if use_cgroup is False else next(
            (p for p in (cgroup_writable(c) for c in CONTROLLERS) if p), None)
        if use_cgroup is True and problem:
            raise SandboxUnavailable(f"per-run cgroups unavailable: {problem}", (problem,))
        self.uses_cgroup = use_cgroup is not False and problem is None
        self.drops_to_nobody = os.geteuid() == 0

    @property
    def contains_host_attacks(self) -> bool:
        """Whether fork bombs and memory floods are held by a per-run cgroup."""
        return self.uses_cgroup

    def argv(self, names: list[str], fds: list[int], limits: Limits,
             status_fd: int, input_bytes: int = 0) -> list[str]:
        """The ``bwrap`` command line for one run (``fds[i]`` holds ``names[i]``). The work
        tmpfs holds the inputs plus ``disk_bytes`` (and a little room for tmpfs bookkeeping, so
        that one file of ``disk_bytes`` meets the file-size limit before the quota)."""
        page = 4096
        tmpfs_bytes = (limits.disk_bytes + -(-input_bytes // page) * page + len(names) * page
                       + (64 << 10))
        a = [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
             "--clearenv", "--cap-drop", "ALL", "--disable-userns", "--hostname", "sandbox",
             "--uid", str(NOBODY), "--gid", str(NOBODY), "--json-status-fd", str(status_fd),
             "--ro-bind", "/usr", "/usr"]
        for top in ("/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin"):
            if os.path.islink(top):
                a += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                a += ["--ro-bind", top, top]
        a += [x for f in _ETC_FILES if os.path.exists(f) for x in ("--ro-bind", f, f)]
        prefix = str(Path(os.path.realpath(self.python)).parent.parent)
        if not prefix.startswith("/usr"):
            a += ["--ro-bind", prefix, prefix]
        a += ["--proc", "/proc", *_dev_args(),
              "--size", str(tmpfs_bytes), "--perms", "0700", "--tmpfs", "/work"]
        made: set[str] = set()
        for name, fd in zip(names, fds):
            for parent in reversed(PurePosixPath(name).parents[:-1] if "/" in name else []):
                if str(parent) not in made:
                    made.add(str(parent))
                    a += ["--dir", f"/work/{parent}"]
            a += ["--file", str(fd), f"/work/{name}"]
        for key, value in _ENV.items():
            a += ["--setenv", key, value]
        # /dev and the root (bwrap's own tmpfs holding the mount points) are made read-only
        # last, so that the work tmpfs is the only writable filesystem.
        return a + ["--perms", "0700", "--dir", SHM_DIR, "--remount-ro", "/dev",
                    "--remount-ro", "/", "--chdir", "/work", "--", self.python, "-I", "-B",
                    "main.py"]

    def run(self, program: str, *, stdin: str | None = None,
            files: Mapping[str, str | bytes] | None = None,
            limits: Limits = Limits()) -> ExecResult:
        """Run ``program`` as ``/work/main.py``; see :class:`metagen.sandbox.Executor`."""
        contents = checked_run(self.allow_code_execution, program, files, limits)
        staged_files: list[IO[bytes]] = []
        cg: RunCgroup | None = None
        status_r, status_w = os.pipe()
        try:
            staged_files = [staged(c) for c in contents.values()]
            fds = [f.fileno() for f in staged_files]
            if self.uses_cgroup:
                try:
                    cg = RunCgroup(limits.memory_bytes, limits.max_processes)
                except OSError as exc:
                    return _sandbox_error(f"could not create the run's cgroup: {exc}")
            space = limits.memory_bytes * 2 if cg else limits.memory_bytes
            # RLIMIT_NPROC counts every process of the uid (all runs, and exiting ones not yet
            # reaped), so it is only a fallback where no per-run pids cgroup exists.
            table = rlimit_table(limits, address_space=space, nproc=cg is None)
            drop = self.drops_to_nobody
            join = cg.join if cg else None

            def preexec() -> None:
                if join is not None:
                    join()
                apply_rlimits(table)
                if drop:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)

            def kill_tree(pid: int) -> None:
                try:  # bwrap's death takes its pid namespace with it (--die-with-parent)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if cg is not None:
                    cg.kill()

            argv = self.argv(list(contents), fds, limits, status_w,
                             sum(len(c) for c in contents.values()))
            sup = supervise(argv, env={}, cwd="/",
                            stdin=None if stdin is None else stdin.encode(),
                            wall_seconds=limits.wall_seconds,
                            max_output_bytes=limits.max_output_bytes, kill_tree=kill_tree,
                            preexec_fn=preexec, pass_fds=[*fds, status_w])
            os.close(status_w)
            status_w = -1
            reported = _read_status(status_r)
            exit_code, sig = decode_wait_status(sup.wait_status)
            code = exit_code
            if reported is not None and code is not None and code > 128:
                exit_code, sig = None, code - 128  # bwrap's init reports 128 + signal
            oom = cg.oom_killed() if cg else False
            detail = ""
            # bwrap reports an exit code only for a program that ran; without one (and
            # without a kill of ours or the kernel's), bwrap itself failed.
            if not sup.spawn_error and reported is None and not (
                    sup.timed_out or sup.output_exceeded or oom):
                detail = "bubblewrap failed before the program ran: " + \
                    sup.stderr.decode("utf-8", "replace")[-500:]
            cpu = cg.cpu_seconds() if cg else None
            if cpu is not None:  # bwrap's own rusage misses the namespace's processes
                sup.cpu_seconds = max(sup.cpu_seconds, cpu)
            return classify(sup, limits, NAME, exit_code=exit_code, sig=sig,
                            oom_killed=oom, detail=detail)
        finally:
            for f in staged_files:
                f.close()
            for fd in (status_r, status_w):
                if fd >= 0:
                    os.close(fd)
            if cg is not None:
                cg.close()


def _dev_args() -> list[str]:
    """``bwrap`` arguments for a ``/dev`` like ``--dev`` makes, less its unbounded writable
    tmpfs and its ``/dev/shm`` folder: a small tmpfs (made read-only at the end of the command
    line) with the host's harmless device nodes bound in, the standard links, and ``/dev/shm``
    a link to :data:`SHM_DIR` in the size-capped work tmpfs."""
    a = ["--perms", "0755", "--size", str(64 << 10), "--tmpfs", "/dev"]
    for node in _DEV_NODES:
        if os.path.exists(f"/dev/{node}"):
            a += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
    for name, target in {**_DEV_LINKS, "shm": SHM_DIR}.items():
        a += ["--symlink", target, f"/dev/{name}"]
    return a


def _read_status(fd: int) -> int | None:
    """The exit code bwrap's JSON status stream reports for the program, if it ran."""
    os.set_blocking(fd, False)
    chunks = []
    try:
        while data := os.read(fd, 65536):
            chunks.append(data)
    except BlockingIOError:
        pass
    code = None
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("exit-code"), int):
            code = doc["exit-code"]
    return code


def _sandbox_error(detail: str) -> ExecResult:
    return ExecResult("sandbox_error", None, None, "", "", False, False, 0.0, 0.0, NAME, detail)
