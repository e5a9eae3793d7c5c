"""Token dropping (attention sinks + recent window, StreamingLLM) on the testbed policy.

    python -m benchmarks.kv_streaming [--rounds 3] [--tokens 1000] [--prompts 8]
                                      [--json PATH]

Three measurements, full KV cache against ``EngineConfig(kv_sink_tokens, kv_window_tokens)``
(block size 16):

- memory: the KV blocks (and bytes) one greedy sequence holds as it grows, read from its block
  table after each step, at a few generated lengths;
- speed: decode tokens/s of ``--tokens`` greedy tokens (EOS ignored) from a 16-token prompt at
  batch 1 and 16, the full and the windowed engine run alternately in each round; reported as
  the per-round ratio window / full and its median (absolute times are for the record only: the
  machine is shared);
- agreement: greedy tokens over 256 generated tokens (EOS ignored: past its answer the policy
  goes on with text of its own) on ``--prompts`` testbed test prompts, for several (sinks,
  window) settings -- windows with and without sinks, and pairs that hold the same number of
  blocks -- the fraction of positions with the full cache's token, and the number of leading
  tokens before the first difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from metagen.engine.kv_cache import bytes_per_block
from metagen.engine.kv_window import sink_blocks
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.native.cpu import cpu_model
from metagen.testbed.modeling import model_path
from metagen.testbed.problems import format_prompt, make_problems
from metagen.types import SamplingParams

BLOCK = 16
SPEED_WINDOW = (16, 128)  # (sinks, window) of the speed and memory rows
# fixed windows with and without sinks, and pairs holding the same blocks (4, 5 and 9)
AGREEMENT_SETTINGS = [(0, 32), (16, 32), (0, 48), (16, 48), (0, 64), (16, 64), (64, 64),
                      (0, 128), (16, 112), (16, 128)]
AGREEMENT_TOKENS = 256
DEFAULT_JSON = Path(__file__).parent / "results" / "kv_streaming_testbed_cpu_2core.json"


def _engine(sinks: int, window: int | None, num_blocks: int) -> LLMEngine:
    return LLMEngine.from_pretrained(model_path("policy"), block_size=BLOCK, num_blocks=num_blocks,
                                     kv_sink_tokens=sinks, kv_window_tokens=window,
                                     prefix_cache=False)


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def memory_rows(tokens: int) -> list[dict[str, Any]]:
    """Blocks held by one greedy sequence at several generated lengths, full vs window."""
    checkpoints = [c for c in (64, 128, 256, 512, 768, tokens - 1) if c < tokens]
    rows = []
    for sinks, window in ((0, None), SPEED_WINDOW):
        engine = _engine(sinks, window, num_blocks=-(-1100 // BLOCK) + 8)
        mc = engine.model.cfg
        per_block = bytes_per_block(mc.num_layers, BLOCK, mc.num_kv_heads, mc.head_dim,
                                    engine.model.dtype)
        rid = engine.add_request(list(range(3, 19)), _greedy(tokens))
        seq = engine.requests[rid].seqs[0]
        held: dict[int, int] = {}
        while engine.has_unfinished():
            engine.step()
            if len(seq.state.output_ids) in checkpoints:  # before the last: finished, freed
                held[len(seq.state.output_ids)] = len(seq.block_table)
        for n, blocks in sorted(held.items()):
            rows.append({"sinks": sinks, "window": window, "generated": n, "blocks": blocks,
                         "kv_bytes": blocks * per_block,
                         "kv_bytes_per_token": blocks * per_block / (16 + n)})
    return rows


def speed_rows(tokens: int, rounds: int) -> list[dict[str, Any]]:
    """Decode tokens/s at batch 1 and 16, full vs window, alternating within each round."""
    out = []
    for batch in (1, 16):
        num_blocks = batch * -(-(16 + tokens) // BLOCK) + 8
        engines = {"full": _engine(0, None, num_blocks), "window": _engine(*SPEED_WINDOW,
                                                                            num_blocks)}
        prompts = [[3 + (i * 7 + j) % 40 for j in range(16)] for i in range(batch)]
        for e in engines.values():
            e.generate(prompts, _greedy(8))  # warm-up: native library, first allocations
        times: dict[str, list[float]] = {k: [] for k in engines}
        for _ in range(rounds):
            for name, e in engines.items():
                t0 = time.perf_counter()
                e.generate(prompts, _greedy(tokens))
                times[name].append(time.perf_counter() - t0)
        ratios = [f / w for f, w in zip(times["full"], times["window"])]
        out.append({"batch": batch, "tokens": tokens, "sinks": SPEED_WINDOW[0],
                    "window": SPEED_WINDOW[1], "times_s": times,
                    "tok_s_median": {k: batch * tokens / statistics.median(v)
                                     for k, v in times.items()},
                    "window_over_full_speed": ratios,
                    "window_over_full_speed_median": statistics.median(ratios)})
    return out


def testbed_prompts(n: int, engine: LLMEngine) -> list[list[int]]:
    """The token ids of the first ``n`` testbed test problems' prompts."""
    return [engine.tokenizer.encode(format_prompt(p)) for p in make_problems("test", n, seed=0)]


def agreement_rows(n_prompts: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Greedy agreement with the full cache over 256 tokens, per (sinks, window) setting."""
    full = _engine(0, None, num_blocks=n_prompts * 64 + 8)
    prompts = testbed_prompts(n_prompts, full)
    ref = [o.outputs[0].token_ids for o in full.generate(prompts, _greedy(AGREEMENT_TOKENS))]
    rows = []
    for sinks, window in AGREEMENT_SETTINGS:
        engine = _engine(sinks, window, num_blocks=n_prompts * 64 + 8)
        got = [o.outputs[0].token_ids
               for o in engine.generate(prompts, _greedy(AGREEMENT_TOKENS))]
        same = [sum(a == b for a, b in zip(r, g)) / AGREEMENT_TOKENS for r, g in zip(ref, got)]
        lead = [next((i for i, (a, b) in enumerate(zip(r, g)) if a != b), AGREEMENT_TOKENS)
                for r, g in zip(ref, got)]
        rows.append({"sinks": sinks, "window": window,
                     "max_blocks": sink_blocks(BLOCK, sinks) + window // BLOCK + 1,
                     "position_agreement": same,
                     "position_agreement_mean": statistics.mean(same),
                     "leading_identical": lead,
                     "leading_identical_mean": statistics.mean(lead),
                     "identical_prompts": sum(x == AGREEMENT_TOKENS for x in lead)})
    return rows, [len(p) for p in prompts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = ap.parse_args(argv)
    cpu = cpu_model()
    result: dict[str, Any] = {"meta": {"cpu": cpu, "block_size": BLOCK, "args": {
        k: v for k, v in vars(args).items() if k != "json"}}}
    result["memory"] = memory_rows(args.tokens)
    for r in result["memory"]:
        print(f"memory  sinks={r['sinks']:>3} window={r['window']!s:>4} "
              f"generated={r['generated']:>5} blocks={r['blocks']:>3} "
              f"KV={r['kv_bytes'] / 1024:.0f} KiB")
    result["agreement"], result["meta"]["prompt_tokens"] = agreement_rows(args.prompts)
    for r in result["agreement"]:
        print(f"agree   sinks={r['sinks']:>3} window={r['window']:>4} "
              f"blocks<={r['max_blocks']:>2} "
              f"positions={r['position_agreement_mean']:.3f} "
              f"leading={r['leading_identical_mean']:.1f} "
              f"identical={r['identical_prompts']}/{args.prompts}")
    result["speed"] = speed_rows(args.tokens, args.rounds)
    for r in result["speed"]:
        print(f"speed   batch={r['batch']:>2} tokens={r['tokens']} "
              f"tok/s full={r['tok_s_median']['full']:.0f} "
              f"window={r['tok_s_median']['window']:.0f} "
              f"window/full={r['window_over_full_speed_median']:.3f} "
              f"(rounds: {', '.join(f'{x:.3f}' for x in r['window_over_full_speed'])})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
