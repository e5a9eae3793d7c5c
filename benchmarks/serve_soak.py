"""Soak (S16): 10,000 mixed requests against ``metagen serve`` with bounded concurrency.

    python -m benchmarks.serve_soak [--quick] [--requests N] [--concurrency C] [--every K]
                                    [--json PATH]

The server runs in its own process (``metagen serve <testbed policy>``, started as
:mod:`benchmarks.serve_load` starts it) on a free loopback port. ``C`` clients (default 16) take
the requests in turn; each request's kind is drawn (seeded) from :data:`MIX`: short completions,
streams, ``n`` = 4, streams with logprobs, echo with prompt logprobs, bad requests of several
sorts (each must be a 4xx with an OpenAI-style error body), and clients that leave mid-request
(a stream closed after its first event, a long completion abandoned after 0.3 s). A warm-up of
the same mix runs first (not counted). The run records:

- every answer by kind and status: the count of 5xx (must be 0) and of unexpected outcomes (a
  good request not answered 200 with a whole body, a bad one not answered its 4xx);
- latency p50 / p99 per kind (requests answered as expected, whole response);
- the server's resident memory and open files, and the engine's KV blocks (``/metrics``: free,
  stored in the prefix cache, held by live sequences), at the start, after every ``K`` requests
  (default 1,000) and at the end, once the server has settled (its open files back to the start
  value and no block held by a sequence, at most 30 s later). Blocks are not leaked when, at the
  start and the end, none is held by a sequence and free + cached = total.

Run it niced on a shared machine; nothing here is asserted in tests but the ``--quick`` run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.serve_load import MODEL, free_port, percentile, process_stats, prompts, \
    start_server

# kind -> share of the requests
MIX: dict[str, float] = {"complete": 0.38, "stream": 0.22, "n4": 0.08, "stream_logprobs": 0.06,
                         "echo_logprobs": 0.04, "bad": 0.14, "leave_stream": 0.04,
                         "leave_wait": 0.04}
LEAVE_AFTER_S = 0.3
# bad bodies (raw bytes) and the status each must get
BAD: list[tuple[str, bytes, int]] = [
    ("unknown_field", json.dumps({"model": MODEL, "prompt": "x", "best_of": 2}).encode(), 400),
    ("bad_value", json.dumps({"model": MODEL, "prompt": "x", "temperature": -1}).encode(), 400),
    ("bad_json", b'{"model": "policy", "prompt": ', 400),
    ("wrong_model", json.dumps({"model": "gpt-4", "prompt": "x"}).encode(), 404),
    ("deep_json", b'{"model": "policy", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    ("no_prompt", json.dumps({"model": MODEL}).encode(), 400),
    ("too_long", json.dumps({"model": MODEL, "prompt": [5] * 4096}).encode(), 400),
    ("not_json", b"\xff\xfe garbage", 400),
]


@dataclass
class Tally:
    """What the clients saw."""

    outcomes: Counter[str] = field(default_factory=Counter)  # "kind status" -> count
    unexpected: Counter[str] = field(default_factory=Counter)
    latency: dict[str, list[float]] = field(default_factory=dict)  # by kind ("bad" as one)
    done: int = 0

    def record(self, kind: str, status: str, expected: bool, seconds: float) -> int:
        """Count one answer; returns how many were counted so far."""
        self.outcomes[f"{kind} {status}"] += 1
        if expected:
            self.latency.setdefault(kind.split(":")[0], []).append(seconds)
        else:
            self.unexpected[f"{kind} {status}"] += 1
        self.done += 1
        return self.done

    @property
    def five_xx(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k.split()[-1].startswith("5"))


def body_of(kind: str, text: str, seed: int) -> dict[str, Any]:
    base: dict[str, Any] = {"model": MODEL, "prompt": text, "temperature": 0.8, "seed": seed,
                            "max_tokens": 16}
    if kind == "stream":
        return base | {"stream": True, "stream_options": {"include_usage": True}}
    if kind == "n4":
        return base | {"n": 4, "max_tokens": 12}
    if kind == "stream_logprobs":
        return base | {"stream": True, "logprobs": 2}
    if kind == "echo_logprobs":
        return base | {"echo": True, "logprobs": 1, "max_tokens": 0, "prompt_logprobs": 1}
    if kind in ("leave_stream", "leave_wait"):
        return base | {"max_tokens": 400, "ignore_eos": True, "stream": kind == "leave_stream"}
    return base


async def one(client: httpx.AsyncClient, kind: str, text: str, seed: int, tally: Tally,
              rng: random.Random) -> int:
    """Send one request of ``kind`` and count its answer; returns the count so far."""
    start = time.perf_counter()
    status = "?"
    expected = False
    try:
        if kind == "bad":
            name, raw, want = BAD[rng.randrange(len(BAD))]
            kind = f"bad:{name}"
            resp = await client.post("/v1/completions", content=raw,
                                     headers={"Content-Type": "application/json"})
            status = str(resp.status_code)
            expected = resp.status_code == want and "error" in resp.json()
        elif kind == "leave_stream":
            async with client.stream("POST", "/v1/completions",
                                     json=body_of(kind, text, seed)) as resp:
                status = str(resp.status_code)
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        break  # one event, then hang up
            expected = status == "200"
        elif kind == "leave_wait":
            try:
                resp = await client.post("/v1/completions", json=body_of(kind, text, seed),
                                         timeout=LEAVE_AFTER_S)
                status = str(resp.status_code)  # it finished first: fine if it is a 200
                expected = status == "200"
            except httpx.ReadTimeout:
                status, expected = "left", True
        elif body_of(kind, text, seed).get("stream"):
            async with client.stream("POST", "/v1/completions",
                                     json=body_of(kind, text, seed)) as resp:
                status = str(resp.status_code)
                lines = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
            events = [json.loads(line[6:]) for line in lines[:-1]]
            expected = (status == "200" and lines[-1] == "data: [DONE]"
                        and not any("error" in e for e in events))
            if kind == "stream_logprobs":
                expected &= any(c.get("logprobs") for e in events for c in e["choices"])
        else:
            resp = await client.post("/v1/completions", json=body_of(kind, text, seed))
            status = str(resp.status_code)
            choices = resp.json().get("choices", []) if status == "200" else []
            expected = status == "200" and len(choices) == (4 if kind == "n4" else 1)
            if kind == "echo_logprobs":
                expected &= bool(choices and choices[0].get("prompt_logprobs"))
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: a body that is not JSON
        status = type(exc).__name__
    return tally.record(kind, status, expected, time.perf_counter() - start)


async def metrics(client: httpx.AsyncClient) -> dict[str, float]:
    text = (await client.get("/metrics")).text
    out = {}
    for line in text.splitlines():
        if line.startswith("metagen_kv_blocks") or line.startswith("metagen_num_requests"):
            name, value = line.rsplit(" ", 1)
            out[name.removeprefix("metagen_")] = float(value)
    return out


async def snapshot(client: httpx.AsyncClient, pid: int, done: int, t0: float
                   ) -> dict[str, Any]:
    return {"requests": done, "t_s": round(time.perf_counter() - t0, 1)} | process_stats(pid) \
        | await metrics(client)


async def settled(client: httpx.AsyncClient, pid: int, done: int, t0: float, fds: int | None,
                  seconds: float = 30.0) -> dict[str, Any]:
    """:func:`snapshot` once no block is held by a sequence and the open files are back to
    ``fds`` (when given), or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        snap = await snapshot(client, pid, done, t0)
        calm = snap["kv_blocks_in_requests"] == 0 and (fds is None or snap["open_fds"] <= fds)
        if calm or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.2)


async def soak(url: str, pid: int, requests: int, concurrency: int, every: int, warmup: int,
               seed: int) -> dict[str, Any]:
    texts = prompts(32)
    rng = random.Random(seed)
    kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=warmup + requests)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client, \
            httpx.AsyncClient(base_url=url, timeout=30) as probe:
        async def run(first: int, count: int, tally: Tally, checkpoints: list[Any] | None,
                      t0: float) -> None:
            order = iter(range(first, first + count))

            async def worker() -> None:
                for i in order:
                    done = await one(client, kinds[i], texts[i % len(texts)], i, tally, rng)
                    if checkpoints is not None and done % every == 0:
                        checkpoints.append(await snapshot(probe, pid, tally.done, t0))

            await asyncio.gather(*(worker() for _ in range(concurrency)))

        t0 = time.perf_counter()
        await run(0, warmup, Tally(), None, t0)
        start = await settled(probe, pid, 0, time.perf_counter(), None)
        tally = Tally()
        checkpoints: list[dict[str, Any]] = []
        t1 = time.perf_counter()
        await run(warmup, requests, tally, checkpoints, t1)
        wall = time.perf_counter() - t1
        end = await settled(probe, pid, tally.done, t1, int(start["open_fds"]))
    ms = 1000.0
    return {
        "requests": tally.done, "wall_s": wall, "requests_per_s": tally.done / wall,
        "five_xx": tally.five_xx, "unexpected": sum(tally.unexpected.values()),
        "unexpected_by_outcome": dict(tally.unexpected),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "latency_ms": {k: {"n": len(v), "p50": (percentile(v, 0.5) or 0.0) * ms,
                           "p99": (percentile(v, 0.99) or 0.0) * ms}
                       for k, v in sorted(tally.latency.items())},
        "start": start, "checkpoints": checkpoints, "end": end,
    }


def run(quick: bool, requests: int, concurrency: int, every: int, seed: int) -> dict[str, Any]:
    warmup = 20 if quick else 200
    if quick:
        requests, every = min(requests, 100), min(every, 50)
    port = free_port()
    proc = start_server(port, Path(tempfile.mkdtemp(prefix="serve_soak_")) / "metagen_serve.log")
    try:
        result = asyncio.run(soak(f"http://127.0.0.1:{port}", proc.pid, requests, concurrency,
                                  every, warmup, seed))
    finally:
        proc.terminate()
        proc.wait(60)
    s, e = result["start"], result["end"]
    result["verdict"] = {
        "zero_5xx": result["five_xx"] == 0,
        "blocks_in_requests_start_end": [s["kv_blocks_in_requests"], e["kv_blocks_in_requests"]],
        # none held by a sequence, every used block is the prefix cache's
        "no_block_leaked": all(x["kv_blocks_in_requests"] == 0
                               and x["kv_blocks_used"] == x["kv_blocks_cached"] for x in (s, e)),
        "rss_mib_start_end": [s["rss_kib"] / 1024, e["rss_kib"] / 1024],
        "open_fds_start_end": [s["open_fds"], e["open_fds"]],
    }
    result["meta"] = {"quick": quick, "concurrency": concurrency, "warmup": warmup,
                      "every": every, "seed": seed, "mix": MIX, "cpu_count": os.cpu_count(),
                      "model": "testbed policy"}
    return result


def table(result: dict[str, Any]) -> str:
    """Start, checkpoints and end as a Markdown table."""
    rows = ["| requests | t (s) | RSS MiB | open fds | KV free / cached / in requests |",
            "| --- | --- | --- | --- | --- |"]
    for snap in [result["start"], *result["checkpoints"], result["end"]]:
        rows.append(f"| {snap['requests']} | {snap['t_s']} | {snap['rss_kib'] / 1024:.0f} | "
                    f"{snap['open_fds']} | {snap['kv_blocks_free']:.0f} / "
                    f"{snap['kv_blocks_cached']:.0f} / {snap['kv_blocks_in_requests']:.0f} |")
    head = (f"{result['requests']} requests in {result['wall_s']:.0f} s "
            f"({result['requests_per_s']:.1f}/s): 5xx {result['five_xx']}, unexpected "
            f"{result['unexpected']}")
    return head + "\n\n" + "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so run()'s finally stops the server it started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    result = run(args.quick, args.requests, args.concurrency, args.every, args.seed)
    print(table(result))
    print(json.dumps(result["verdict"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
