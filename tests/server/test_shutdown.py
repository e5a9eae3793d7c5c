"""S13: ``metagen serve`` in its own process, stopped by SIGTERM with a stream in flight: it
stops accepting connections, lets the stream finish (within the shutdown timeout), exits with
0 or -SIGTERM and leaves no child process behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc for child processes")
def test_s13_sigterm_finishes_in_flight_streams_then_exits(stories_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), METAGEN_API_KEY="k")
    proc = subprocess.Popen(
        [sys.executable, "-m", "metagen", "serve", str(stories_path), "--port", "0",
         "--shutdown-timeout", "20"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "the server exited before listening"
            assert time.monotonic() < deadline
            found = re.search(r"running on http://127\.0\.0\.1:(\d+)", line, re.I)
            if found:
                port = int(found.group(1))
        url = f"http://127.0.0.1:{port}"
        body = {"model": stories_path.name, "prompt": "Once", "max_tokens": 500,
                "temperature": 1.0, "ignore_eos": True, "stream": True}
        events = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60,
                          headers={"Authorization": "Bearer k"}) as resp:
            lines = resp.iter_lines()
            events.append(next(lines))
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            events.extend(line for line in lines if line)
        assert events[-1] == "data: [DONE]"
        last = json.loads(events[-2][len("data: "):])
        assert last["choices"][0]["finish_reason"] == "length"  # it ran to the end
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=5)  # no longer accepting
        assert proc.wait(30) in (0, -signal.SIGTERM)
        assert time.monotonic() - sent < 30
        assert not _children(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
