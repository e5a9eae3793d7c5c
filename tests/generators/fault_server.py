"""A fault-injecting OpenAI-compatible HTTP server on loopback, for the OpenAIGenerator tests.

``FaultServer(plan)`` serves ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions`` on 127.0.0.1 (a real ``ThreadingHTTPServer`` in a thread, HTTP/1.1
keep-alive). For every POST it asks ``plan(seen)`` for a :class:`Fault` (``seen.attempt`` is how
many times this exact body has arrived, 1-based, so "fail the first attempt" is easy) and records
what it saw: the requests, the peak number in flight, and the client disconnects it noticed
while holding a request (hang / delay). A well-behaved answer's text is ``respond(body)``
(default ``"answer <seed % 3>"``), with ``usage`` counted in words; a POST to a path in
``routes`` (e.g. ``/pooling``, ``/classify``, ``/score`` of a reward server) is answered with
``routes[path](body)`` instead.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Fault:
    """What to do with one request. ``kind``: ``ok`` (after ``delay`` s), ``status`` (``status``
    with ``headers`` and a JSON or raw ``body``), ``hang`` (until the client goes), ``raw``
    (status 200 with raw ``body`` bytes), ``json`` (status 200 with ``body`` as JSON), ``reset``
    (headers and part of a body, then the socket is closed). Streamed requests also take
    ``drip``, ``truncate`` and ``stream_error`` (see ``_Handler._sse``)."""

    kind: str = "ok"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    attempt: int


def default_text(body: dict[str, Any]) -> str:
    return f"answer {(body.get('seed') or 0) % 3}"


def echo_body(body: dict[str, Any]) -> dict[str, Any]:
    """A prompt-only echo answer: tokens are words with their leading spaces, each with logprob
    ``-0.1 x its letters`` (the first has none), plus one generated token when the request asks
    for ``max_tokens > 0``."""
    text = body["prompt"]
    tokens = [m.group() for m in re.finditer(r"\s*\S+", text)]
    offsets = [m.start() for m in re.finditer(r"\s*\S+", text)]
    values: list[float | None] = [None] + [-0.1 * len(t.strip()) for t in tokens[1:]]
    if body.get("max_tokens"):
        tokens, offsets, values = tokens + [" gen"], offsets + [len(text)], values + [-9.0]
    logprobs = {"tokens": tokens, "token_logprobs": values, "text_offset": offsets,
                "top_logprobs": [None] + [{t: v} for t, v in zip(tokens[1:], values[1:])]}
    return {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": "length",
                         "logprobs": logprobs}],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": 0,
                      "total_tokens": len(tokens)}}


def ok_body(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A well-formed n=1 response to ``body`` with ``text`` (logprobs when asked)."""
    if body.get("echo"):
        return echo_body(body)
    chat = "messages" in body
    prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
    words = text.split()
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    if body.get("logprobs") is not None and body.get("logprobs") is not False:  # 0 counts
        toks = [f"token_id:{10 + i}" for i in range(len(words))]
        if chat:
            choice["logprobs"] = {"content": [{"token": t, "logprob": -0.5, "top_logprobs": [
                {"token": t, "logprob": -0.5}]} for t in toks]}
        else:
            choice["logprobs"] = {"tokens": toks, "token_logprobs": [-0.5] * len(toks),
                                  "top_logprobs": [{t: -0.5} for t in toks]}
    return {"id": "x", "object": "chat.completion" if chat else "text_completion",
            "created": 0, "model": body.get("model", "m"), "choices": [choice],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(words),
                      "total_tokens": len(prompt.split()) + len(words)}}


class FaultServer:
    """See the module docstring. ``start`` / ``stop`` / ``kill`` (drop every connection now) /
    ``restart`` (same port)."""

    def __init__(self, plan: Callable[[Seen], Fault] | None = None,
                 respond: Callable[[dict[str, Any]], str] = default_text,
                 owned_by: str = "vllm",
                 routes: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
                 models_status: list[int] | None = None) -> None:
        self.plan = plan or (lambda seen: Fault())
        self.respond = respond
        self.routes = dict(routes or {})
        self.owned_by = owned_by
        self.models_status = list(models_status or [])  # GET /v1/models answers, then 200s
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.peak = 0
        self.disconnects = 0
        self.port = 0
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def posts(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path != "/v1/models"]

    def start(self) -> FaultServer:
        handler = type("Handler", (_Handler,), {"fault_server": self})
        httpd = _Server(("127.0.0.1", self.port), handler)
        self.port = httpd.server_address[1]
        self._stopping.clear()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()
        return self

    def kill(self) -> None:
        """Stop accepting and drop every open connection (in-flight requests die mid-way)."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        if self._thread is not None:
            self._thread.join(5)

    stop = kill

    def restart(self) -> None:
        self.start()

    # called by the handler
    def record(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Seen:
        with self._lock:
            key = path + json.dumps(body, sort_keys=True)
            self._counts[key] += 1
            seen = Seen(path, body, headers, self._counts[key])
            self.seen.append(seen)
            return seen

    def enter(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.add(conn)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self, conn: socket.socket) -> None:
        with self._lock:
            self.in_flight -= 1

    def wait_for_client(self, conn: socket.socket, seconds: float) -> bool:
        """Hold the request up to ``seconds``; True (and counted) if the client disconnected."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self._stopping.is_set():
            ready, _, _ = select.select([conn], [], [], 0.02)
            if ready:
                try:
                    gone = conn.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    with self._lock:
                        self.disconnects += 1
                    return True
        return False


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fault_server: FaultServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.fault_server._lock:
            self.fault_server._conns.add(self.connection)

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None,
              ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        srv = self.fault_server
        srv.record(self.path, {}, dict(self.headers))
        status = srv.models_status.pop(0) if srv.models_status else 200
        if self.path.rstrip("/") == "/v1/models" and status != 200:
            self._send(status, b'{"error": {"message": "scripted"}}')
        elif self.path.rstrip("/") == "/v1/models":
            data = {"object": "list", "data": [{"id": "m", "object": "model",
                                                "owned_by": srv.owned_by, "permissions": []}]}
            self._send(200, json.dumps(data).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        srv = self.fault_server
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        seen = srv.record(self.path, body, dict(self.headers))
        srv.enter(self.connection)
        try:
            self._serve(srv, srv.plan(seen), body)
        finally:
            srv.leave(self.connection)

    def _sse(self, srv: FaultServer, fault: Fault, body: dict[str, Any]) -> None:
        """A streamed answer: one chunk per word, then finish_reason, usage and [DONE];
        ``drip`` sends a word every ``delay`` s forever, ``truncate`` stops before the finish,
        ``stream_error`` sends an error chunk after the first word."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        chat = "messages" in body
        words = [w if i == 0 else " " + w for i, w in enumerate(srv.respond(body).split())]

        def chunk(text: str | None, finish: str | None = None, usage: Any = None) -> None:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text or ""
            data: dict[str, Any] = {"id": "x", "choices": [] if usage else [choice]}
            if usage:
                data["usage"] = usage
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        if fault.kind == "drip":
            while not srv.wait_for_client(self.connection, fault.delay):
                chunk(" drip")
            return
        for i, word in enumerate(words):
            chunk(word)
            if fault.kind == "stream_error" and i == 0:
                self.wfile.write(b'data: {"error": {"message": "engine died", "code": 500}}\n\n')
                self.wfile.write(b"data: [DONE]\n\n")
                return
        if fault.kind == "truncate":
            return
        chunk(None, "stop")
        chunk(None, usage={"prompt_tokens": 1, "completion_tokens": len(words)})
        self.wfile.write(b"data: [DONE]\n\n")

    def _serve(self, srv: FaultServer, fault: Fault, body: dict[str, Any]) -> None:
        if body.get("stream") and fault.kind in ("ok", "drip", "truncate", "stream_error"):
            if fault.kind != "drip" and fault.delay and \
                    srv.wait_for_client(self.connection, fault.delay):
                return
            self._sse(srv, fault, body)
            return
        if fault.kind == "hang":
            srv.wait_for_client(self.connection, 3600)
            self.close_connection = True
            return
        if fault.delay and srv.wait_for_client(self.connection, fault.delay):
            self.close_connection = True
            return
        if srv._stopping.is_set():
            return
        if fault.kind == "ok":
            route = srv.routes.get(self.path)
            reply = route(body) if route is not None else ok_body(body, srv.respond(body))
            self._send(200, json.dumps(reply).encode())
        elif fault.kind == "json":
            self._send(200, json.dumps(fault.body).encode())
        elif fault.kind == "raw":
            self._send(fault.status, fault.body, fault.headers, ctype="text/html")
        elif fault.kind == "status":
            payload = fault.body if isinstance(fault.body, bytes) else json.dumps(
                fault.body or {"error": {"message": f"status {fault.status}"}}).encode()
            self._send(fault.status, payload, fault.headers)
        elif fault.kind == "reset":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"choices": [')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        else:
            raise ValueError(fault.kind)


@contextmanager
def fault_generators() -> Iterator[Callable[..., tuple[FaultServer, Any]]]:
    """``make(plan=None, *, server_kw=None, **generator_options) -> (server, generator)``: a
    :class:`FaultServer` running ``plan`` and an ``OpenAIGenerator`` (vLLM dialect, 5 s timeout,
    3 fast retries) on it; every server and generator made is stopped on exit."""
    from metagen.generators.openai import OpenAIGenerator  # needs httpx: imported on use

    made: list[tuple[FaultServer, Any]] = []

    def make(plan: Any = None, *, server_kw: dict[str, Any] | None = None,
             **kw: Any) -> tuple[FaultServer, Any]:
        server = FaultServer(plan, **(server_kw or {})).start()
        opts: dict[str, Any] = dict(dialect="vllm", timeout=5.0, max_retries=3,
                                    backoff_base=0.01, backoff_cap=0.05, max_retry_after=2.0)
        opts.update(kw)
        gen = OpenAIGenerator(server.url, "m", **opts)
        made.append((server, gen))
        return server, gen

    try:
        yield make
    finally:
        for server, gen in made:
            gen.close()
            server.stop()
