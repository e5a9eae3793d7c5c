"""What quantized weights cost in accuracy on the testbed: float32 against int8 and w8a8, paired.

    python -m benchmarks.quantized_accuracy [--problems 500] [--out DIR]
        [--quantizations int8,w8a8,int4] [--max-tokens 160] [--untie] [--json PATH]

Runs ``metagen eval testbed`` on the testbed policy for each weight format (float32, then each
of ``--quantizations``), twice: greedy, and best-of-16 (ORM) with self-consistency over one
seeded sample set. The runs are ordinary resumable run folders under ``--out`` (a killed
benchmark reruns only what is missing). Every weight format sees the same problems and the same
seeds, so the comparison is paired: for each (strategy, N) it reports both accuracies, the
difference with its paired standard error (per-problem differences: shared difficulty cancels),
and, where each problem is right or wrong (not an expectation over subsamples, as at N below
the samples drawn), the discordant problems (right in one format only) and McNemar's exact
two-sided p-value over them; and the share of samples whose text is the same in both formats.
Never asserted in tests.

``--untie``: every format runs on an untied copy of the policy written under ``--out`` (its
LM head a copy of the embedding table, as a separate matrix: in float32 the same function),
so that a scheme that quantizes an untied head (``int4-all``) is measured: the testbed's models
tie their heads, which every scheme keeps as loaded.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from metagen.eval.estimators import mean_stderr
from metagen.eval.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "metagen" / "testbed" / "models"
RUNS = {"greedy": ["--strategy", "greedy", "--n", "1"],
        "bon": ["--strategy", "best_of_n,self_consistency", "--n", "1,16",
                "--reward", str(MODELS / "orm")]}


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """McNemar's exact two-sided p-value for ``only_a`` problems right under A alone and
    ``only_b`` under B alone: twice the binomial(d, 1/2) tail at the smaller count, capped at 1
    (1 when there is no discordant problem)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    d = only_a + only_b
    if d == 0:
        return 1.0
    tail = math.fsum(math.comb(d, j) for j in range(min(only_a, only_b) + 1)) / 2.0 ** d
    return min(1.0, 2.0 * tail)


def _accuracy(store: RunStore) -> dict[tuple[str, int], dict[str, float]]:
    """(strategy, N) -> item -> its accuracy value, over the run's done items."""
    out: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for item, strategy, n, metric, value in store.results():
        if metric == "accuracy":
            out[(strategy, n)][item] = value
    return out


def _texts(store: RunStore) -> dict[tuple[str, Any], str]:
    """Every stored sample's text, by (item, sample index); a run without samples (greedy keeps
    its one completion in its result's trace) by (item, (strategy, N))."""
    texts: dict[tuple[str, Any], str] = {}
    for item in sorted(store.done_items()):
        for index, sample in store.samples(item).items():
            texts[(item, index)] = sample.completion.text
    if not texts:
        rows = store.db.execute("SELECT item_id, strategy, n, json_extract(trace, '$.text') "
                                "FROM results WHERE metric = 'accuracy'")
        texts = {(r[0], (r[1], r[2])): r[3] for r in rows if r[3] is not None}
    return texts


def compare_runs(base: RunStore, other: RunStore) -> dict[str, Any]:
    """The paired comparison of two runs of the same items and seeds (see the module
    docstring): ``rows`` per (strategy, N) over the items both finished, and ``same_text``, the
    share of samples present in both whose text is equal (None when they share none)."""
    acc_a, acc_b = _accuracy(base), _accuracy(other)
    rows = []
    for key in sorted(acc_a.keys() & acc_b.keys()):
        items = sorted(acc_a[key].keys() & acc_b[key].keys())
        a = [acc_a[key][i] for i in items]
        b = [acc_b[key][i] for i in items]
        diff, diff_se = mean_stderr([y - x for x, y in zip(a, b)])
        row = {"strategy": key[0], "n": key[1], "problems": len(items),
               "base": mean_stderr(a)[0], "other": mean_stderr(b)[0],
               "difference": diff, "difference_stderr": diff_se,
               "right_only_in_base": None, "right_only_in_other": None, "mcnemar_p": None}
        if all(v in (0.0, 1.0) for v in a + b):  # right or wrong per problem: McNemar applies
            only_a = sum(x > y for x, y in zip(a, b))
            only_b = sum(y > x for x, y in zip(a, b))
            row |= {"right_only_in_base": only_a, "right_only_in_other": only_b,
                    "mcnemar_p": mcnemar_exact(only_a, only_b)}
        rows.append(row)
    ta, tb = _texts(base), _texts(other)
    shared = ta.keys() & tb.keys()
    same = sum(ta[k] == tb[k] for k in shared) / len(shared) if shared else None
    return {"rows": rows, "same_text": same, "samples_compared": len(shared)}


def untied_copy(src: Path, dst: Path) -> Path:
    """``dst``: the model folder ``src`` (tied LM head) with its head stored apart, as
    ``lm_head.weight``, a copy of the embedding table, and ``tie_word_embeddings`` false; the
    tokenizer files copied. Written once (an existing ``dst`` is taken as is)."""
    import shutil

    from safetensors.torch import load_file, save_file

    if (dst / "model.safetensors").exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    if not cfg.get("tie_word_embeddings", False):
        raise ValueError(f"{src} is already untied")
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors") and f.is_file():
            shutil.copy(f, dst / f.name)
    weights = load_file(str(src / "model.safetensors"))
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
    (dst / "config.json").write_text(json.dumps(cfg | {"tie_word_embeddings": False}, indent=2))
    save_file(weights, str(dst / "model.safetensors.tmp"), metadata={"format": "pt"})
    (dst / "model.safetensors.tmp").rename(dst / "model.safetensors")
    return dst


def run_eval(out: Path, kind: str, quantization: str | None, problems: int,
             max_tokens: int, model: Path = MODELS / "policy") -> Path:
    """One ``metagen eval testbed`` run of ``model`` (resumed if ``out`` holds part of it);
    returns its folder. Raises ``RuntimeError`` with the command's stderr if it fails."""
    folder = out / f"{kind}_{quantization or 'float32'}"
    cmd = [sys.executable, "-m", "metagen", "eval", "testbed", "--model",
           str(model), *RUNS[kind], "--limit", str(problems),
           "--max-tokens", str(max_tokens), "--out", str(folder)]
    if quantization:
        cmd += ["--quantization", quantization]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--quantizations", default="int8,w8a8")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--out", type=Path, default=Path("quantized_accuracy_runs"))
    ap.add_argument("--untie", action="store_true",
                    help="run every format on an untied copy of the policy (see above)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    quants = [q for q in args.quantizations.split(",") if q]
    model = (untied_copy(MODELS / "policy", args.out / "policy-untied") if args.untie
             else MODELS / "policy")
    result: dict[str, Any] = {"problems": args.problems, "max_tokens": args.max_tokens,
                              "untied": args.untie, "comparisons": {}}
    for kind in RUNS:
        base = run_eval(args.out, kind, None, args.problems, args.max_tokens, model)
        for q in quants:
            other = run_eval(args.out, kind, q, args.problems, args.max_tokens, model)
            with RunStore(base / "run.sqlite") as a, RunStore(other / "run.sqlite") as b:
                cmp = compare_runs(a, b)
            result["comparisons"][f"{kind}: float32 vs {q}"] = cmp
            same = "n/a" if cmp["same_text"] is None else f"{cmp['same_text']:.3f}"
            print(f"{kind}, float32 vs {q}: {cmp['samples_compared']} samples, same text {same}")
            for r in cmp["rows"]:
                discordant = "" if r["mcnemar_p"] is None else (
                    f"  right only in float32 {r['right_only_in_base']}, only in {q} "
                    f"{r['right_only_in_other']}, McNemar p {r['mcnemar_p']:.2f}")
                print(f"  {r['strategy']:>17s} N={r['n']:<3d} float32 {r['base']:.3f}  {q} "
                      f"{r['other']:.3f}  diff {100 * r['difference']:+.1f} +- "
                      f"{100 * r['difference_stderr']:.1f} pts ({r['problems']} problems)"
                      f"{discordant}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
