"""The issue-6 scaling demo on scripted generators and scripted scorers (no models): ``--full``
row names, best-of-N with the PRM as outcome scorer (min over steps), ``by_difficulty``, and the
two-panel plot."""

from __future__ import annotations

import json
import struct

import pytest

import metagen.demo
from metagen.cli import main
from metagen.demo import FULL_STEP_SEARCHES, DemoConfig, run_demo
from metagen.demo.difficulty import accuracy_by_difficulty, difficulties_of
from metagen.demo.prm import PRMOutcome
from metagen.demo.report import make_figure, write_plot
from metagen.errors import InvalidParameterError
from metagen.generators.mock import MockGenerator
from tests.demo._scripted import (
    PRM_FLOPS_PER_STEP,
    Prob,
    ScriptedORM,
    ScriptedPRM,
    final_int,
    grade,
    same,
)

QUICK = {"greedy", "best_of_n", "self_consistency", "weighted_vote", "mbr"}
FULL = QUICK | {"best_of_n_prm", "step_beam_search", "dvts", "best_first", "mcts", "rebase"}


def _run(config, script, problems, orm=None, prm=None):
    return run_demo(config, generator=MockGenerator(script), orm=orm or ScriptedORM(),
                    prm=prm, problems=problems, format_prompt=lambda p: f"Q: {p.question}",
                    grade=grade, extract=final_int, match=same)


# -- --full: the row names ------------------------------------------------------------------

def _one_step(prompt, j):  # one-step solutions; the right answer at sample index 1
    if "q1" in prompt:
        return ["#### 4", "#### 5", "#### 9"][j % 3]
    return ["#### 4", "#### 7", "#### 9"][j % 3]


TWO = [Prob("q1", 5, 1), Prob("q2", 7, 2)]
RIGHT_STEPS = {"#### 5": 0.9, "#### 7": 0.9}


def _cli(monkeypatch, tmp_path, *flags):
    real, seen = metagen.demo.run_demo, {}

    def scripted(config, on_stage=None):
        seen["config"], seen["prm"] = config, ScriptedPRM(RIGHT_STEPS)
        return real(config, generator=MockGenerator(_one_step), orm=ScriptedORM(),
                    prm=seen["prm"], problems=TWO, format_prompt=lambda p: f"Q: {p.question}",
                    grade=grade, extract=final_int, match=same, on_stage=on_stage)

    monkeypatch.setattr(metagen.demo, "run_demo", scripted)
    out = tmp_path / "r.json"
    code = main(["demo", "--problems", "2", "--ns", "1,2", "--step-ns", "2", "--max-tokens",
                 "8", "--json", str(out), "--plot", str(tmp_path / "p.png"), *flags])
    assert code == 0
    return json.loads(out.read_text()), seen


def test_scripted_full_flag_adds_every_step_search_under_the_issue_names(monkeypatch, tmp_path):
    data, seen = _cli(monkeypatch, tmp_path, "--full")
    assert seen["config"].step_search == FULL_STEP_SEARCHES
    names = {r["strategy"] for r in data["results"]}
    assert names == FULL  # never "step_beam"
    keys = {(r["strategy"], r["n"]) for r in data["results"]}
    for name in FULL_STEP_SEARCHES:
        assert (name, 2) in keys  # n is the search's scale (--step-ns)
    assert {("best_of_n_prm", 1), ("best_of_n_prm", 2)} <= keys
    rows = {(r["strategy"], r["n"]): r for r in data["results"]}
    assert rows[("step_beam_search", 2)]["accuracy"] == 1.0  # the PRM finds the right step
    assert rows[("best_of_n_prm", 2)]["accuracy"] == 1.0
    for r in data["results"]:  # by_difficulty on every row, search rows included
        assert set(r["by_difficulty"]) == {"1", "2"}


def test_scripted_step_search_subset_and_legacy_name(monkeypatch, tmp_path):
    data, _ = _cli(monkeypatch, tmp_path, "--step-search", "step_beam,dvts")
    assert {r["strategy"] for r in data["results"]} == \
        QUICK | {"best_of_n_prm", "step_beam_search", "dvts"}


def test_scripted_quick_demo_uses_no_prm(monkeypatch, tmp_path):
    data, seen = _cli(monkeypatch, tmp_path)
    assert {r["strategy"] for r in data["results"]} == QUICK
    assert seen["prm"].calls == []


def test_demo_config_step_search_names():
    assert DemoConfig(step_search=FULL_STEP_SEARCHES).step_search == FULL_STEP_SEARCHES
    with pytest.raises(InvalidParameterError, match="step_search"):
        DemoConfig(step_search=("beam",))


# -- best_of_n_prm: best-of-N over the same samples, PRM min over steps -------------------------

SAMPLES = ["a 9\n#### 4", "a 3\n#### 6", "a 5\n#### 5", "a 2\n#### 2"]
# step scores: min / last per sample = 0.1/0.95, 0.5/0.8, 0.6/0.6, 0.2/0.9
STEP_SCORES = {"a 9\n": 0.1, "#### 4": 0.95, "a 3\n": 0.5, "#### 6": 0.8, "a 5\n": 0.6,
               "#### 5": 0.6, "a 2\n": 0.2, "#### 2": 0.9}


def _multi_step(prompt, j):
    return SAMPLES[j % 4] if prompt == "Q: q1" else "#### 5"  # continuations of a search


def test_scripted_best_of_n_prm_picks_the_highest_min_step_score():
    prm = ScriptedPRM(STEP_SCORES)
    report = _run(DemoConfig(problems=1, ns=(1, 2, 4), max_tokens=8,
                             step_search=("step_beam_search",), step_ns=(2,)),
                  _multi_step, [Prob("q1", 5, 1)], prm=prm)
    rows = {(r["strategy"], r["n"]): r for r in report["results"]}
    # N=1: sample 0 (wrong); N=2: sample 1 (min 0.5 > 0.1, wrong); N=4: sample 2 (min 0.6,
    # right) although samples 0 and 3 have higher last-step scores
    assert [rows[("best_of_n_prm", n)]["accuracy"] for n in (1, 2, 4)] == [0.0, 0.0, 1.0]
    # the PRM scored the demo's own 4 samples once, split into lines, before any search
    assert prm.calls[0] == [["a 9\n", "#### 4"], ["a 3\n", "#### 6"], ["a 5\n", "#### 5"],
                            ["a 2\n", "#### 2"]]
    prm_flops = report["info"]["prm_scoring_usage"]["scorer_flops"]
    assert prm_flops == 8 * PRM_FLOPS_PER_STEP
    for n in (1, 2, 4):  # the PRM's scoring share is added like the ORM rows' share
        extra = rows[("best_of_n_prm", n)]["flops"] - rows[("self_consistency", n)]["flops"]
        assert extra == pytest.approx(prm_flops * n / 4)
        assert rows[("best_of_n_prm", n)]["generated_tokens"] == \
            rows[("best_of_n", n)]["generated_tokens"]


def test_prm_outcome_aggregates_min_and_scores_empty_text_as_one_step():
    prm = ScriptedPRM(STEP_SCORES)
    assert PRMOutcome(prm).score(["p"] * 3, SAMPLES[:2] + [""]) == [0.1, 0.5, 0.5]
    assert prm.calls == [[["a 9\n", "#### 4"], ["a 3\n", "#### 6"], [""]]]  # one batched call
    assert PRMOutcome(prm, "last").score(["p"], SAMPLES[:1]) == [0.95]
    with pytest.raises(InvalidParameterError, match="aggregation"):
        PRMOutcome(prm, "max")  # type: ignore[arg-type]


# -- by_difficulty ------------------------------------------------------------------------------

THREE = [Prob("q1", 5, 1), Prob("q2", 7, 1), Prob("q3", 3, 2)]


def _graded(prompt, j):  # sample 0 (also greedy): q1 right, q2 wrong, q3 right
    table = {"Q: q1": ["#### 5", "#### 5"], "Q: q2": ["#### 1", "#### 7"],
             "Q: q3": ["#### 3", "#### 0"]}
    return table[prompt][j]


def test_scripted_by_difficulty_golden():
    orm = ScriptedORM({"#### 7": 0.9, "#### 0": 0.9})
    report = _run(DemoConfig(problems=3, ns=(1, 2), max_tokens=4), _graded, THREE, orm=orm)
    rows = {(r["strategy"], r["n"]): r for r in report["results"]}
    assert rows[("greedy", 1)]["by_difficulty"] == {"1": 0.5, "2": 1.0}
    for name in QUICK - {"greedy"}:
        assert rows[(name, 1)]["by_difficulty"] == {"1": 0.5, "2": 1.0}
    # best-of-2 with the ORM: q1 keeps "#### 5", q2 takes "#### 7" (right), q3 "#### 0" (wrong)
    assert rows[("best_of_n", 2)]["by_difficulty"] == {"1": 1.0, "2": 0.0}
    assert rows[("best_of_n", 2)]["accuracy"] == pytest.approx(2 / 3)


def test_accuracy_by_difficulty_pure():
    got = accuracy_by_difficulty([True, False, True, True], ["10", "2", "2", "1"])
    assert got == {"1": 1.0, "2": 0.5, "10": 1.0} and list(got) == ["1", "2", "10"]
    assert difficulties_of([Prob("a", 1, 3)]) == ["3"]
    assert difficulties_of([object()]) is None
    with pytest.raises(InvalidParameterError, match="difficulties"):
        accuracy_by_difficulty([True], [])


# -- the plot -----------------------------------------------------------------------------------

def _rows():
    out = [{"strategy": "greedy", "n": 1, "accuracy": 0.2, "generated_tokens": 10,
            "flops": 1e3}]
    for name, acc in (("self_consistency", 0.3), ("best_of_n_prm", 0.4),
                      ("step_beam_search", 0.5), ("mcts", 0.45)):
        out += [{"strategy": name, "n": n, "accuracy": acc + 0.01 * n,
                 "generated_tokens": 10 * n, "flops": 1e3 * n} for n in (1, 4)]
    return out


def test_plot_has_tokens_and_flops_panels(tmp_path):
    import matplotlib.pyplot as plt

    fig = make_figure(_rows(), "t")
    try:
        assert len(fig.axes) == 2
        tokens, flops = fig.axes
        assert tokens.get_xscale() == flops.get_xscale() == "log"
        assert "tokens" in tokens.get_xlabel() and "FLOPs" in flops.get_xlabel()
        for ax in fig.axes:  # one line per strategy; greedy a single marker
            assert len(ax.lines) == 5
            greedy = next(ln for ln in ax.lines if ln.get_label() == "greedy")
            assert len(greedy.get_xdata()) == 1 and greedy.get_linestyle() == "None"
        assert list(flops.lines[3].get_xdata()) == [1e3, 4e3]  # step beam, at its FLOPs
    finally:
        plt.close(fig)
    png = write_plot(_rows(), tmp_path / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert width > 2 * height  # two panels side by side
