"""The demo end to end on the testbed's trained models (skipped until they exist)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def testbed():
    tb = pytest.importorskip("metagen.testbed")
    if not all(hasattr(tb, f) for f in ("model_path", "make_problems", "format_prompt", "grade")):
        pytest.skip("metagen.testbed does not export its API yet")
    for name in ("policy", "orm"):
        if not (tb.model_path(name) / "config.json").exists():
            pytest.skip(f"testbed model {name} not trained yet")
    return tb


def test_demo_on_testbed_models_small(testbed):
    from metagen.demo import DemoConfig, run_demo
    report = run_demo(DemoConfig(problems=4, ns=(1, 2, 4), max_tokens=120))
    rows = {(r["strategy"], r["n"]): r for r in report["results"]}
    assert report["problems"] == 4 and len(rows) == 1 + 4 * 3
    for n in (1, 2, 4):
        # MBR with the answer-match utility is majority voting with the same tie-breaking
        assert rows[("mbr", n)]["accuracy"] == rows[("self_consistency", n)]["accuracy"]
        assert rows[("best_of_n", n)]["flops"] > rows[("self_consistency", n)]["flops"]
    assert rows[("self_consistency", 4)]["generated_tokens"] > \
        rows[("self_consistency", 1)]["generated_tokens"]
    assert report["info"]["sampling_usage"]["calls"] == 1
