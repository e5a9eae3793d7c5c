"""The int8 KV cache against the float32 one, on the testbed policy and on stories260K.

    python -m benchmarks.kv_quant [--rounds N] [--prompts N] [--speed] [--json PATH]

For each model, from engines built in this run:

- ``bytes_per_token``: the allocated K, V (and int8 scales) over the tokens they hold, float32
  and int8, and their ratio; ``max_seqs``: the most sequences of ``SEQ_LEN`` tokens that a
  ``BUDGET``-byte cache holds, each way.
- ``decode``: greedy decoding of ``NEW_TOKENS`` tokens after a 16-token prompt, at batch 1 and
  batch 16, tokens/s of the float32 cache (its default: the native decode step), the float32
  cache with PyTorch products and native attention (``fp32_attn``), the float32 cache with every
  native kernel off (``fp32_pytorch``), the int8 cache (its default: the native decode step,
  quantizing in C) and the int8 cache with the native step off (``int8_attn``: PyTorch products
  and quantized write, native attention; the int8 path before the step ran on it); each round
  runs the five back to back, so the ratios of medians (and of every round) are what a loaded
  machine can still compare.
- ``agreement``: greedy decoding of ``AGREE_TOKENS`` tokens from testbed prompts (the policy's
  format; the same texts for stories260K), int8 against float32: per prompt the tokens before the
  first differing one; reported as their mean and as the fraction of all positions that lie
  before the first divergence. ``--speed`` skips it.

Prints a table and one JSON object (``--json`` also writes it).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metagen.engine.config import KVCacheDType

SEQ_LEN = 512  # tokens per sequence for max_seqs
BUDGET = 16 << 20  # bytes of KV for max_seqs and the engines
NEW_TOKENS = 64
BATCH = 16
AGREE_TOKENS = 256
STORIES = Path(__file__).resolve().parent.parent.parent / "shared" / "models" / "stories260K"


def _engine(model: Any, tokenizer: Any, kv: KVCacheDType, native: bool = True,
            step: bool = True) -> Any:
    """An engine on ``model``; ``native`` False: every native kernel off; ``step`` False: the
    native decode step off (PyTorch products, native attention)."""
    from metagen.engine.config import EngineConfig
    from metagen.engine.build import build_engine

    engine = build_engine(model, tokenizer, EngineConfig(device="cpu", kv_cache_bytes=BUDGET,
                                                      kv_cache_dtype=kv))
    if not native:
        engine.runner.native = None
    elif not step and engine.runner.native is not None:
        engine.runner.native.max_tokens = 0
    return engine


def _memory(fp32: Any, int8: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, e in (("fp32", fp32), ("int8", int8)):
        tokens = e.kv.num_blocks * e.kv.block_size
        out[name] = {"kv_bytes": e.kv.nbytes, "blocks": e.kv.num_blocks, "tokens": tokens,
                     "bytes_per_token": e.kv.nbytes / tokens,
                     "max_seqs": e.kv.num_blocks // -(-SEQ_LEN // e.kv.block_size)}
    out["tokens_ratio"] = out["int8"]["tokens"] / out["fp32"]["tokens"]
    out["bytes_per_token_ratio"] = out["fp32"]["bytes_per_token"] / out["int8"]["bytes_per_token"]
    return out


def _decode(engines: dict[str, Any], vocab: int, rounds: int) -> dict[str, Any]:
    from metagen.types import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    out: dict[str, Any] = {}
    for batch in (1, BATCH):
        prompts = [[1] + [3 + (7 * i + 13 * j) % (vocab - 3) for j in range(15)]
                   for i in range(batch)]
        for e in engines.values():
            e.generate(prompts, params)  # warm-up: native library, first allocations
        times: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(rounds):
            for name, e in engines.items():
                t0 = time.perf_counter()
                e.generate(prompts, params)
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        out[f"batch{batch}"] = {
            "times_s": times, "median_s": med,
            "tok_s": {k: batch * NEW_TOKENS / v for k, v in med.items()},
            "int8_over_fp32_speed": med["fp32"] / med["int8"],
            "int8_over_fp32_attn_speed": med["fp32_attn"] / med["int8"],
            "int8_over_fp32_pytorch_speed": med["fp32_pytorch"] / med["int8"],
            "int8_over_int8_attn_speed": med["int8_attn"] / med["int8"],
            "per_round_int8_over_fp32": [a / b for a, b in zip(times["fp32"], times["int8"])],
            "per_round_int8_over_int8_attn": [a / b for a, b in zip(times["int8_attn"],
                                                                    times["int8"])]}
    return out


def _agreement(fp32: Any, int8: Any, prompts: list[list[int]]) -> dict[str, Any]:
    from metagen.types import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=AGREE_TOKENS, ignore_eos=True)
    ref = [r.outputs[0].token_ids for r in fp32.generate(prompts, params)]
    got = [r.outputs[0].token_ids for r in int8.generate(prompts, params)]
    before = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), AGREE_TOKENS)
              for x, y in zip(ref, got)]
    return {"prompts": len(prompts), "tokens": AGREE_TOKENS, "before_divergence": before,
            "mean_tokens_before_divergence": statistics.mean(before),
            "fraction_before_divergence": sum(before) / (AGREE_TOKENS * len(prompts)),
            "identical_sequences": sum(b == AGREE_TOKENS for b in before)}


def run(rounds: int, n_prompts: int, agreement: bool = True) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    from metagen.engine.models import load_model
    from metagen.testbed import format_prompt, make_problems, model_path

    texts = [format_prompt(p) for p in make_problems("test", n_prompts)]
    result: dict[str, Any] = {"meta": {"cpu": platform.processor() or platform.machine(),
                                       "threads": torch.get_num_threads(), "rounds": rounds,
                                       "budget_bytes": BUDGET, "seq_len": SEQ_LEN,
                                       "new_tokens": NEW_TOKENS, "batch": BATCH}}
    for name, path in (("testbed_policy", model_path("policy")), ("stories260K", STORIES)):
        model = load_model(path)
        tok = AutoTokenizer.from_pretrained(str(path))
        engines = {"fp32": _engine(model, tok, "auto"),
                   "fp32_attn": _engine(model, tok, "auto", step=False),
                   "fp32_pytorch": _engine(model, tok, "auto", native=False),
                   "int8": _engine(model, tok, "int8"),
                   "int8_attn": _engine(model, tok, "int8", step=False)}
        prompts = [tok(t)["input_ids"] for t in texts]
        result[name] = {
            "model": {"layers": model.cfg.num_layers, "kv_heads": model.cfg.num_kv_heads,
                      "head_dim": model.cfg.head_dim},
            "memory": _memory(engines["fp32"], engines["int8"]),
            "decode": _decode(engines, model.cfg.vocab_size, rounds)}
        if agreement:
            result[name]["agreement"] = _agreement(_engine(model, tok, "auto"),
                                                   _engine(model, tok, "int8"), prompts)
    return result


def _table(r: dict[str, Any]) -> str:
    rows = ["| model | KV bytes/token fp32 / int8 (ratio) | seqs of 512 in 16 MiB fp32 / int8 "
            "| tok/s b1 fp32 / fp32-attn / fp32-pt / int8 / int8-attn "
            "| tok/s b16 fp32 / fp32-attn / fp32-pt / int8 / int8-attn "
            "| greedy agreement (mean tokens before divergence, fraction) |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name in ("testbed_policy", "stories260K"):
        m, d, a = r[name]["memory"], r[name]["decode"], r[name].get("agreement")
        tps = [" / ".join(f"{d[b]['tok_s'][k]:.0f}" for k in (
            "fp32", "fp32_attn", "fp32_pytorch", "int8", "int8_attn"))
               for b in ("batch1", f"batch{BATCH}")]
        agree = "-" if a is None else (f"{a['mean_tokens_before_divergence']:.1f} of "
                                       f"{a['tokens']}, {a['fraction_before_divergence']:.3f}")
        rows.append(
            f"| {name} | {m['fp32']['bytes_per_token']:.0f} / {m['int8']['bytes_per_token']:.1f} "
            f"({m['bytes_per_token_ratio']:.3f}x) | {m['fp32']['max_seqs']} / "
            f"{m['int8']['max_seqs']} | {tps[0]} | {tps[1]} | {agree} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--speed", action="store_true", help="skip the agreement part")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.rounds, args.prompts, agreement=not args.speed)
    print(_table(result))
    text = json.dumps(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
