"""Items in threads over one engine (the testbed policy and ORM, no scripting): the stored
samples, scores, results and ``results.json`` (up to times) equal a run that does one item at a
time; only the samples' log-probabilities may differ, by float32 rounding (the engine's
batch-composition guarantee, ``BATCH_RTOL``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from metagen.engine.llm_engine import BATCH_RTOL
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.timing import untimed
from metagen.types import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "metagen" / "testbed" / "models"
TASK = get_task("testbed")
CONFIG = EvalConfig(task="testbed", model={"path": "testbed policy"},
                    strategy="greedy,self_consistency,best_of_n,mbr", ns=(1, 2, 4),
                    sampling=SamplingParams(temperature=0.8, max_tokens=64), seed=7, limit=6,
                    reward="testbed orm")


@pytest.fixture(scope="module")
def backends():
    if not (MODELS / "policy" / "config.json").is_file():
        pytest.skip("the testbed models are not trained here")
    from metagen.scorers.resolve import load_reward_folder as load_reward
    from metagen.generators.local import LocalGenerator
    return LocalGenerator.from_pretrained(MODELS / "policy"), load_reward(MODELS / "orm")


def _run(out: Path, backends, concurrency: int) -> tuple[dict, list]:
    gen, orm = backends
    report, code = run_eval(CONFIG, TASK, out, load_generator=lambda: gen,
                            load_reward=lambda: orm, concurrency=concurrency)
    assert code == 0 and report["accounting"]["done"] == 6
    report.pop("times")
    db = sqlite3.connect(out / STORE_NAME)
    rows = [db.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3").fetchall()
            for t in ("samples", "scores", "results")]
    db.close()
    # each result's wall time and start are times, as results.json's are (not compared)
    rows[2] = [(*r[:5], untimed(json.loads(r[5]))) for r in rows[2]]
    return report, rows


def test_items_in_threads_store_what_one_at_a_time_stores(tmp_path, backends):
    one, one_rows = _run(tmp_path / "one", backends, 1)
    many, many_rows = _run(tmp_path / "many", backends, 8)  # L11: concurrency 1 and 8
    assert many_rows[1:] == one_rows[1:]  # scores and results: exactly
    logprob = 5  # the samples' cumulative_logprob column
    for a, b in zip(many_rows[0], one_rows[0], strict=True):
        assert a[:logprob] + a[logprob + 1:] == b[:logprob] + b[logprob + 1:]
        assert a[logprob] == pytest.approx(b[logprob], rel=BATCH_RTOL)
    assert many == one
    strategies = {r["strategy"] for r in one["results"]}
    assert strategies == {"greedy", "self_consistency", "best_of_n", "mbr", "samples"}
    assert any(r["metric"] == "flops" and r["mean"] > 0 for r in one["results"])
