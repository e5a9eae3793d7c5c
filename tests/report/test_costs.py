"""The report's compute per (strategy, N) is the eval's own: on every run stored in docs/runs it
equals the cost rows the runner recorded in ``results.json`` (tokens and FLOPs), and the rules
that pick, per item, where a cost is found are pinned on hand-made rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from metagen.eval.cost import FLOPS, TOKENS, expected_tokens, measured_cost
from metagen.report.costs import item_costs, mean_known, run_costs
from metagen.report.store_reader import read_store
from metagen.types import Usage

RUNS = sorted(p for p in (Path(__file__).resolve().parents[2] / "docs" / "runs").glob("*")
              if (p / "run.sqlite").is_file() and (p / "results.json").is_file())


@pytest.mark.parametrize("folder", RUNS, ids=[p.name for p in RUNS])
def test_costs_derived_from_a_stored_run_equal_the_ones_its_runner_recorded(folder):
    results = json.loads((folder / "results.json").read_text())
    recorded = {(r["strategy"], r["n"], r["metric"]): r["mean"] for r in results["results"]
                if r["metric"] in (TOKENS, FLOPS)}
    assert recorded, "a stored run without cost rows tests nothing"
    stored = read_store(folder / "run.sqlite")
    derived = run_costs(stored.samples, stored.results)
    for (strategy, n, metric), mean in recorded.items():
        got = derived[(strategy, n)]["tokens" if metric == TOKENS else "flops"]
        assert got == pytest.approx(mean, rel=1e-12), (strategy, n, metric)


def test_expected_and_measured_costs_against_hand_values():
    assert expected_tokens([10, 20, 30, 40], 3) == 3 * 25
    assert math.isnan(expected_tokens([], 3))
    usage = Usage(generated_tokens=10, generator_flops=1.0, scorer_flops=2.0)
    assert measured_cost(usage) == measured_cost(usage.to_dict()) == (10.0, 3.0)
    tokens, flops = measured_cost({"generated_tokens": 1, "generator_flops": math.nan,
                                   "scorer_flops": 0.0})
    assert tokens == 1.0 and math.isnan(flops)
    assert all(math.isnan(x) for x in measured_cost({}))


def test_an_item_s_cost_rows_come_first_then_its_usage_then_its_samples():
    usage = {"generated_tokens": 7, "generator_flops": 5.0, "scorer_flops": 1.0}
    rows = [("s", 2, "accuracy", 1.0, {"usage": usage}), ("s", 2, TOKENS, 9.0, {}),
            ("t", 2, "accuracy", 0.0, {"usage": usage}),
            ("samples", 4, "pass@k", 1.0, {}), ("u", 1, "accuracy", 1.0, {}),
            ("u", 1, TOKENS, 3.0, {}), ("u", 1, FLOPS, 8.0, {})]
    got = item_costs(rows, [10, 20])
    assert got[("s", 2)][0] == 9.0 and math.isnan(got[("s", 2)][1])  # no FLOPS row: unknown
    assert got[("t", 2)] == (7.0, 6.0)
    assert got[("samples", 4)][0] == 60.0 and math.isnan(got[("samples", 4)][1])
    assert got[("u", 1)] == (3.0, 8.0)


def test_a_mean_over_items_is_unknown_when_any_item_s_is():
    """The report's rule (the runner's ``results.json`` averages the FLOPs rows it has): a
    point's compute is over the same items as its accuracy, or not given."""
    assert mean_known([1.0, 3.0]) == 2.0
    assert mean_known([1.0, math.nan]) is None and mean_known([]) is None
    samples = {"a": [{"tokens": 10}, {"tokens": 20}], "b": [{"tokens": 5}, {"tokens": 5}]}
    results = {"a": [("x", 2, "accuracy", 1.0, {})], "b": [("x", 2, "accuracy", 0.0, {})]}
    assert run_costs(samples, results) == {("x", 2): {"tokens": 2 * (15 + 5) / 2,
                                                      "flops": None}}
