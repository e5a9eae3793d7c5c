"""Tiny run folders written through the runner's own store (:class:`RunStore`) and atomic JSON
writer, with hand-chosen values so the report's numbers can be checked by hand: a
self-consistency run (two items, four samples each, one sample of hostile text), a step-beam
run (one item, a search tree at N=2 and N=4) and a scaling run (N up to 4096, FLOPs over more
than three decades) of any task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metagen.eval.atomic import write_json_atomic
from metagen.eval.cost import cost_results
from metagen.eval.metrics import summarize
from metagen.eval.store import ItemResult, RunStore, StoredSample
from metagen.eval.timing import SECONDS, STARTED
from metagen.types import Completion

# model output that would close the data script, run code or open a comment if pasted as markup
HOSTILE = ('</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">'
           '<!-- <b>bold</b> &amp; \u2028 lone \ud800 end\n#### 7')

# item "a": tokens 10, 20, 30, 40 (mean 25); item "b": 5 x 4 (mean 5) -> per-item mean 15;
# wall time 2 s (a, begun at 100) and 6 s (b, begun at 110) at every N
SC_ITEMS: dict[str, dict[str, Any]] = {
    "a": {"difficulty": "easy",
          "samples": [("1 + 2 = 3\n#### 3", 10, True), ("#### 3", 20, True),
                      ("#### 5", 30, False), (HOSTILE, 40, False)],
          "reward": [0.9, 0.8, 0.1, 0.5],
          # N=1: every singleton (subset j picks j): 2 of 4 right; N=4: one subset, picks 0
          "results": [("self_consistency", 1, 0.5, {"subsets": 4, "chosen": [0, 1, 2, 3],
                                                    SECONDS: 2.0, STARTED: 100.0}),
                      ("self_consistency", 4, 1.0, {"subsets": 1, "chosen": [0],
                                                    SECONDS: 2.0, STARTED: 100.0})]},
    "b": {"difficulty": "hard",
          "samples": [("#### 9", 5, False)] * 4,
          "reward": [0.2, 0.2, 0.2, 0.2],
          "results": [("self_consistency", 1, 0.0, {"subsets": 4, "chosen": [0, 1, 2, 3],
                                                    SECONDS: 6.0, STARTED: 110.0}),
                      ("self_consistency", 4, 0.0, {"subsets": 1, "chosen": [2],
                                                    SECONDS: 6.0, STARTED: 110.0})]},
}


def tree(hostile_step: str = "#### 4") -> dict[str, Any]:
    """root -> (1: "2 + 2 = 4\\n" -> 3: "#### 4" terminal, 4: hostile_step), (2: pruned)."""
    def node(i: int, step: str, score: float | None, children: list, **kw: Any) -> dict:
        return {"id": i, "step": step, "depth": 0, "score": score, "step_scores": None,
                "visits": 0, "value": None, "prior": 1.0, "terminal": False, "pruned": False,
                "tokens": 3, "extra_tokens": 0, "finish_reason": "stop", "group": 0,
                "expanded_at": None, **kw, "children": children}
    return node(0, "", None, [
        node(1, "2 + 2 = 4\n", 0.75, [node(3, "#### 4", 0.9, [], terminal=True),
                                      node(4, hostile_step, 0.25, [], terminal=True)]),
        node(2, "2 + 2 = 5\n", 0.125, [], pruned=True)])


def _usage(tokens: int, flops: float) -> dict[str, Any]:
    return {"prompt_tokens": 10, "cached_prompt_tokens": 0, "generated_tokens": tokens,
            "scorer_tokens": 0, "calls": 1, "scorer_calls": 1, "generator_flops": flops,
            "scorer_flops": 1000.0, "wall_time": 0.5}


def _results_json(strategy: str, ns: list[int], store: RunStore, extra: dict,
                  task: str = "testbed") -> dict:
    return {"status": "complete", "run_key": "f" * 64,
            "config": {"task": task, "strategy": strategy, "ns": ns, "seed": 3,
                       "model": {"path": "/models/policy", "backend": "auto"},
                       "sampling": {"temperature": 0.8, "top_p": 1.0, "max_tokens": 64},
                       "reward": None, "prm": None},
            "provenance": {"versions": {"metagen": "0.1.0"}, "backends": ["LocalGenerator"],
                           "hardware": {"cores": 2}},
            "accounting": {"n_items_total": 3, "done": 2, "failed": 1, "skipped": 0},
            "failures_by_reason": {"empty": 2, "timeout": 1}, "failed_items": ["c"],
            "generated_tokens": store.token_count(),
            "results": summarize(store.results()),
            "times": {"started_at": 0.0, "ended_at": 60.0, "sessions": 2}, **extra}


def make_sc_run(folder: Path, extra: dict | None = None) -> Path:
    """The self-consistency run (results.json summarised from its store, as the runner does)."""
    folder.mkdir(parents=True, exist_ok=True)
    with RunStore(folder / "run.sqlite") as store:
        for item_id, spec in SC_ITEMS.items():
            samples = [StoredSample(j, 7, Completion(t, finish_reason="stop",
                                                     generated_tokens=k), ok)
                       for j, (t, k, ok) in enumerate(spec["samples"])]
            results = [ItemResult(s, n, "accuracy", v, trace)
                       for s, n, v, trace in spec["results"]]
            store.save_item(item_id, samples, [(3, "empty")],
                            {"reward": dict(enumerate(spec["reward"]))}, results, done=True,
                            difficulty=spec["difficulty"])
        store.save_item("c", [], [(0, "timeout")])  # failed item: not done, never shown
        write_json_atomic(folder / "results.json",
                          _results_json("self_consistency", [1, 4], store, extra or {}))
    return folder


def make_tree_run(folder: Path, hostile_step: str = HOSTILE) -> Path:
    """The step-beam run: item "a", N=2 (right, 40 tokens) and N=4 (wrong, 80 tokens)."""
    folder.mkdir(parents=True, exist_ok=True)
    with RunStore(folder / "run.sqlite") as store:
        results = [ItemResult("step_beam_search", 2, "accuracy", 1.0, {
                       "text": "2 + 2 = 4\n#### 4", "usage": _usage(40, 2.0e6), SECONDS: 0.5,
                       STARTED: 200.0,
                       "trace": {"strategy": "step_beam_search", "tree": tree()}}),
                   ItemResult("step_beam_search", 4, "accuracy", 0.0, {
                       "text": hostile_step, "usage": _usage(80, float("nan")),
                       SECONDS: 1.5, STARTED: 201.0,
                       "trace": {"strategy": "step_beam_search", "tree": tree(hostile_step)}})]
        store.save_item("a", [], [], None, results, done=True, difficulty="easy")
        write_json_atomic(folder / "results.json",
                          _results_json("step_beam_search", [2, 4], store, {}))
    return folder


def make_scaling_run(folder: Path, task: str, flops: float = 1.0e6, top: int = 4096) -> Path:
    """Three items of one subsampled strategy at N = 1, 2, 4, ..., ``top`` with cost rows: tokens
    10 N and FLOPs ``flops`` x N per item (up to 4096 the FLOPs axis spans more than three
    decades), accuracy rising with N, wall time 1, 2 and 3 s per item at every N (begun 10 s
    apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    ns = [2 ** k for k in range(top.bit_length())]
    with RunStore(folder / "run.sqlite") as store:
        for i, item_id in enumerate(("x", "y", "z")):
            results = []
            for n in ns:
                right = float(n >= 4 ** (i + 1))
                results += [ItemResult("self_consistency", n, "accuracy", right,
                                       {"subsets": 1, "chosen": [0], SECONDS: float(i + 1),
                                        STARTED: 10.0 * i}),
                            *cost_results("self_consistency", n, 10.0 * n, flops * n)]
            samples = [StoredSample(0, 7, Completion(f"#### {i}", finish_reason="stop",
                                                     generated_tokens=10), True)]
            store.save_item(item_id, samples, [], None, results, done=True, difficulty=None)
        write_json_atomic(folder / "results.json",
                          _results_json("self_consistency", ns, store, {}, task=task))
    return folder


BY_DIFFICULTY = [
    {"strategy": "self_consistency", "n": 4, "metric": "accuracy", "bin": "easy", "mean": 1.0,
     "stderr": 0.0, "items": 1},
    {"strategy": "self_consistency", "n": 1, "metric": "accuracy", "bin": "hard", "mean": 0.0,
     "stderr": 0.0, "items": 1},
    {"strategy": "self_consistency", "n": 1, "metric": "accuracy", "bin": "easy", "mean": 0.5,
     "stderr": 0.0, "items": 1}]
COMPUTE_OPTIMAL = [
    {"bin": "easy", "n": 1, "strategy": "self_consistency", "accuracy": 0.5},
    {"bin": "easy", "n": 4, "strategy": "best_of_n", "accuracy": 1.0},
    {"bin": "hard", "n": 4, "strategy": "self_consistency", "accuracy": 0.0}]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
