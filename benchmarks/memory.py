"""Peak memory of the engine against its contract: weights + KV budget + a small constant.

Run in a fresh process, so that no other peer's allocations count:
``python -m benchmarks.memory MODEL KV_BYTES [REQUESTS MAX_LEN CHUNK]`` (the benchmark's
workload M does this for you). The process measures its resident set after importing torch and
metagen (``base``), loads the model (``weights``: bytes of its parameters), builds an engine with
a KV budget of ``KV_BYTES`` (the cache is allocated once), and runs two workloads that push the
scheduler: best-of-16 on a 512-token prompt, then REQUESTS requests of random lengths (prompt
and output each up to MAX_LEN tokens) that together need far more KV than the budget, so it
preempts and recomputes. The peak resident set (``VmHWM``) minus ``base``, weights and the
KV cache is the ``overhead``: activations, logits, allocator slack — the "small constant",
bounded by the prefill chunk (``CHUNK`` = ``max_num_batched_tokens`` tokens per forward step),
not by the requests. Prints one JSON line.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_bytes() -> int:
    """This process's high-water resident set (``VmHWM``). Not ``ru_maxrss``: Linux carries that
    across ``execve`` from the forking parent, so a child of a big process would report the
    parent's size (measured: 2.2 GiB instead of 0.7 GiB under the benchmark)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(model_path: str | Path, kv_bytes: int, requests: int = 64, max_len: int = 300,
            max_batched_tokens: int = 2048, seed: int = 0) -> dict[str, Any]:
    import torch

    from metagen.engine.config import EngineConfig
    from metagen.engine.build import build_engine
    from metagen.engine.models.loader import load_model
    from metagen.types import SamplingParams

    base = _rss_bytes()
    model = load_model(model_path)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    engine = build_engine(model, None, EngineConfig(kv_cache_bytes=kv_bytes, device="cpu",
                                                 max_num_batched_tokens=max_batched_tokens))
    kv = engine.kv.nbytes
    after_load = _rss_bytes()
    g = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab_size
    prompt = torch.randint(3, vocab, (min(512, max_len),), generator=g).tolist()
    engine.generate([prompt], SamplingParams(n=16, temperature=1.0, max_tokens=64,
                                             ignore_eos=True, seed=seed))
    lengths = torch.randint(8, max_len, (requests, 2), generator=g).tolist()
    prompts = [torch.randint(3, vocab, (p,), generator=g).tolist() for p, _ in lengths]
    outs = engine.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=n,
                                                    ignore_eos=True, seed=i)
                                     for i, (_, n) in enumerate(lengths)])
    assert all(len(o.outputs[0].token_ids) == n for o, (_, n) in zip(outs, lengths))
    peak = _peak_bytes()
    return {"base_rss": base, "weights": weights, "kv_cache": kv, "after_load_rss": after_load,
            "peak_rss": peak, "overhead": peak - base - weights - kv,
            "stress_tokens": sum(p + n for p, n in lengths),
            "max_num_batched_tokens": max_batched_tokens,
            "kv_budget_tokens": engine.blocks.num_blocks * engine.config.block_size}


def run_isolated(model_path: str | Path, kv_bytes: int, requests: int, max_len: int
                 ) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter (same environment); returns its JSON."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "benchmarks.memory", str(model_path),
                          str(kv_bytes), str(requests), str(max_len)], cwd=root, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], *map(int, sys.argv[2:]))))
