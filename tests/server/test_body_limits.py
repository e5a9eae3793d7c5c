"""S3: bodies over the cap (1, 10, 300 MiB; declared, with a lying ``Content-Length``, chunked
without a length), sent to ``metagen serve`` in its own process: each is refused while the
client is still sending (for 10 and 300 MiB; measured: the answer comes after about 3 MiB, what
the loopback socket buffers hold) and the server's peak RSS (``VmHWM``, reset before the sends)
grows by less than 2 MiB for the three bodies together (measured: 0-0.9 MiB), against 311 MiB
sent. Without the key, the same bodies are 401s, answered from the head alone."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.server.conftest import peak_kib, reset_peak, spawned_server

KEY = "k"
CAP = 256 * 1024  # the server's --max-body-bytes
RSS_BOUND_KIB = 2 * 1024  # peak RSS growth allowed while refusing all the bodies of one test
MIB = 1024 * 1024
MODEL = "stories"
SIZES = [1 * MIB, 10 * MIB, 300 * MIB]
BLOCK = memoryview(b" " * (64 * 1024))  # one buffer reused: the client's memory stays flat


@pytest.fixture(scope="module")
def capped(stories_path) -> Iterator[tuple[int, str, int]]:
    """(pid, url, port) of a server with a 256 KiB body cap."""
    with spawned_server(stories_path, "--max-body-bytes", str(CAP), "--served-model-name", MODEL,
                        api_key=KEY) as (proc, url):
        yield proc.pid, url, int(url.rsplit(":", 1)[1])


def _head(length: str | None, auth: bool) -> bytes:
    lines = ["POST /v1/completions HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None
                 else "Transfer-Encoding: chunked")
    if auth:
        lines.append(f"Authorization: Bearer {KEY}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _send(port: int, head: bytes, size: int, chunked: bool) -> tuple[int, int]:
    """Send ``head`` then up to ``size`` body bytes without blocking, stopping at the first
    byte of an answer or when the server closes; returns (status, body bytes sent by then)."""
    frame = f"{len(BLOCK):x}\r\n".encode() if chunked else b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        sent = 0
        pending = memoryview(b"")
        while sent < size:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable:
                break
            if not writable:
                continue
            if not pending:
                pending = memoryview(frame + bytes(BLOCK) + (b"\r\n" if chunked else b""))
            try:
                n = sock.send(pending)
            except BlockingIOError:
                continue
            except OSError:
                break  # closed by the server
            pending = pending[n:]
            sent += n
        sock.setblocking(True)
        answer = b""
        try:
            while b"\r\n" not in answer and (chunk := sock.recv(4096)):
                answer += chunk
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 "), answer[:80]
    return int(answer.split(b" ", 2)[1]), sent


def _ok(url: str) -> None:
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 4, "temperature": 0}
    resp = httpx.post(url + "/v1/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}"})
    assert resp.status_code == 200, resp.text


# (name, Content-Length given in the head: "size", a lie, or None for chunked)
MODES = [("declared", "size"), ("lying-small", "100"), ("chunked", None)]


@pytest.mark.parametrize(("mode", "length"), MODES, ids=[m for m, _ in MODES])
def test_s3_oversized_body_is_refused_before_it_is_read_and_rss_stays_flat(capped, mode,
                                                                            length):
    pid, url, port = capped
    _send(port, _head(str(2 * CAP), auth=True), 2 * CAP, chunked=False)  # warm the path
    base = reset_peak(pid)
    for size in SIZES:
        declared = str(size) if length == "size" else length
        status, sent = _send(port, _head(declared, auth=True), size, chunked=length is None)
        if mode == "lying-small":
            # 100 bytes are the body (bad JSON); the rest is no HTTP request: both are 400s
            assert status == 400
        else:
            assert status == 413
        if size > MIB:  # answered while the client was still sending: the body was not read
            assert sent < size, f"the server read the whole {size // MIB} MiB"
    growth = peak_kib(pid) - base
    assert growth < RSS_BOUND_KIB, f"peak RSS grew by {growth} KiB"
    _ok(url)


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_s3_unauthenticated_big_body_is_401_from_the_head_alone(capped, chunked):
    pid, url, port = capped
    base = reset_peak(pid)
    for size in SIZES:
        status, sent = _send(port, _head(None if chunked else str(size), auth=False), size,
                             chunked)
        assert status == 401
        assert size == MIB or sent < size
    assert peak_kib(pid) - base < RSS_BOUND_KIB
    resp = httpx.post(url + "/v1/completions", content=json.dumps({}), timeout=30)
    assert resp.status_code == 401  # the server still answers
    _ok(url)
