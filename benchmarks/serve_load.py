"""Serving under load: ``metagen serve`` on loopback with C concurrent streaming clients.

    python -m benchmarks.serve_load [--quick] [--clients C] [--duration S] [--json PATH]

The server runs in its own process (``metagen serve <testbed policy> --orm orm=<testbed
ORM>`` on a free loopback port). The run measures, in order:

1. one stream: a single client asking streamed completions back to back for a while (tokens/s);
2. load: ``C`` clients (default 64) asking streamed completions back to back for ``S`` seconds
   (default 120): the count of non-2xx answers (must be 0), time to first token and the gaps
   between content chunks (inter-token latency) p50 / p99, aggregate tokens/s and its ratio to
   one stream, the server's resident memory and open files at the start and the end of the load
   (once it closed the clients' connections, at most 5 s later);
3. best-of-16: the same best-of-16 requests (one per seed) through the server with the openai SDK
   and through the library's ``best_of_n`` on a ``LocalGenerator`` of the same model in this
   process (the server is idle then); the ratio server / library is the HTTP overhead, and the
   run checks that both chose the same text.

Completions are seeded, temperature 0.8, ``max_tokens`` 64, EOS ignored (every request costs
the same). Nothing here is asserted in tests but the ``--quick`` run's consistency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from metagen.testbed import format_prompt, make_problems, model_path

MODEL = "policy"
MAX_TOKENS = 64


@dataclass
class Tally:
    """What the clients saw."""

    ok: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # non-2xx status (or error) -> count
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank rule; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_stats(pid: int) -> dict[str, int]:
    """Resident memory (KiB) and open file descriptors of process ``pid`` (Linux /proc)."""
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    return {"rss_kib": rss, "open_fds": len(os.listdir(f"/proc/{pid}/fd"))}


def settled_stats(pid: int, fds: int, seconds: float = 5.0) -> dict[str, int]:
    """:func:`process_stats` once the server closed the load's connections (its open files are
    back to ``fds``), or after ``seconds``."""
    deadline = time.monotonic() + seconds
    stats = process_stats(pid)
    while stats["open_fds"] > fds and time.monotonic() < deadline:
        time.sleep(0.1)
        stats = process_stats(pid)
    return stats


def start_server(port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "import sys; from metagen.cli import main; sys.exit(main())",
           "serve", str(model_path("policy")),
           "--port", str(port), "--served-model-name", MODEL,
           "--orm", f"orm={model_path('orm')}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}: {' '.join(cmd)}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not start in 120 s")
    except BaseException:  # also a SIGTERM / Ctrl-C while it starts: never leave it running
        proc.kill()
        proc.wait()
        raise


def prompts(count: int) -> list[str]:
    return [format_prompt(p) for p in make_problems("test", count, seed=11)]


async def stream_once(client: httpx.AsyncClient, prompt: str, seed: int, tally: Tally) -> None:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.8,
            "seed": seed, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    last: float | None = None
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code // 100 != 2:
                tally.statuses[str(resp.status_code)] = tally.statuses.get(
                    str(resp.status_code), 0) + 1
                await resp.aread()
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tally.tokens += chunk["usage"]["completion_tokens"]
                if not any(c.get("text") for c in chunk.get("choices", [])):
                    continue
                now = time.perf_counter()
                if last is None:
                    tally.ttft.append(now - start)
                else:
                    tally.itl.append(now - last)
                last = now
        tally.ok += 1
    except httpx.HTTPError as exc:
        name = type(exc).__name__
        tally.statuses[name] = tally.statuses.get(name, 0) + 1


async def load(url: str, clients: int, seconds: float, texts: list[str]) -> tuple[Tally, float]:
    """``clients`` clients streaming back to back for ``seconds``; the tally and the wall time."""
    tally = Tally()
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def one(c: int) -> None:
            k = 0
            while time.perf_counter() < stop:
                await stream_once(client, texts[(c + k) % len(texts)], 1000 * c + k, tally)
                k += 1

        start = time.perf_counter()
        await asyncio.gather(*(one(c) for c in range(clients)))
        return tally, time.perf_counter() - start


def best_of_16(url: str, texts: list[str]) -> dict[str, Any]:
    """The same best-of-16 requests through the server and through the library."""
    import openai

    from metagen.generators.local import LocalGenerator
    from metagen.scorers.resolve import load_reward_folder as load_orm
    from metagen.strategies.best_of_n import best_of_n
    from metagen.types import SamplingParams

    served, chosen = [], []
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as sdk:
        t0 = time.perf_counter()
        for seed, text in enumerate(texts):
            got = sdk.completions.create(model=MODEL, prompt=text, max_tokens=MAX_TOKENS,
                                         temperature=0.8, seed=seed, extra_body={"metagen": {
                                             "strategy": "best_of_n", "n": 16, "reward": "orm"}})
            served.append(got.choices[0].text)
        server_s = time.perf_counter() - t0
    orm = load_orm(model_path("orm"))
    gen = LocalGenerator.from_pretrained(model_path("policy"))
    try:
        best_of_n(gen, texts[0], n=2, reward=orm, params=SamplingParams(max_tokens=4))  # warm
        t0 = time.perf_counter()
        for seed, text in enumerate(texts):
            params = SamplingParams(temperature=0.8, seed=seed, max_tokens=MAX_TOKENS)
            result = best_of_n(gen, text, n=16, reward=orm, params=params)
            assert not isinstance(result, list) and result.best is not None
            chosen.append(result.best.text)
        library_s = time.perf_counter() - t0
    finally:
        gen.close()
    return {"requests": len(texts), "server_s": server_s, "library_s": library_s,
            "server_over_library": server_s / library_s, "same_choice": served == chosen}


def run(quick: bool = False, clients: int = 64, duration: float = 120.0) -> dict[str, Any]:
    if quick:
        clients, duration = min(clients, 4), min(duration, 3.0)
    single_s = 3.0 if quick else 20.0
    texts = prompts(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(port)
    try:
        asyncio.run(load(url, 1, 1.0, texts))  # warm-up, not counted
        one, one_wall = asyncio.run(load(url, 1, single_s, texts))
        start = process_stats(proc.pid)
        tally, wall = asyncio.run(load(url, clients, duration, texts))
        end = settled_stats(proc.pid, start["open_fds"])
        bo16 = best_of_16(url, texts[: 1 if quick else 4])
    finally:
        proc.terminate()
        proc.wait(60)
    one_rate, rate = one.tokens / one_wall, tally.tokens / wall
    ms = 1000.0
    return {
        "meta": {"quick": quick, "clients": clients, "duration_s": duration,
                 "max_tokens": MAX_TOKENS, "cpu_count": os.cpu_count(),
                 "model": "testbed policy"},
        "one_stream": {"requests": one.ok, "tokens": one.tokens, "tokens_per_s": one_rate,
                       "non_2xx": one.statuses},
        "load": {"requests_ok": tally.ok, "non_2xx": sum(tally.statuses.values()),
                 "non_2xx_by_status": tally.statuses, "tokens": tally.tokens, "wall_s": wall,
                 "tokens_per_s": rate, "over_one_stream": rate / one_rate if one_rate else None,
                 "ttft_ms_p50": _scaled(percentile(tally.ttft, 0.5), ms),
                 "ttft_ms_p99": _scaled(percentile(tally.ttft, 0.99), ms),
                 "itl_ms_p50": _scaled(percentile(tally.itl, 0.5), ms),
                 "itl_ms_p99": _scaled(percentile(tally.itl, 0.99), ms)},
        "server_process": {"start": start, "end": end},
        "best_of_16": bo16,
    }


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def table(result: dict[str, Any]) -> str:
    """The run as a Markdown table."""
    ld, sp, bo = result["load"], result["server_process"], result["best_of_16"]
    m = result["meta"]

    def f(v: Any, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    rows = [
        ("clients x seconds", f"{m['clients']} x {m['duration_s']:g}"),
        ("requests ok / non-2xx", f"{ld['requests_ok']} / {ld['non_2xx']}"),
        ("TTFT p50 / p99 (ms)", f"{f(ld['ttft_ms_p50'])} / {f(ld['ttft_ms_p99'])}"),
        ("inter-token p50 / p99 (ms)", f"{f(ld['itl_ms_p50'])} / {f(ld['itl_ms_p99'])}"),
        ("tokens/s: load / one stream",
         f"{f(ld['tokens_per_s'])} / {f(result['one_stream']['tokens_per_s'])} "
         f"(**{f(ld['over_one_stream'], '.2f')}x**)"),
        ("server RSS MiB start / end",
         f"{sp['start']['rss_kib'] / 1024:.0f} / {sp['end']['rss_kib'] / 1024:.0f}"),
        ("server open fds start / end", f"{sp['start']['open_fds']} / {sp['end']['open_fds']}"),
        ("best-of-16: server / library (s)",
         f"{bo['server_s']:.2f} / {bo['library_s']:.2f} (**{bo['server_over_library']:.2f}x**)"
         f", same choice: {bo['same_choice']}"),
    ]
    return "\n".join(["| measure | value |", "| --- | --- |"]
                     + [f"| {k} | {v} |" for k, v in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so run()'s finally stops the server it started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    result = run(args.quick, args.clients, args.duration)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
