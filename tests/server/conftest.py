"""Fixtures: stories260K with a small chat template, and a real uvicorn server on a free
loopback port, started in a thread by the fixture and stopped by it."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import with_chat_template

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
            "{% if not (loop.last and continue_final_message) %}</s>\n{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
API_KEY = "test-key-123"
MODEL = "stories"


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory, stories_path) -> Path:
    """stories260K with a chat template added to its tokenizer."""
    return with_chat_template(tmp_path_factory.mktemp("stories_chat"), TEMPLATE)


@dataclass
class RunningServer:
    """A server on loopback: its base URL, the generator it serves, the uvicorn server."""

    url: str
    port: int
    generator: Any
    server: Any
    app: Any

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


def start_server(generator: Any, head_timeout: float = 10.0, rewards: Any = None,
                 prms: Any = None, **config: Any) -> RunningServer:
    import uvicorn

    from metagen.server import LocalBackend, ServerConfig, create_app
    from metagen.server.protocol import head_timeout_protocol
    app = create_app(LocalBackend(generator), ServerConfig(model_name=MODEL, **config), rewards,
                     prms)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           timeout_graceful_shutdown=5,
                                           http=head_timeout_protocol(head_timeout)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    server._metagen_thread = thread
    return RunningServer(f"http://127.0.0.1:{port}", port, generator, server, app)


@contextlib.contextmanager
def local_policy() -> Iterator[Any]:
    """The testbed policy on the built-in engine, closed on exit."""
    from metagen.generators.local import LocalGenerator
    from metagen.testbed import model_path

    gen = LocalGenerator.from_pretrained(model_path("policy"))
    try:
        yield gen
    finally:
        gen.close()


@contextlib.contextmanager
def serving_testbed_policy(**scorers: Any) -> Iterator[RunningServer]:
    """``metagen serve`` of the testbed policy on loopback with ``rewards`` / ``prms``."""
    with local_policy() as gen:
        running = start_server(gen, **scorers)
        try:
            yield running
        finally:
            stop_server(running)


def stop_server(running: RunningServer) -> None:
    running.server.should_exit = True
    running.server._metagen_thread.join(30)


@contextlib.contextmanager
def spawned_server(model: Path, *args: str, api_key: str | None = None
                   ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``metagen serve MODEL --port 0 ARGS...`` in its own process (so its RSS and children are
    its own): yields the process and its base URL once it listens; killed on exit if still
    running."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("METAGEN_API_KEY", None)
    if api_key is not None:
        env["METAGEN_API_KEY"] = api_key
    proc = subprocess.Popen([sys.executable, "-m", "metagen", "serve", str(model), "--port", "0",
                             *args], env=env, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None:
            line = proc.stderr.readline() if proc.stderr is not None else ""
            assert line or proc.poll() is None, "the server exited before listening"
            assert time.monotonic() < deadline, "the server did not listen within 120 s"
            found = re.search(r"running on http://127\.0\.0\.1:(\d+)", line, re.I)
            if found:
                port = int(found.group(1))
        # keep reading its log, or a full pipe would block the server
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (``VmRSS`` in /proc/PID/status)."""
    return _status_kib(pid, "VmRSS")


def peak_kib(pid: int) -> int:
    """Peak resident set size of process ``pid`` in KiB (``VmHWM``)."""
    return _status_kib(pid, "VmHWM")


def reset_peak(pid: int) -> int:
    """Reset the peak RSS of ``pid`` to its current RSS (``clear_refs`` 5); returns it."""
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")
    return rss_kib(pid)


@pytest.fixture(scope="session")
def served_gen(chat_model_dir):
    from metagen.generators.local import LocalGenerator
    gen = LocalGenerator.from_pretrained(chat_model_dir)
    yield gen
    gen.close()


@pytest.fixture(scope="session")
def ref_gen(chat_model_dir):
    """A second engine on the same model: the library reference the server must equal."""
    from metagen.generators.local import LocalGenerator
    gen = LocalGenerator.from_pretrained(chat_model_dir)
    yield gen
    gen.close()


@pytest.fixture(scope="session")
def server(served_gen) -> Iterator[RunningServer]:
    """The shared server (API key ``API_KEY``)."""
    running = start_server(served_gen, api_key=API_KEY)
    yield running
    stop_server(running)


@pytest.fixture
def http(server):
    """An httpx client with the key."""
    import httpx
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as client:
        yield client
