"""Serving under load: ``metagen serve`` (and vLLM's server) on loopback with C concurrent
streaming clients.

    python -m benchmarks.serve_load [--quick] [--clients C] [--duration S]
                                    [--targets metagen,vllm] [--json PATH]

Each target is a server in its own process(es) on a free loopback port serving the testbed
policy: ``metagen`` is ``metagen serve <testbed policy> --orm orm=<testbed ORM>``; ``vllm`` is
vLLM's CPU server from the vLLM peer environment (``benchmarks/peers/vllm_server.py``: float32,
its prefix cache on, at most ``C`` sequences, no prompt's prefill split), skipped with its
install command when that environment is missing. The targets run one after another (never
side by side: they share the cores), each through the same client code, and the run measures,
per target, in order:

1. one stream: a single client asking streamed completions back to back for a while (tokens/s);
2. load: ``C`` clients (default 64) asking streamed completions back to back for ``S`` seconds
   (default 120): the count of non-2xx answers (must be 0), time to first token and the gaps
   between content chunks (inter-token latency) p50 / p99, aggregate tokens/s and its ratio to
   one stream, the server's resident memory and open files at the start and the end of the load
   (once it closed the clients' connections, at most 5 s later);
3. samples: 20 prompts x ``n = 16`` seeded samples, all 20 requests at once (what a best-of-16
   or voting client asks of a server): tokens/s;
4. (``metagen`` only) best-of-16 in the server: the same best-of-16 requests (one per seed)
   through the server with the openai SDK and through the library's ``best_of_n`` on a
   ``LocalGenerator`` of the same model in this process (the server is idle then); the ratio
   server / library is the HTTP overhead, and the run checks that both chose the same text.

Completions are seeded, temperature 0.8, ``max_tokens`` 64, EOS ignored (every request costs
the same on every target). With two targets the run reports metagen's rates over vLLM's. Memory
and open files are the server's whole process tree's (vLLM's engine core is a child process).
Nothing here is asserted in tests but the ``--quick`` run's consistency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.server_process import free_port, wait_healthy
from metagen.testbed import format_prompt, make_problems, model_path

MODEL = "policy"
MAX_TOKENS = 64
SAMPLE_PROMPTS, SAMPLE_N = 20, 16
TARGETS = ("metagen", "vllm")


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


def process_tree(pid: int) -> list[int]:
    """``pid`` and its living descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state
        children.setdefault(parent, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, ()))
    return tree


def process_stats(pid: int) -> dict[str, int]:
    """Resident memory (KiB) and open file descriptors of process ``pid`` and its descendants,
    summed (Linux /proc)."""
    rss = fds = 0
    for p in process_tree(pid):
        try:
            rss += next(int(line.split()[1]) for line in Path(f"/proc/{p}/status").read_text()
                        .splitlines() if line.startswith("VmRSS:"))
            fds += len(os.listdir(f"/proc/{p}/fd"))
        except (OSError, StopIteration):  # exited meanwhile, or a zombie (no VmRSS)
            continue
    return {"rss_kib": rss, "open_fds": fds}


def settled_stats(pid: int, fds: int, seconds: float = 5.0) -> dict[str, int]:
    """:func:`process_stats` once the server closed the load's connections (its open files are
    back to ``fds``), or after ``seconds``."""
    deadline = time.monotonic() + seconds
    stats = process_stats(pid)
    while stats["open_fds"] > fds and time.monotonic() < deadline:
        time.sleep(0.1)
        stats = process_stats(pid)
    return stats


def start_server(port: int, log: Path) -> subprocess.Popen[bytes]:
    """``metagen serve`` of the testbed policy (and its ORM) on ``port``, healthy; its output
    goes to ``log``, whose tail a failure to start (``ServerStartError``, a RuntimeError) shows.
    Killed if it does not start, also on a SIGTERM / Ctrl-C while it starts."""
    cmd = [sys.executable, "-c", "import sys; from metagen.cli import main; sys.exit(main())",
           "serve", str(model_path("policy")),
           "--port", str(port), "--served-model-name", MODEL,
           "--orm", f"orm={model_path('orm')}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log, 120, who="metagen serve")
        return proc
    except BaseException:  # never leave it running
        proc.kill()
        proc.wait()
        raise


@contextmanager
def served(target: str, clients: int, logs: Path) -> Iterator[tuple[str, int]]:
    """The ``target``'s server, healthy, for the block: its root URL and its process id; stopped
    after the block (also when it fails)."""
    if target == "metagen":
        port = free_port()
        proc = start_server(port, logs / "metagen_serve.log")
        try:
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(60)
    elif target == "vllm":
        from benchmarks.peers.vllm_server import serve

        # prefix caching is vLLM's default; at most ``clients`` sequences, as many as the load
        # keeps in flight (and the samples' 20 x 16 queue behind them)
        with serve(model_path("policy"), MODEL, logs / "vllm.log",
                   max_num_seqs=max(clients, SAMPLE_N)) as server:
            assert server.proc is not None
            yield server.root, server.proc.pid
    else:
        raise ValueError(f"targets: unknown target {target!r} (known: {', '.join(TARGETS)})")


def prompts(count: int) -> list[str]:
    return [format_prompt(p) for p in make_problems("test", count, seed=11)]


async def samples(url: str, texts: list[str], n: int) -> dict[str, Any]:
    """``n`` seeded samples of each of ``texts``, every request at once: tokens and tokens/s."""
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=len(texts) + 4)) as client:
        async def one(seed: int, prompt: str) -> int:
            resp = await client.post("/v1/completions", json={
                "model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "n": n,
                "temperature": 0.8, "seed": seed, "ignore_eos": True})
            resp.raise_for_status()
            return int(resp.json()["usage"]["completion_tokens"])

        start = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(s, t) for s, t in enumerate(texts))))
        wall = time.perf_counter() - start
    return {"requests": len(texts), "n": n, "tokens": tokens, "wall_s": wall,
            "tokens_per_s": tokens / wall}


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


def run_target(target: str, quick: bool, clients: int, duration: float,
               logs: Path) -> dict[str, Any]:
    """One target's measures (module docstring), its server started and stopped here."""
    single_s = 3.0 if quick else 20.0
    texts = prompts(SAMPLE_PROMPTS)
    with served(target, clients, logs) as (url, pid):
        asyncio.run(load(url, 1, 1.0, texts))  # warm-up, not counted
        one, one_wall = asyncio.run(load(url, 1, single_s, texts))
        start = process_stats(pid)
        tally, wall = asyncio.run(load(url, clients, duration, texts))
        end = settled_stats(pid, start["open_fds"])
        sampled = asyncio.run(samples(url, texts[: 2 if quick else SAMPLE_PROMPTS],
                                      4 if quick else SAMPLE_N))
        bo16 = best_of_16(url, texts[: 1 if quick else 4]) if target == "metagen" else None
    one_rate, rate = one.tokens / one_wall, tally.tokens / wall
    ms = 1000.0
    return {
        "one_stream": {"requests": one.ok, "tokens": one.tokens, "tokens_per_s": one_rate,
                       "non_2xx": one.statuses},
        "load": {"requests_ok": tally.ok, "non_2xx": sum(tally.statuses.values()),
                 "non_2xx_by_status": tally.statuses, "tokens": tally.tokens, "wall_s": wall,
                 "tokens_per_s": rate, "over_one_stream": rate / one_rate if one_rate else None,
                 "ttft_ms_p50": _scaled(percentile(tally.ttft, 0.5), ms),
                 "ttft_ms_p99": _scaled(percentile(tally.ttft, 0.99), ms),
                 "itl_ms_p50": _scaled(percentile(tally.itl, 0.5), ms),
                 "itl_ms_p99": _scaled(percentile(tally.itl, 0.99), ms)},
        "samples": sampled,
        "server_process": {"start": start, "end": end},
        "best_of_16": bo16,
    }


def run(quick: bool = False, clients: int = 64, duration: float = 120.0,
        targets: tuple[str, ...] = ("metagen",), logs: Path | None = None) -> dict[str, Any]:
    """Every target's measures, one target after another, and metagen's rates over the other
    targets' (``ratios``); a vLLM target whose environment is missing is listed in ``skipped``
    with its install command."""
    from benchmarks.peers.vllm_server import SETUP, vllm_python

    if quick:
        clients, duration = min(clients, 4), min(duration, 3.0)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"targets: unknown {unknown} (known: {', '.join(TARGETS)})")
    skipped = {"vllm": SETUP} if "vllm" in targets and vllm_python() is None else {}
    logs = logs or Path(tempfile.mkdtemp(prefix="serve_load_"))
    results = {t: run_target(t, quick, clients, duration, logs)
               for t in targets if t not in skipped}
    ratios = {}
    if "metagen" in results:
        mine = results["metagen"]
        for other, theirs in results.items():
            if other != "metagen":
                ratios[other] = {
                    key: mine[key]["tokens_per_s"] / theirs[key]["tokens_per_s"]
                    for key in ("one_stream", "load", "samples")}
    return {"meta": {"quick": quick, "clients": clients, "duration_s": duration,
                     "max_tokens": MAX_TOKENS, "cpu_count": os.cpu_count(),
                     "model": "testbed policy", "targets": list(targets)},
            "targets": results, "skipped": skipped, "ratios": ratios}


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def table(result: dict[str, Any]) -> str:
    """The run as a Markdown table, a column per target (and metagen's ratio to each other)."""
    m, targets = result["meta"], result["targets"]
    names = list(targets)

    def f(v: Any, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    def row(label: str, cell: Any) -> str:
        return f"| {label} | " + " | ".join(cell(targets[t]) for t in names) + " |"

    lines = ["| measure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             "| clients x seconds | " + " | ".join(
                 f"{m['clients']} x {m['duration_s']:g}" for _ in names) + " |",
             row("requests ok / non-2xx",
                 lambda r: f"{r['load']['requests_ok']} / {r['load']['non_2xx']}"),
             row("TTFT p50 / p99 (ms)",
                 lambda r: f"{f(r['load']['ttft_ms_p50'])} / {f(r['load']['ttft_ms_p99'])}"),
             row("inter-token p50 / p99 (ms)",
                 lambda r: f"{f(r['load']['itl_ms_p50'])} / {f(r['load']['itl_ms_p99'])}"),
             row("tokens/s: load / one stream",
                 lambda r: f"{f(r['load']['tokens_per_s'])} / "
                           f"{f(r['one_stream']['tokens_per_s'])} "
                           f"(**{f(r['load']['over_one_stream'], '.2f')}x**)"),
             row("samples: prompts x n, tokens/s",
                 lambda r: f"{r['samples']['requests']} x {r['samples']['n']}, "
                           f"{f(r['samples']['tokens_per_s'])}"),
             row("server RSS MiB start / end",
                 lambda r: f"{r['server_process']['start']['rss_kib'] / 1024:.0f} / "
                           f"{r['server_process']['end']['rss_kib'] / 1024:.0f}"),
             row("server open fds start / end",
                 lambda r: f"{r['server_process']['start']['open_fds']} / "
                           f"{r['server_process']['end']['open_fds']}"),
             row("best-of-16: server / library (s)",
                 lambda r: "-" if r["best_of_16"] is None else
                 f"{r['best_of_16']['server_s']:.2f} / {r['best_of_16']['library_s']:.2f} "
                 f"(**{r['best_of_16']['server_over_library']:.2f}x**), same choice: "
                 f"{r['best_of_16']['same_choice']}")]
    for other, ratio in result["ratios"].items():
        lines.append(f"\nmetagen / {other}, tokens/s: one stream **{ratio['one_stream']:.2f}x**, "
                     f"load **{ratio['load']:.2f}x**, samples **{ratio['samples']:.2f}x**")
    for name, why in result["skipped"].items():
        lines.append(f"\n{name}: skipped, its environment is missing ({why})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--targets", default="metagen",
                    help="comma-separated, of: " + ", ".join(TARGETS))
    ap.add_argument("--logs", type=Path,
                    help="folder for the vLLM server's log (default: a new temporary folder)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so run()'s finally stops the server it started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    result = run(args.quick, args.clients, args.duration, targets, args.logs)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
