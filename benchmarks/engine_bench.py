"""The engine benchmark: peers side by side on workloads A-E, in one run; JSON + rich table.

    python -m benchmarks.engine_bench [--quick] [--json PATH] [--threads 1,default] [--isa avx2]

(from a source checkout: the harness, its peers and model factory are not part of the installed
package). Every workload runs at one thread and at torch's default count unless ``--threads``
says otherwise; the CPU's vector ISA and model head the table and the JSON (``meta.cpu``).

One run measures this machine's roofline, builds the deterministic models
(:mod:`benchmarks.factory`), runs every available peer on every workload it supports, checks that
all engines produced the same greedy tokens, and prints each ratio with min/median/max over runs.
Timings are reported, never asserted.

``--isa avx2`` runs what an AVX2-only machine runs, on an AVX-512 one: the process restarts with
:data:`AVX2_ENV` set (metagen's kernels built ``-mavx2 -mfma``, OpenVINO's oneDNN and torch's MKL
capped at AVX2). onnxruntime-genai's MLAS and a prebuilt llama.cpp have no such switch and keep
the CPU's widest ISA, which the table's header and ``meta.isa_env`` record; the memory bandwidth
and core count stay this machine's.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import factory, roofline, workloads
from benchmarks.peers import PEERS, MetagenPeer, Peer, RemotePeer, weight_bits
from benchmarks.peers.inprocess import bench_device
from benchmarks.thread_counts import thread_counts


# What ``--isa avx2`` sets before anything loads: metagen's native build, OpenVINO's CPU plugin
# (oneDNN), torch's MKL (metagen's PyTorch paths, the transformers peer).
AVX2_ENV = {"METAGEN_NATIVE_ISA": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def full_precision(outputs: dict[str, Any]) -> list[str]:
    """The keys of ``outputs`` (peer name, or ``peer/...``) whose peer runs float32 weights: a
    quantized peer decodes near, not equal to, the others."""
    quantized = {cls.name for cls in PEERS if cls.quantization is not None}
    return [k for k in outputs if k.split("/")[0] not in quantized]


def _check_same(outputs: dict[str, Any], keys: list[str]) -> bool | None:
    vals = [outputs[k] for k in keys if k in outputs]
    if len(vals) < 2:
        return None
    return all(v == vals[0] for v in vals[1:])


def cpu_info() -> dict[str, Any]:
    """The CPU's vector ISA (``avx512f``, ``avx2`` or ``none``), model name and core count, the
    ISA metagen's native kernels were built for on it (None: not available) and whether their
    int8 x int8 dot is VNNI's."""
    from metagen.engine.native import load_small_matmul
    from metagen.engine.native.cpu import cpu_model, vector_isa
    from metagen.engine.native.int8_matmul import load as load_int8

    kernel, int8 = load_small_matmul(), load_int8()
    return {"isa": vector_isa(), "model": cpu_model(), "cores": os.cpu_count(),
            "kernel_isa": kernel.isa if kernel else None,
            "int8_vnni": int8.vnni if int8 else None,
            "isa_env": {k: os.environ[k] for k in AVX2_ENV if k in os.environ}}


def run(quick: bool = False, cache_dir: str | Path | None = None,
        workload_names: str = "ABCDEM", log=print, repeats: int | None = None,
        warmup: bool | None = None, threads: list[int] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-ready result. ``repeats``/``warmup`` override the
    settings' timed runs per measurement and the untimed first run. Every workload runs at each
    of ``threads`` (default: one thread and torch's default count; every engine gets the same
    count), each count with its own roofline; M (memory) runs once."""
    sizes = factory.QUICK if quick else factory.FULL
    s = workloads.QUICK_SETTINGS if quick else workloads.FULL_SETTINGS
    if repeats is not None or warmup is not None:
        s = dataclasses.replace(s, repeats=repeats or s.repeats,
                                warmup=s.warmup if warmup is None else warmup)
    cache = factory.models_dir(cache_dir)
    counts = list(dict.fromkeys(threads or thread_counts()))
    log("building models ...")
    paths = factory.build_models(cache, sizes, perturb=0.3 if quick else 0.2)
    before = torch.get_num_threads()
    parts = []
    try:
        for i, count in enumerate(counts):
            torch.set_num_threads(count)
            log(f"{count} thread(s):")
            parts.append(_run_at(paths, sizes, s, quick, workload_names if i == 0
                                 else workload_names.replace("M", ""), log))
    finally:
        torch.set_num_threads(before)
    return _merge(parts, counts)


def _merge(parts: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """One result from one per thread count: rows, checks and not-run entries tagged with their
    count, each count's roofline under ``rooflines`` (the first also under ``roofline``)."""
    tag = lambda c: f"{c} thread" + ("s" if c > 1 else "")  # noqa: E731
    out = dict(parts[0])
    out["meta"] = parts[0]["meta"] | {"threads": counts, "cpu": cpu_info()}
    out["rooflines"] = {str(c): p["roofline"] for c, p in zip(counts, parts)}
    out["rows"] = [r | {"threads": c} for c, p in zip(counts, parts) for r in p["rows"]]
    out["checks"] = {f"{k}, {tag(c)}": v for c, p in zip(counts, parts)
                     for k, v in p["checks"].items()}
    out["not_run"] = [r | {"threads": c} for c, p in zip(counts, parts) for r in p["not_run"]]
    out["skipped_peers"] = {k: v for p in parts for k, v in p["skipped_peers"].items()}
    out["peers"] = list(dict.fromkeys(n for p in parts for n in p["peers"]))
    return out


def _run_at(paths: dict[str, Path], sizes: Any, s: Any, quick: bool, workload_names: str,
            log: Callable[[str], None]) -> dict[str, Any]:
    """Every workload on torch's current thread count: roofline, peers loaded, measured."""
    log("measuring roofline ...")
    roof = roofline.measure(mbytes=64 if quick else 512, matmul_n=256 if quick else 1024,
                            repeats=2 if quick else 5)
    weight_bytes = factory.param_count(paths["target"]) * 4
    decode_bytes = factory.decode_read_bytes(paths["target"])
    int8_bytes = factory.quantized_decode_read_bytes(paths["target"], "int8")
    peers: list[Peer] = []
    skipped: dict[str, str] = {}
    peer_bytes: dict[str, int] = {}  # a quantized peer's decode bytes, in its own format
    wanted = os.environ.get("METAGEN_BENCH_PEERS")  # comma-separated names, in-process ones too
    for cls in PEERS:
        peer = cls()
        if wanted is not None and peer.name not in wanted.split(","):
            skipped[peer.name] = "not named in METAGEN_BENCH_PEERS"
        elif quick and isinstance(peer, RemotePeer):
            skipped[peer.name] = "--quick runs the in-process peers only"
        elif not peer.available():
            skipped[peer.name] = ("not installed (bash benchmarks/setup_peers.sh) or not named "
                                  "in METAGEN_BENCH_PEERS")
        else:
            log(f"loading {peer.name} ...")
            try:
                peer.load(paths)
                if (n := peer.decode_read_bytes("target")) is not None:
                    peer_bytes[peer.name] = n
            except Exception as e:  # a broken peer install must not stop the others
                skipped[peer.name] = f"failed to load: {e}"[:300]
                if isinstance(peer, RemotePeer):
                    peer.close()
                continue
            peers.append(peer)
    try:
        return _measure(peers, skipped, paths, sizes, s, roof, weight_bytes, decode_bytes,
                        int8_bytes, peer_bytes, quick, workload_names, log)
    finally:
        for peer in peers:
            if isinstance(peer, RemotePeer):
                peer.close()


def _measure(peers: list[Peer], skipped: dict[str, str], paths: dict[str, Path], sizes: Any,
             s: Any, roof: Any, weight_bytes: int, decode_bytes: int, int8_bytes: int,
             peer_bytes: dict[str, int], quick: bool, workload_names: str,
             log: Callable[[str], None]) -> dict[str, Any]:
    """``peer_bytes``: the decode bytes of each quantized peer's own model, its roofline's."""
    roofs: dict[str | None, float] = {
        None: roof.decode_tokens_per_s(decode_bytes),
        **{name: roof.decode_tokens_per_s(b) for name, b in peer_bytes.items()}}
    rows: list[dict[str, Any]] = []
    not_run: list[dict[str, Any]] = []
    checks: dict[str, bool | float | None] = {}
    v = sizes.vocab
    if "A" in workload_names:
        log("workload A ...")
        r, out = workloads.workload_a(peers, s, v, roofs, not_run)
        rows += r
        checks["A greedy tokens equal across peers"] = _check_same(out, full_precision(out))
        for name in sorted(set(out) - set(full_precision(out))):  # reported, not required
            if "metagen" in out:
                what = "int8" if name == "metagen-int8" else name
                checks[f"A {what} greedy tokens equal metagen float32 (share)"] = sum(
                    x == y for x, y in zip(out["metagen"], out[name])) / max(1, len(out[name]))
    if "B" in workload_names:
        log("workload B ...")
        rows += workloads.workload_b(peers, s, v, not_run)
    if "C" in workload_names:
        log("workload C ...")
        r, out = workloads.workload_c(peers, s, v, not_run)
        rows += r
        checks["C beam tokens equal across peers"] = _check_same(out, full_precision(out))
    if "D" in workload_names:
        log("workload D ...")
        r, out = workloads.workload_d(peers, s, v, not_run)
        rows += r
        for mode in ("draft", "draft-int8", "draft-int8-tree", "ngram"):
            checks[f"D {mode}: speculative == greedy, all peers"] = _check_same(
                out, [k for k in full_precision(out) if f"/{mode}/" in k])
    metagen = next((p for p in peers if isinstance(p, MetagenPeer)), None)
    if "E" in workload_names and metagen is not None:
        log("workload E ...")
        rows += workloads.workload_e(metagen, s, v)
    memory = None
    if "M" in workload_names:
        log("workload M (peak memory, fresh process) ...")
        from benchmarks.memory import run_isolated

        kv_bytes = (256 << 10) if quick else (64 << 20)
        memory = run_isolated(paths["target"], kv_bytes, *((8, 48) if quick else (64, 300)))
        memory["contract"] = "peak RSS = base + weights + KV cache + overhead (small, constant)"
    for row in rows:
        row["time"] = workloads.summary(row["times"])
        row["tokens_per_s"] = row["tokens"] / row["time"]["median"]
    workloads.compare_peers(rows, {p.name: weight_bits(p.quantization) for p in peers})
    return {
        "meta": {"quick": quick, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                 "torch": torch.__version__, "python": platform.python_version(),
                 "machine": platform.machine(), "threads": torch.get_num_threads(),
                 "device": bench_device(),  # of the in-process peers; the roofline is the CPU's
                 "sizes": {k: getattr(sizes, k) for k in sizes.__slots__},
                 "settings": {k: getattr(s, k) for k in s.__slots__},
                 "target_params": weight_bytes // 4, "models": {k: str(p) for k, p in paths.items()}},
        "roofline": roof.to_dict() | {"target_weight_bytes": weight_bytes,
                                      "decode_read_bytes": decode_bytes,
                                      "decode_roofline_tok_s": roofs[None],
                                      "int8_decode_read_bytes": int8_bytes,
                                      "int8_decode_roofline_tok_s":
                                          roof.decode_tokens_per_s(int8_bytes),
                                      "peer_decode_read_bytes": peer_bytes,
                                      "peer_decode_roofline_tok_s":
                                          {k: v for k, v in roofs.items() if k is not None}},
        "peers": [p.name for p in peers], "skipped_peers": skipped, "not_run": not_run,
        "rows": rows, "checks": checks, "memory": memory,
    }


def _fmt_ratio(row: dict[str, Any]) -> str:
    r = row.get("ratio")
    if not r:
        return ""
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}) {row.get('ratio_name', '')}"


def print_table(result: dict[str, Any], console=None) -> None:
    """A rich table of the rows, then the roofline and the checks."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 150))
    cpu = result["meta"].get("cpu")
    if cpu:
        kernels = f"{cpu['kernel_isa']}-bit" if cpu["kernel_isa"] else "unavailable"
        console.print(f"CPU: {cpu['model']}, {cpu['cores']} cores, ISA {cpu['isa']}; metagen's "
                      f"native kernels: {kernels}"
                      + ("; int8 dot: VNNI" if cpu.get("int8_vnni") else "") + "; threads "
                      f"{', '.join(map(str, result['meta']['threads']))}")
        if cpu.get("isa_env"):
            console.print("ISA capped: " + ", ".join(f"{k}={v}" for k, v in cpu["isa_env"].items())
                          + " (onnxruntime-genai and llama.cpp keep the CPU's widest ISA)")
    table = Table(title="metagen engine benchmark" + (" (quick)" if result["meta"]["quick"] else ""))
    for col in ("wl", "thr", "peer", "variant", "time s median (min-max)", "tok/s", "ratio",
                "goal", "extra"):
        table.add_column(col)
    for row in result["rows"]:
        t = row["time"]
        extra = []
        if "decode_tok_s" in row:
            extra.append(f"decode {row['decode_tok_s']['median']:.1f} tok/s")
        if "acceptance_rate" in row:
            extra.append(f"accept {row['acceptance_rate']:.2f}")
        if row.get("acceptance_by_depth"):  # metagen: per draft depth, once reached
            extra.append("by depth " + "/".join(f"{a:.2f}" for a in row["acceptance_by_depth"]))
        if row.get("tokens_per_round"):  # metagen: tokens a row's round emits (trees: more)
            extra.append(f"{row['tokens_per_round']:.2f} tok/round")
        if "vs_best_peer" in row:
            extra.append(f"{row['vs_best_peer']:.2f}x best peer ({row['best_peer']})")
        elif "vs_transformers" in row and row["peer"] != "transformers":
            extra.append(f"{row['vs_transformers']:.2f}x transformers")
        if "prefill_over_unique" in row:
            extra.append(f"prefill/unique {row['prefill_over_unique']:.2f}")
        table.add_row(row["workload"], str(row.get("threads", "")), row["peer"], row["variant"],
                      f"{t['median']:.3f} ({t['min']:.3f}-{t['max']:.3f})",
                      f"{row['tokens_per_s']:.1f}", _fmt_ratio(row), row.get("target") or "",
                      ", ".join(extra))
    console.print(table)
    for roof in result.get("rooflines", {"": result["roofline"]}).values():
        _print_roofline(console, roof)
    for name, ok in result["checks"].items():
        mark = f"{ok:.3f}" if isinstance(ok, float) else {True: "ok", False: "MISMATCH",
                                                            None: "n/a"}[ok]
        console.print(f"check: {name}: {mark}")
    _print_memory(console, result.get("memory"))
    for name, why in result["skipped_peers"].items():
        console.print(f"skipped peer {name}: {why}")
    for r in result.get("not_run", []):
        console.print(f"not run: {r['workload']} on {r['peer']}: {r['why']}")


def _print_roofline(console, roof: dict[str, Any]) -> None:
    console.print(f"roofline: read {roof['read_gb_s']:.1f} GB/s, copy {roof['copy_gb_s']:.1f} GB/s, "
                  f"gemv {roof.get('gemv_gb_s', 0):.1f} GB/s, "
                  f"matmul {roof['matmul_gflop_s']:.1f} GFLOP/s, threads {roof['threads']}; "
                  f"batch-1 decode bound {roof['decode_roofline_tok_s']:.1f} tok/s "
                  f"({roof.get('decode_read_bytes', roof['target_weight_bytes']) / 1e6:.1f} MB "
                  f"of weights read per token)")
    if "int8_decode_roofline_tok_s" in roof:
        console.print(f"int8 weights: batch-1 decode bound {roof['int8_decode_roofline_tok_s']:.1f}"
                      f" tok/s ({roof['int8_decode_read_bytes'] / 1e6:.1f} MB per token)")
    for name, n in roof.get("peer_decode_read_bytes", {}).items():
        console.print(f"{name}: batch-1 decode bound "
                      f"{roof['peer_decode_roofline_tok_s'][name]:.1f} tok/s ({n / 1e6:.1f} MB of "
                      f"its own weights per token)")


def _print_memory(console, mem: dict[str, Any] | None) -> None:
    if mem:
        mib = {k: mem[k] / 2**20 for k in ("weights", "kv_cache", "peak_rss", "base_rss",
                                           "overhead")}
        console.print(f"memory (metagen, fresh process): peak RSS {mib['peak_rss']:.0f} MiB = "
                      f"base {mib['base_rss']:.0f} + weights {mib['weights']:.0f} + KV budget "
                      f"{mib['kv_cache']:.0f} + overhead {mib['overhead']:.0f} MiB "
                      f"({mem['stress_tokens']} tokens of requests through a "
                      f"{mem['kv_budget_tokens']}-token cache)")


def write_json(result: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=float))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--workloads", default="ABCDEM")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--threads", default="1,default",
                    help="thread counts to run every workload at; 'default': torch's count")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="avx2: rerun this process with AVX2_ENV set (what an AVX2 machine runs)")
    args = ap.parse_args(argv)
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        rest = sys.argv[1:] if argv is None else list(argv)
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.engine_bench", *rest],
                  os.environ | AVX2_ENV)
    bad = set(args.workloads.upper()) - set("ABCDEM")
    if bad or not args.workloads:
        ap.error(f"unknown workload(s) {''.join(sorted(bad))!r}; use letters A-E or M")
    try:
        counts = thread_counts(args.threads)
    except ValueError as e:
        ap.error(f"--threads: {e}")
    result = run(quick=args.quick, workload_names=args.workloads.upper(), repeats=args.repeats,
                 warmup=False if args.no_warmup else None, cache_dir=args.cache_dir,
                 log=lambda m: print(m, file=sys.stderr), threads=counts)
    print_table(result)
    if args.json:
        write_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
