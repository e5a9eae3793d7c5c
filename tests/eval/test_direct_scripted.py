"""Step searches run directly at each N (scripted generator and PRM): the stored results equal
the library's own search run with the same seed; a search that lost samples is not a result and
is retried on resume (L7)."""

from __future__ import annotations

import json

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.seeds import direct_seed
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.strategies.step_scaling import run_step_search
from metagen.types import SamplingParams

TASK = get_task("testbed")
ITEMS = TASK.items(None, 4)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}
SAMPLING = SamplingParams(temperature=0.8, max_tokens=32)


def step(prompt: str, j: int) -> str:
    """One reasoning step then the answer, right or wrong by (prompt, j)."""
    base = prompt.split("Answer:\n")[0] + "Answer:\n"
    answer = ANSWER[base]
    wrong = (sum(map(ord, prompt)) + j) % 3 == 0
    return f"#### {answer + 1 if wrong else answer}"


def prm(prompt: str, steps: list[str]) -> list[float]:
    return [(len(s) % 7) / 7 for s in steps]


def config(**kw) -> EvalConfig:
    base = dict(task="testbed", model={"path": "scripted"}, strategy="step_beam_search",
                ns=(1, 4), sampling=SAMPLING, seed=5, limit=4, attempts=1, prm="scripted")
    return EvalConfig(**{**base, **kw})


@pytest.mark.parametrize("strategy,internal", [("step_beam_search", "step_beam_search"),
                                               ("best_first", "best_first")])
def test_each_n_is_the_librarys_search_with_the_items_seed(tmp_path, strategy, internal):
    report, code = run_eval(config(strategy=strategy), TASK, tmp_path,
                            load_generator=lambda: MockGenerator(step), load_prm=lambda: prm)
    assert code == 0 and report["accounting"]["done"] == 4
    with RunStore(tmp_path / STORE_NAME) as store:
        stored = {(r[0], r[2]): r[4] for r in store.results() if r[3] == "accuracy"}
        traces = dict(store.db.execute("SELECT item_id || ':' || n, trace FROM results "
                                       "WHERE metric = 'accuracy'"))
    tokens = 0
    for it in ITEMS:
        for n in (1, 4):
            ref = run_step_search(internal, MockGenerator(step), [it.prompt], prm, n,
                                  params=SAMPLING.with_(seed=direct_seed(5, it.id, n)))[0]
            assert stored[(it.id, n)] == float(TASK.grade(ref.text, it.problem))
            assert json.loads(traces[f"{it.id}:{n}"])["text"] == ref.text
            tokens += ref.usage.generated_tokens
    # the run's total counts every search's own tokens (a search stores no sample set)
    assert tokens > 0 and report["generated_tokens"] == tokens
    rows = {r["n"]: r for r in report["results"]}
    assert set(rows) == {1, 4} and all(r["strategy"] == strategy for r in rows.values())


def test_the_search_gets_each_ns_own_seed(tmp_path):
    gen = MockGenerator(step)
    run_eval(config(limit=1), TASK, tmp_path, load_generator=lambda: gen, load_prm=lambda: prm)
    assert {c.params.seed for c in gen.calls} >= {direct_seed(5, ITEMS[0].id, 1),
                                                  direct_seed(5, ITEMS[0].id, 4)}


def test_a_search_that_lost_samples_is_retried_on_resume(tmp_path):
    clean, _ = run_eval(config(), TASK, tmp_path / "clean",
                        load_generator=lambda: MockGenerator(step), load_prm=lambda: prm)

    def fault(prompt: str, j: int, call: int) -> str | None:
        return "timeout" if prompt.startswith(ITEMS[2].prompt) and j == 0 else None

    first, code = run_eval(config(), TASK, tmp_path / "run", load_prm=lambda: prm,
                           load_generator=lambda: MockGenerator(step, fault=fault))
    assert code == 1 and first["failed_items"] == [ITEMS[2].id]
    assert first["failures_by_reason"] == {"generation_error": 1}  # the search's own label
    assert first["accounting"] == {"n_items_total": 4, "done": 3, "failed": 1, "skipped": 0}
    second, code = run_eval(config(), TASK, tmp_path / "run", load_prm=lambda: prm,
                            load_generator=lambda: MockGenerator(step))
    assert code == 0 and second["results"] == clean["results"]


def test_a_step_search_needs_a_prm():
    with pytest.raises(InvalidParameterError, match="prm"):
        run_eval(config(), TASK, "/nonexistent", load_generator=MockGenerator)
