"""The demo pipeline on a scripted generator and scripted ORM (no models): golden accuracies,
one sampling call, nested prefixes, compute accounting, table/plot/JSON outputs."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from metagen.demo import DemoConfig, run_demo
from metagen.demo.report import results_table, write_json, write_plot
from metagen.errors import InvalidParameterError
from metagen.generators.mock import MockGenerator
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import TableReward


@dataclass
class P:
    question: str
    answer: int


PROBLEMS = [P("q1", 5), P("q2", 7)]


def _script(prompt: str, j: int):
    # greedy (temperature 0, one sample) is wrong on both; samples: q1 votes for 5 from N=4 on,
    # q2's correct answer 7 is a minority that only the ORM finds
    if prompt == "Q: q1":
        return ["#### 4", "#### 5", "#### 6", "#### 5", "#### 5", "#### 3", "#### 5",
                "#### 2"][j]
    return ["#### 8", "#### 8", "#### 7", "#### 8", "#### 1", "#### 8", "#### 7", "#### 8"][j]


def _run(gen):
    orm = TableReward({"#### 7": 0.9, "#### 5": 0.6}, default=0.1)
    return run_demo(DemoConfig(problems=2, ns=(1, 2, 4, 8), max_tokens=4),
                    generator=gen, orm=orm, problems=PROBLEMS,
                    format_prompt=lambda p: f"Q: {p.question}",
                    grade=lambda text, a: same(last_int(text) or "-1", a),
                    extract=last_int, match=same), orm


def test_scripted_demo_golden_accuracies_and_one_sampling_call():
    gen = MockGenerator(_script)
    report, orm = _run(gen)
    acc = {(r["strategy"], r["n"]): r["accuracy"] for r in report["results"]}
    assert acc[("greedy", 1)] == 0.0
    assert [acc[("self_consistency", n)] for n in (1, 2, 4, 8)] == [0.0, 0.0, 0.5, 0.5]
    assert [acc[("best_of_n", n)] for n in (1, 2, 4, 8)] == [0.0, 0.5, 1.0, 1.0]
    assert [acc[("mbr", n)] for n in (1, 2, 4, 8)] == \
        [acc[("self_consistency", n)] for n in (1, 2, 4, 8)]
    # weighted: q2 at N=8: 7 -> 1.8 vs 8 -> 0.5; q1: 5 -> 2.4
    assert acc[("weighted_vote", 8)] == 1.0
    assert gen.num_calls == 2 and [c.params.n for c in gen.calls] == [1, 8]
    assert len(orm.calls) == 1 and len(orm.calls[0][1]) == 16  # every sample scored once


def test_scripted_demo_compute_is_prefix_exact_and_orm_shared():
    report, orm = _run(MockGenerator(_script))
    rows = {(r["strategy"], r["n"]): r for r in report["results"]}
    assert rows[("self_consistency", 8)]["generated_tokens"] == 32  # 2 problems x 8 x 2 words
    assert rows[("self_consistency", 2)]["generated_tokens"] == 8
    sampling = report["info"]["sampling_usage"]
    scoring = report["info"]["scoring_usage"]
    assert rows[("self_consistency", 4)]["flops"] == pytest.approx(
        sampling["generator_flops"] * 16 / 32)
    assert rows[("best_of_n", 4)]["flops"] == pytest.approx(
        sampling["generator_flops"] * 16 / 32 + scoring["scorer_flops"] * 4 / 8)


def test_scripted_demo_failed_samples_are_excluded():
    gen = MockGenerator(_script, fault=lambda p, j, c: "timeout" if c == 1 and j == 2 else None)
    report, _ = _run(gen)
    assert report["info"]["failed_samples"] == 2
    acc = {(r["strategy"], r["n"]): r["accuracy"] for r in report["results"]}
    assert acc[("best_of_n", 4)] == 0.5  # q2's first "#### 7" failed


def test_demo_outputs(tmp_path):
    report, _ = _run(MockGenerator(_script))
    write_json(report, tmp_path / "out.json")
    data = json.loads((tmp_path / "out.json").read_text())
    assert set(data) == {"problems", "results"} and data["problems"] == 2
    assert {r["strategy"] for r in data["results"]} == {
        "greedy", "best_of_n", "self_consistency", "weighted_vote", "mbr"}
    for r in data["results"]:
        assert set(r) == {"strategy", "n", "accuracy", "generated_tokens", "flops", "seconds"}
    png = write_plot(report["results"], tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results_table(report["results"]).row_count == 1 + 4 * 4


def test_demo_config_validation():
    with pytest.raises(InvalidParameterError, match="ns"):
        DemoConfig(ns=(4, 2))
    with pytest.raises(InvalidParameterError, match="problems"):
        DemoConfig(problems=0)
    with pytest.raises(InvalidParameterError, match="temperature"):
        DemoConfig(temperature=0.0)


class ScriptedPRM:
    """Scripted PRM: every step of a solution ending in the right answer scores 0.9."""

    def score_steps(self, prompts, steps):
        return [[0.9 if "#### 5" in s or "#### 7" in s else 0.2 for s in chain]
                for chain in steps]


def test_scripted_demo_with_step_search_rows():
    def script(prompt, j):  # one-step solutions; the right answer at sample index 1
        return ["#### 4", "#### 5" if "q1" in prompt else "#### 7", "#### 9"][j % 3]

    gen = MockGenerator(script)
    report = run_demo(DemoConfig(problems=2, ns=(1, 2), max_tokens=4,
                                 step_search=("step_beam", "dvts"), step_ns=(2, 4)),
                      generator=gen, orm=TableReward({}), prm=ScriptedPRM(),
                      problems=PROBLEMS, format_prompt=lambda p: f"Q: {p.question}",
                      grade=lambda text, a: same(last_int(text) or "-1", a),
                      extract=last_int, match=same)
    rows = {(r["strategy"], r["n"]): r for r in report["results"]}
    for name in ("step_beam", "dvts"):
        for n in (2, 4):
            assert rows[(name, n)]["accuracy"] == 1.0  # the PRM finds the right step
            assert rows[(name, n)]["generated_tokens"] > 0
    with pytest.raises(InvalidParameterError, match="step_search"):
        DemoConfig(step_search=("nope",))


def test_scripted_demo_confidence_rows_use_the_injected_verifier_once():
    """Scripted verifier (a table): confidence rows select by it, scored in one pass."""
    gen = MockGenerator(_script)
    verifier = TableReward({"#### 7": 0.8, "#### 5": 0.7}, default=0.2)
    report = run_demo(DemoConfig(problems=2, ns=(1, 2, 4, 8), max_tokens=4, confidence=True),
                      generator=gen, orm=TableReward({}, default=0.5), verifier=verifier,
                      problems=PROBLEMS, format_prompt=lambda p: f"Q: {p.question}",
                      grade=lambda text, a: same(last_int(text) or "-1", a),
                      extract=last_int, match=same)
    acc = {(r["strategy"], r["n"]): r["accuracy"] for r in report["results"]}
    assert [acc[("best_of_n_confidence", n)] for n in (1, 2, 4, 8)] == [0.0, 0.5, 1.0, 1.0]
    assert acc[("weighted_vote_confidence", 8)] == 1.0  # q2: 7 -> 1.6 vs 8 -> 1.0
    assert len(verifier.calls) == 1 and len(verifier.calls[0][1]) == 16
    assert "confidence_scoring_usage" in report["info"]
