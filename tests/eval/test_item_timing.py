"""The runner stores each item's wall time at each (strategy, N) in the result's trace: what the
seconds cover, and when that work began, is pinned with a clock that advances one second per
reading (the subsampled
strategies' shared batch, plus the scoring of the scorer a strategy reads; a strategy run at
each N, its own run), and a resumed run keeps its earlier items' times."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from metagen.eval import run_eval
from metagen.eval import timing
from metagen.eval.runner import STORE_NAME
from metagen.eval.timing import SECONDS, STARTED, Stopwatch, with_seconds
from metagen.eval.store import ItemResult
from metagen.generators.mock import MockGenerator
from tests.eval.test_runner_scripted import TASK, config, reward, text


class TickingClock:
    """``perf_counter`` advancing one second per call; ``time`` (the wall clock) its reading
    plus 1000, without advancing it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now

    def time(self) -> float:
        return 1000.0 + self.now


def _traces(folder: Path) -> dict[tuple[str, str, int, str], dict]:
    db = sqlite3.connect(folder / STORE_NAME)
    try:
        rows = db.execute("SELECT item_id, strategy, n, metric, trace FROM results").fetchall()
    finally:
        db.close()
    return {(i, s, n, m): json.loads(t) for i, s, n, m, t in rows}


def _seconds(folder: Path) -> dict[tuple[str, str, int, str], float | None]:
    return {k: t.get(SECONDS) for k, t in _traces(folder).items()}


def test_a_stopwatch_sums_its_blocks_and_with_seconds_adds_the_trace_key(monkeypatch):
    monkeypatch.setattr(timing, "time", TickingClock())
    watch = Stopwatch()
    for _ in range(3):
        with watch:
            pass
    assert watch.elapsed == 3.0
    rows = [ItemResult("a", 1, "accuracy", 1.0, {"x": 1}), ItemResult("b", 1, "accuracy", 0, {})]
    assert watch.started == 1000.0  # the wall clock as the first block began
    out = with_seconds(rows, lambda r: 2.5 if r.strategy == "a" else None, started=7.0)
    assert out[0].trace == {"x": 1, SECONDS: 2.5, STARTED: 7.0} and out[1] is rows[1]
    assert rows[0].trace == {"x": 1}  # the input is not changed


def test_subsampled_strategies_are_charged_the_batch_plus_their_scorer(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "time", TickingClock())
    run_eval(config(strategy="self_consistency,best_of_n", reward="scripted"), TASK, tmp_path,
             load_generator=lambda: MockGenerator(text), load_reward=lambda: reward)
    got = _seconds(tmp_path)
    timed = {k: v for k, v in got.items() if k[3] in ("accuracy", "pass@k")}
    assert len(timed) == 6 * 3 * 3  # 6 items x N in (1, 2, 5) x (pass@k, sc, best_of_n)
    for (_, strategy, _, _), seconds in timed.items():
        # one sampling call (1 s on this clock); best_of_n adds the one reward pass (1 s)
        assert seconds == (2.0 if strategy == "best_of_n" else 1.0)
    assert all(v is None for k, v in got.items() if k not in timed)  # cost rows carry none
    traces = _traces(tmp_path)
    for item in {k[0] for k in timed}:  # one start per item: its batch's first draw
        assert len({traces[k][STARTED] for k in timed if k[0] == item}) == 1


def test_greedy_is_charged_its_own_call(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "time", TickingClock())
    run_eval(config(strategy="greedy", ns=(1,)), TASK, tmp_path,
             load_generator=lambda: MockGenerator(text))
    got = {k: v for k, v in _traces(tmp_path).items() if k[3] == "accuracy"}
    assert len(got) == 6 and {t[SECONDS] for t in got.values()} == {1.0}
    assert len({t[STARTED] for t in got.values()}) == 6  # each began at its own time


def test_a_resumed_run_keeps_its_earlier_items_times(tmp_path):
    run_eval(config(limit=3), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    first = _seconds(tmp_path)
    run_eval(config(), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    second = _seconds(tmp_path)
    assert {k: second[k] for k in first} == first
    timed = [v for k, v in second.items() if k[3] in ("accuracy", "pass@k")]
    assert len(timed) == 6 * 3 * 2 and all(v is not None and v >= 0 for v in timed)


@pytest.mark.parametrize("strategy", ["step_beam_search"])
def test_a_strategy_run_at_each_n_is_charged_each_run(tmp_path, monkeypatch, strategy):
    from metagen.eval.direct import runs_at_each_n
    from metagen.types import Completion, Result, SamplingParams

    monkeypatch.setattr(timing, "time", TickingClock())
    item = TASK.items(None, 1)[0]

    def run(n: int, params: SamplingParams) -> Result:
        for _ in range(n):  # n readings of the clock inside the run: n - 1 extra seconds
            timing.time.perf_counter()
        return Result(best=Completion(f"#### {item.problem.answer}"))

    results, failures = runs_at_each_n(strategy, TASK, item, SamplingParams(), (1, 3), 0, run)
    assert failures == []
    assert {r.n: r.trace[SECONDS] for r in results if r.metric == "accuracy"} == {1: 2.0, 3: 4.0}
    assert {r.n: r.trace[STARTED] for r in results if r.metric == "accuracy"} == \
        {1: 1000.0, 3: 1003.0}  # the wall clock as each run began
