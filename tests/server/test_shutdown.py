"""S13: ``metagen serve`` in its own process, stopped by SIGTERM with a stream in flight: it
stops accepting connections, lets the stream finish (within the shutdown timeout), exits with
0 or -SIGTERM and leaves no child process behind."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import spawned_server


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
    with spawned_server(stories_path, "--shutdown-timeout", "20", api_key="k") as (proc, url):
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
