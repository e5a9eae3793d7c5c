"""best_of_n_prm: best-of-N ranked by a process reward, each sample's step scores aggregated
(min over steps by default), in the library and in ``metagen eval`` (scripted policy and PRM)."""

from __future__ import annotations

import pytest

import metagen
from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import PRM, STORE_NAME
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.scorers.prm_outcome import PRMOutcome
from metagen.strategies.best_of_n import BestOfN
from metagen.types import SamplingParams

# sample j: its steps and answer; the PRM scores a step by its first word
SAMPLES = ["good\nbad\n#### 1", "fine\nfine\n#### 2", "good\ngood\n#### 3", "bad\n#### 4"]
VALUE = {"good": 0.9, "fine": 0.6, "bad": 0.2, "####": 0.8}


def prm(prompt, steps):
    return [VALUE[s.split()[0]] for s in steps]


def script(prompt: str, j: int) -> str:
    return SAMPLES[j % len(SAMPLES)]


def test_the_highest_min_over_steps_wins_and_other_aggregations_are_asked_for():
    res = metagen.best_of_n_prm(MockGenerator(script), "Q", n=4, prm=prm)
    assert res.text == SAMPLES[2]  # min 0.8; "fine, fine" has 0.6, the others 0.2
    assert res.scores == pytest.approx([0.2, 0.6, 0.8, 0.2])
    last = metagen.best_of_n_prm(MockGenerator(script), "Q", n=4, prm=prm, aggregation="last")
    assert last.scores == pytest.approx([0.8, 0.8, 0.8, 0.8]) and last.text == SAMPLES[0]
    with pytest.raises(InvalidParameterError, match="aggregation"):
        metagen.best_of_n_prm(MockGenerator(script), "Q", n=4, prm=prm,
                              aggregation="max")  # type: ignore[arg-type]


def test_registry_runs_it_with_the_prm_of_the_scorers():
    from metagen.strategies.registry import get
    from metagen.strategies.spec import Scorers

    spec = get("best_of_n_prm")
    assert spec.family == "subsampled" and spec.needs == {"prm"}
    res = spec.run(MockGenerator(script), "Q", n=4, scorers=Scorers(prm=prm))
    assert res.text == SAMPLES[2]


def test_eval_stores_each_samples_min_over_steps_and_selects_by_it(tmp_path):
    task = get_task("testbed")
    items = task.items(None, 3)
    answer = {it.prompt: it.problem.answer for it in items}

    def right_when_prm_prefers(prompt: str, j: int) -> str:
        # the PRM's choice (min over steps) is right; the last step's favourite is wrong
        text = SAMPLES[j % len(SAMPLES)]
        return text.replace(f"#### {j % len(SAMPLES) + 1}",
                            f"#### {answer[prompt] + (j % len(SAMPLES) != 2)}")

    config = EvalConfig(task="testbed", model={"path": "scripted"}, strategy="best_of_n_prm",
                        ns=(1, 4), sampling=SamplingParams(temperature=0.8, max_tokens=32),
                        seed=3, limit=3, attempts=1, prm="scripted")
    report, code = run_eval(config, task, tmp_path, load_prm=lambda: prm,
                            load_generator=lambda: MockGenerator(right_when_prm_prefers))
    assert code == 0 and report["accounting"]["done"] == 3
    with RunStore(tmp_path / STORE_NAME) as store:
        for item in items:
            stored = store.scores(item.id, PRM)
            texts = [s.completion.text for _, s in sorted(store.samples(item.id).items())]
            assert [stored[j] for j in range(4)] == PRMOutcome(prm).score(["p"] * 4, texts)
    accuracy = {r["n"]: r["mean"] for r in report["results"]
                if r["strategy"] == "best_of_n_prm" and r["metric"] == "accuracy"}
    assert accuracy == {1: 0.25, 4: 1.0}  # N = 1: each sample alone, one in four is right
