"""Rows E6-E9, E14, E15: the program cannot outlive its run, reach the network, write or read
outside its work dir, gain privilege, or touch a concurrent run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from metagen.sandbox import Limits

from .conftest import claim, kill_all_with, processes_with, token

PROJECT = Path(__file__).resolve().parents[2]
QUICK = Limits(wall_seconds=5, cpu_seconds=2)


def _detached_sleeper(tok: str, *, setsid: bool) -> str:
    """Fork; the child (optionally setsid, then forking again) execs a long sleep marked tok.
    The program goes on only once that exec happened (the pipe's write end is close-on-exec, so
    its reader sees EOF at the exec): on a loaded machine the run could otherwise end before
    the sleeper exists, and a backend that cannot kill it would pass by luck."""
    return (
        "import os, sys\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.close(r)\n"
        f"    if {setsid}:\n        os.setsid()\n"
        "        if os.fork() != 0:\n            os._exit(0)\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', "
        f"{tok!r}])\n"
        "os.close(w)\n"
        "os.read(r, 1)\n"
        "print('sleeper started', flush=True)\n")


def test_e6_double_fork_setsid_has_no_survivor(request, executor):
    claim(request, executor, "E6")
    tok = token()
    try:
        prog = _detached_sleeper(tok, setsid=True) + "import time\ntime.sleep(1000)\n"
        res = executor.run(prog, limits=Limits(wall_seconds=2))
        assert res.status == "timeout" and "sleeper started" in res.stdout
        assert processes_with(tok) == []
    finally:
        kill_all_with(tok)


def test_e6_parent_exits_while_child_sleeps(request, executor):
    claim(request, executor, "E6")
    tok = token()
    try:
        prog = _detached_sleeper(tok, setsid=True) + "import time\ntime.sleep(0.2)\n"
        res = executor.run(prog, limits=Limits(wall_seconds=5))
        assert res.status == "ok" and res.exit_code == 0 and res.wall_seconds < 2
        assert "sleeper started" in res.stdout
        assert processes_with(tok) == []
    finally:
        kill_all_with(tok)


def test_e7_no_network(request, executor):
    claim(request, executor, "E7")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(5)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    tport, uport = tcp.getsockname()[1], udp.getsockname()[1]
    prog = (
        "import socket\nout = {}\n"
        "try:\n    s = socket.create_connection(('127.0.0.1', %d), timeout=2)\n"
        "    s.sendall(b'leak')\n    out['tcp'] = 'connected'\n"
        "except OSError as e:\n    out['tcp'] = 'failed'\n"
        "try:\n    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    u.sendto(b'leak', ('127.0.0.1', %d))\n    out['udp'] = 'sent'\n"
        "except OSError:\n    out['udp'] = 'failed'\n"
        "try:\n    socket.getaddrinfo('example.com', 80)\n    out['dns'] = 'resolved'\n"
        "except OSError:\n    out['dns'] = 'failed'\n"
        "print(out)\n") % (tport, uport)
    try:
        res = executor.run(prog, limits=QUICK)
        time.sleep(0.1)
        try:
            conn, _ = tcp.accept()
            conn.close()
            accepted = True
        except BlockingIOError:
            accepted = False
        try:
            received = udp.recv(100)
        except BlockingIOError:
            received = b""
        assert not accepted and received == b""
        assert "connected" not in res.stdout and "resolved" not in res.stdout
    finally:
        tcp.close()
        udp.close()


def test_e8_no_writes_outside_the_work_dir(request, executor, tmp_path):
    claim(request, executor, "E8")
    tok = token()
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o777)
    targets = [str(outside / "x"), "link/x"]
    if executor.name != "unsafe-local":  # only where a failure would not modify the host
        targets += [f"/etc/{tok}", str(Path.home() / tok), f"/tmp/../{tok}", str(PROJECT / tok)]
    prog = (
        "import json, os\nres = {}\n"
        f"try:\n    os.symlink({str(outside)!r}, 'link')\nexcept OSError:\n    pass\n"
        f"for t in {targets!r}:\n"
        "    try:\n        open(t, 'w').write('x')\n        res[t] = 'written'\n"
        "    except OSError as e:\n        res[t] = type(e).__name__\n"
        "print(json.dumps(res))\n")
    try:
        res = executor.run(prog, limits=QUICK)
        written = [t for t, v in json.loads(res.stdout).items() if v == "written"]
        assert written == []
        assert not (outside / "x").exists()
        assert not any(Path(p).exists() for p in
                       (f"/etc/{tok}", Path.home() / tok, f"/{tok}", PROJECT / tok))
    finally:
        for p in (f"/etc/{tok}", Path.home() / tok, f"/{tok}", PROJECT / tok):
            Path(p).unlink(missing_ok=True)


def test_e9_no_secrets(request, executor, tmp_path, monkeypatch):
    claim(request, executor, "E9")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-content")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    prog = (
        "import os\nprint('ENV', sorted(os.environ))\n"
        f"for p in ({str(secret)!r}, {str(Path.home() / '.ssh')!r}, '/proc/1/environ'):\n"
        "    try:\n        data = open(p, 'rb').read() if not os.path.isdir(p) "
        "else str(os.listdir(p)).encode()\n"
        "        print('READ', p, data[:200])\n"
        "    except OSError as e:\n        print('DENIED', p, type(e).__name__)\n")
    res = executor.run(prog, limits=QUICK)
    assert res.status == "ok", res
    assert "OPENAI_API_KEY" not in res.stdout and "HF_TOKEN" not in res.stdout
    assert "secret" not in res.stdout.replace(str(secret), "")
    reads = [line for line in res.stdout.splitlines() if line.startswith("READ")]
    # /proc/1 inside a pid namespace is the sandbox's own init, with an empty environment.
    assert all(line.startswith("READ /proc/1/environ") for line in reads), reads


def test_e14_no_privilege(executor):
    prog = (
        "import ctypes, os, resource\n"
        "try:\n    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)\n"
        "    print('AS raised')\nexcept ValueError:\n    print('AS refused')\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "rc = libc.unshare(0x10000000)\n"
        "print('unshare', rc, os.strerror(ctypes.get_errno()) if rc else '')\n")
    res = executor.run(prog, limits=QUICK)
    assert "AS refused" in res.stdout
    if executor.name != "unsafe-local":  # root on the host may unshare: not claimed there
        assert "unshare -1" in res.stdout


def test_e14_kill_minus_one_affects_nothing_outside(request, executor):
    claim(request, executor, "E14-kill")
    tok = token()

    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)
    # A host process of the very uid the sandbox runs as: kill(-1) must not reach it.
    bystander = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", tok],
                                 preexec_fn=as_nobody if os.geteuid() == 0 else None)
    try:
        res = executor.run("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('done')",
                           limits=QUICK)
        time.sleep(0.1)
        assert bystander.poll() is None
        assert res.status in ("ok", "error")
    finally:
        bystander.kill()
        bystander.wait()


def _concurrently(executor, first: str, second: str, limits: Limits):
    results = {}

    def go(key, prog):
        results[key] = executor.run(prog, limits=limits)
    a = threading.Thread(target=go, args=("a", first))
    a.start()
    time.sleep(0.3)
    go("b", second)
    a.join()
    return results["a"], results["b"]


def test_e15_concurrent_runs_cannot_read_each_other(request, executor):
    claim(request, executor, "E15-read")
    secret = token()
    first = (f"import os, time\nopen('secret', 'w').write({secret!r})\n"
             "print(os.getcwd(), flush=True)\ntime.sleep(1.5)\nprint(open('secret').read())\n")
    second = ("import glob\nfor p in glob.glob('/tmp/*/secret') + glob.glob('/work/secret')"
              " + glob.glob('/proc/*/cwd/secret'):\n"
              "    try:\n        print(open(p).read())\n    except OSError:\n        pass\n")
    a, b = _concurrently(executor, first, second, Limits(wall_seconds=5))
    assert a.status == "ok" and a.stdout.endswith(secret + "\n")
    assert secret not in b.stdout


def test_e15_kill_minus_one_in_one_run_spares_another(request, executor):
    claim(request, executor, "E15-kill")
    first = "import time\ntime.sleep(1.5)\nprint('alive')\n"
    second = "import os, signal\nos.kill(-1, signal.SIGKILL)\n"
    a, _ = _concurrently(executor, first, second, Limits(wall_seconds=5))
    assert a.status == "ok" and a.stdout == "alive\n"
    assert signal.SIGKILL  # the harness itself survived to here
