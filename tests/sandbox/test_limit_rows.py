"""Rows E1-E5 and E10-E13: every resource limit ends the run with the right status."""

from __future__ import annotations

import sys

from metagen.sandbox import Limits

from .conftest import claim, kill_all_with, processes_with, token

QUICK = Limits(wall_seconds=5, cpu_seconds=1)


def _exec_with(tok: str, code: str) -> str:
    """A program that replaces itself with ``python -c code tok`` (tok marks its cmdline)."""
    return f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {code!r}, {tok!r}])\n"


def test_e1_wall_clock_kills_a_sleeper_without_survivors(executor):
    tok = token()
    try:
        res = executor.run(_exec_with(tok, "import time; time.sleep(1e9)"),
                           limits=Limits(wall_seconds=1, cpu_seconds=5))
        assert res.status == "timeout"
        assert res.wall_seconds <= 1.5
        assert processes_with(tok) == []
    finally:
        kill_all_with(tok)


def test_e2_cpu_limit_kills_a_busy_loop(executor):
    res = executor.run("while True: pass", limits=Limits(wall_seconds=30, cpu_seconds=1))
    assert res.status == "timeout"
    assert res.wall_seconds < 20  # the CPU limit, not the (generous) wall clock, ended it


def test_e3_signal_tricks_and_huge_arithmetic_are_killed(executor):
    stubborn = ("import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU):\n"
                "    signal.signal(s, signal.SIG_IGN)\n"
                "while True:\n    try:\n        while True: pass\n"
                "    except BaseException:\n        pass\n")
    res = executor.run(stubborn, limits=Limits(wall_seconds=3, cpu_seconds=1))
    assert res.status == "timeout" and res.wall_seconds < 3.6
    res = executor.run("x = 10**(10**8)\n", limits=Limits(wall_seconds=3, cpu_seconds=1))
    assert res.status == "timeout" and res.wall_seconds < 3.6


def test_e4_memory_limit(executor):
    limits = Limits(wall_seconds=10, cpu_seconds=5, memory_bytes=256 << 20)
    res = executor.run("x = bytearray(10 << 30)\nprint('allocated')", limits=limits)
    assert res.status == "memory" and "allocated" not in res.stdout
    touch = "a = []\nwhile True:\n    a.append(b'x' * (16 << 20))\n"
    res = executor.run(touch, limits=limits)
    assert res.status == "memory", res


def test_e5_fork_bomb_is_capped_and_leaves_nothing(request, executor):
    claim(request, executor, "E5")
    tok = token()
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n")
    try:
        res = executor.run(_exec_with(tok, bomb),
                           limits=Limits(wall_seconds=2, cpu_seconds=2, max_processes=32))
        assert res.status == "timeout"
        assert processes_with(tok) == []
    finally:
        kill_all_with(tok)


def test_e10_disk_quota_total(request, executor):
    claim(request, executor, "E10-total")
    prog = ("import errno\nn = 0\ntry:\n    for i in range(30):\n"
            "        with open(f'f{i}', 'wb') as f:\n            f.write(b'x' * (1 << 20))\n"
            "        n += 1\nexcept OSError as e:\n    print(errno.errorcode[e.errno], n)\n")
    res = executor.run(prog, limits=Limits(disk_bytes=8 << 20))
    assert res.stdout.split()[0] == "ENOSPC" and int(res.stdout.split()[1]) <= 8


def test_e10_the_quota_is_total_over_every_writable_place(request, executor):
    """/dev/shm counts against ``disk_bytes`` with the work folder (one quota for both), /dev
    itself is read-only, and shared memory still works (a multiprocessing lock, a segment)."""
    claim(request, executor, "E10-shm")
    prog = ("import errno, multiprocessing\nfrom multiprocessing import shared_memory\n"
            "multiprocessing.Lock()\nseg = shared_memory.SharedMemory(create=True, size=4096)\n"
            "seg.close()\nseg.unlink()\n"
            "for place in ('/dev/shm', '/dev', '/work'):\n    n = 0\n    try:\n"
            "        for i in range(30):\n"
            "            with open(f'{place}/f{i}', 'wb') as f:\n"
            "                f.write(b'x' * (1 << 20))\n            n += 1\n"
            "    except OSError as e:\n        print(place, n, errno.errorcode[e.errno])\n")
    res = executor.run(prog, limits=Limits(disk_bytes=8 << 20))
    assert res.status == "ok", (res.status, res.stderr)
    got = {p: (int(n), err) for p, n, err in (line.split() for line in res.stdout.splitlines())}
    assert got["/dev"] == (0, "EROFS")
    assert got["/dev/shm"][1] == got["/work"][1] == "ENOSPC"
    assert got["/dev/shm"][0] >= 1  # usable, but within the one quota:
    assert got["/dev/shm"][0] + got["/work"][0] <= 8


def test_e10_one_huge_file_is_refused(executor):
    prog = ("import errno\ntry:\n    with open('big', 'wb') as f:\n"
            "        f.write(b'x' * (16 << 20))\n    print('wrote')\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno])\n")
    res = executor.run(prog, limits=Limits(disk_bytes=8 << 20))
    assert res.stdout.strip() == "EFBIG"


def test_e11_output_cap_on_stdout_stderr_and_one_long_line(executor):
    cap = 64 << 10
    limits = Limits(wall_seconds=20, max_output_bytes=cap)
    for stream in ("stdout", "stderr"):
        prog = (f"import sys\ns = 'x' * (1 << 20)\nfor _ in range(1024):\n"
                f"    sys.{stream}.write(s)\n")
        res = executor.run(prog, limits=limits)
        assert res.status == "output_limit" and res.wall_seconds < 5
        assert len(getattr(res, stream)) == cap and getattr(res, f"{stream}_truncated")
    res = executor.run("import sys\nsys.stdout.write('y' * (100 << 20))\n", limits=limits)
    assert res.status == "output_limit" and res.stdout == "y" * cap and res.stdout_truncated


def test_e12_stdin_is_closed(executor):
    res = executor.run("input()", limits=QUICK)
    assert res.status == "error" and "EOFError" in res.stderr and res.wall_seconds < 3
    res = executor.run("print(input()[::-1])", stdin="abc\n", limits=QUICK)
    assert res.status == "ok" and res.stdout == "cba\n"


def test_e13_open_file_limit(executor):
    prog = ("import errno\nfs = []\ntry:\n    while True:\n"
            "        fs.append(open('/dev/null'))\nexcept OSError as e:\n"
            "    print(errno.errorcode[e.errno], len(fs))\n")
    res = executor.run(prog, limits=Limits(max_open_files=64))
    code, count = res.stdout.split()
    assert code == "EMFILE" and int(count) < 64
    assert executor.run("print('fine')", limits=QUICK).stdout == "fine\n"


def test_nonzero_exit_and_success_statuses(executor):
    assert executor.run("raise SystemExit(3)", limits=QUICK).exit_code == 3
    res = executor.run(f"print({sys.version_info[0]})", limits=QUICK)
    assert res.status == "ok" and res.stdout == "3\n" and res.backend == executor.name
