"""Workload D on real models: speculative greedy decoding against the same engine's own greedy.

    python -m benchmarks.spec_real [--problems 16] [--repeats 3] [--k 2] [--k-max 6]
                                   [--draft-quantization int8] [--cases NAMES] [--json PATH]

Cases (batch 1, each prompt decoded to its end token or ``max_tokens``):

- ``testbed draft``: the testbed policy (4 layers, hidden 192) with the testbed draft (2 layers,
  hidden 96) on testbed test problems (``metagen.testbed``), whose solutions copy the question's
  numbers;
- ``testbed lookup``: the same policy and problems with prompt lookup;
- ``stories lookup``: stories260K with prompt lookup on GSM8K test questions (``../shared/data``);
- ``random draft`` / ``random lookup``: the engine benchmark's random-weight pair
  (:mod:`benchmarks.factory`) on workload D's prompts (256 tokens, 128 new, end token ignored).

Every case runs with a fixed ``k`` and with ``k`` chosen adaptively (up to ``--k-max``). The
greedy and speculative runs alternate (greedy, fixed, adaptive, greedy, ...) so that a load that
comes and goes on a shared machine hits them alike; the speed-up of a repeat is its greedy time
over its speculative time, reported as min / median / max. The tokens of every speculative run
are compared with greedy's (reported). Timings are reported, never asserted.
``--draft-quantization int8`` adds to the draft cases a fixed ``k = --int8-k`` row whose draft
holds its weights in int8 (``EngineConfig.speculative_quantization``; the target stays float32),
interleaved with the others.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent.parent
GSM8K = HERE.parent / "shared" / "data" / "gsm8k_test.jsonl"
STORIES = HERE.parent / "shared" / "models" / "stories260K"


@dataclass(slots=True)
class Case:
    """One D case: the target folder, how it speculates, its prompts and decoding length."""

    name: str
    target: Path
    draft: Path | None  # None: prompt lookup
    prompts: list[list[int]]
    max_tokens: int
    ignore_eos: bool = False


def _engine(path: Path, options: dict[str, Any], ignore_eos: bool):
    from metagen.engine.config import EngineConfig
    from metagen.engine.llm_engine import LLMEngine

    eng = LLMEngine.from_pretrained(path, EngineConfig(
        device="cpu", kv_cache_bytes=64 << 20, max_model_len=1024, **options), tokenizer=False)
    if ignore_eos:
        eng.eos_token_ids = ()
    return eng


def _decode(eng, case: Case) -> tuple[float, list[list[int]]]:
    """Seconds to decode every prompt of ``case`` one at a time, and the tokens."""
    from metagen.types import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=case.max_tokens,
                            ignore_eos=case.ignore_eos)
    out = []
    t0 = time.perf_counter()
    for p in case.prompts:
        out.append(list(eng.generate([p], params)[0].outputs[0].token_ids))
    return time.perf_counter() - t0, out


def cases(problems: int) -> list[Case]:
    from transformers import AutoTokenizer

    from benchmarks import factory, workloads
    from metagen.testbed import format_prompt, make_problems, model_path

    policy, draft = model_path("policy"), model_path("draft")
    tok = AutoTokenizer.from_pretrained(policy)
    testbed = [tok(format_prompt(p)).input_ids for p in make_problems("test", problems, seed=0)]
    out = [Case("testbed draft", policy, draft, testbed, 96),
           Case("testbed lookup", policy, None, testbed, 96)]
    if GSM8K.exists() and STORIES.exists():
        stok = AutoTokenizer.from_pretrained(STORIES)
        with GSM8K.open() as f:
            qs = [json.loads(line)["question"] for _, line in zip(range(problems), f)]
        out.append(Case("stories lookup", STORIES, None,
                        [stok(f"Question: {q}\nAnswer:").input_ids for q in qs], 96))
    s = workloads.FULL_SETTINGS
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    vocab = factory.FULL.vocab
    out.append(Case("random draft", paths["good_target"], paths["draft"],
                    [workloads.random_prompt(s.d_prompt, vocab, 4)], s.d_new, ignore_eos=True))
    out.append(Case("random lookup", paths["target"], None,
                    [workloads.repetitive_prompt(s.d_prompt, vocab, 5)], s.d_new,
                    ignore_eos=True))
    return out


def _spec_options(case: Case, k: int, adaptive: bool, draft_quantization: str | None = None
                  ) -> dict[str, Any]:
    opts: dict[str, Any] = {"num_speculative_tokens": k, "adaptive_speculation": adaptive}
    if case.draft is not None:
        opts["speculative_model"] = str(case.draft)
        opts["speculative_quantization"] = draft_quantization
    else:
        opts["prompt_lookup"] = 3
    return opts


def run_case(case: Case, k: int, k_max: int, repeats: int, log: Callable[[str], Any],
             draft_quantization: str | None = None, quantized_k: int = 4) -> dict[str, Any]:
    """Greedy, fixed ``k`` and adaptive ``k <= k_max`` on ``case`` (and, for a draft case with
    ``draft_quantization``, fixed ``quantized_k`` with the draft so quantized), interleaved
    ``repeats`` times after an untimed warm-up."""
    engines = {"greedy": _engine(case.target, {}, case.ignore_eos),
               f"k={k}": _engine(case.target, _spec_options(case, k, False), case.ignore_eos),
               f"adaptive k<={k_max}": _engine(case.target, _spec_options(case, k_max, True),
                                                case.ignore_eos)}
    if case.draft is not None and draft_quantization is not None:
        engines[f"k={quantized_k} {draft_quantization} draft"] = _engine(
            case.target, _spec_options(case, quantized_k, False, draft_quantization),
            case.ignore_eos)
    times: dict[str, list[float]] = {name: [] for name in engines}
    tokens = {name: _decode(eng, case)[1] for name, eng in engines.items()}  # warm-up
    for eng in engines.values():
        if eng.speculator is not None:
            eng.speculator.stats.__init__()  # count the timed runs only
    for r in range(repeats):
        for name, eng in engines.items():
            times[name].append(_decode(eng, case)[0])
        log(f"  {case.name} repeat {r}: " + ", ".join(f"{n} {t[-1]:.2f} s"
                                                     for n, t in times.items()))
    n_tokens = sum(len(t) for t in tokens["greedy"])
    rows = {}
    for name, eng in engines.items():
        speed = [g / t for g, t in zip(times["greedy"], times[name])]
        row: dict[str, Any] = {
            "seconds": times[name], "tok_s_median": n_tokens / statistics.median(times[name]),
            "x_own_greedy": {"min": min(speed), "median": statistics.median(speed),
                             "max": max(speed)},
            "same_tokens_as_greedy": tokens[name] == tokens["greedy"]}
        st = eng.speculator.stats if eng.speculator is not None else None
        if st is not None:
            row.update(acceptance_rate=st.acceptance_rate, rounds=st.rounds,
                       drafts_per_round=st.proposed / max(st.rounds, 1),
                       tokens_per_round=st.emitted / max(st.rounds, 1))
        rows[name] = row
    return {"case": case.name, "target": case.target.name,
            "draft": None if case.draft is None else case.draft.name,
            "prompts": len(case.prompts), "generated_tokens": n_tokens, "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--k-max", type=int, default=6)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--draft-quantization", choices=["int8"], default=None,
                    help="add a row whose draft model's weights are so quantized (draft cases)")
    ap.add_argument("--int8-k", type=int, default=4, help="k of that row")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    result: dict[str, Any] = {
        "meta": {"threads": torch.get_num_threads(), "machine": platform.machine(),
                 "k": a.k, "k_max": a.k_max, "repeats": a.repeats, "problems": a.problems,
                 "draft_quantization": a.draft_quantization, "int8_k": a.int8_k},
        "cases": []}
    for case in cases(a.problems):
        if a.cases and case.name not in a.cases.split(","):
            continue
        res = run_case(case, a.k, a.k_max, a.repeats, print, a.draft_quantization, a.int8_k)
        result["cases"].append(res)
        for name, row in res["rows"].items():
            x = row["x_own_greedy"]
            print(f"{case.name:15s} {name:16s} {row['tok_s_median']:7.1f} tok/s  "
                  f"{x['median']:.2f}x own greedy ({x['min']:.2f}-{x['max']:.2f})  "
                  f"accept {row.get('acceptance_rate', float('nan')):.2f}  "
                  f"drafts/round {row.get('drafts_per_round', float('nan')):.2f}  "
                  f"tokens/round {row.get('tokens_per_round', float('nan')):.2f}  "
                  f"same tokens {row['same_tokens_as_greedy']}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
