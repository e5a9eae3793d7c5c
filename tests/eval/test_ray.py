"""``metagen eval --ray`` on a local two-worker Ray cluster over the testbed policy: the seeded
results equal a single-process run (whichever worker drew an item), a worker killed mid-run loses
nothing (its in-flight item is redone, every item stored once), and a run resumed with another
worker count completes to the same results (L6)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="pip install 'metagen[ray]'")

from metagen.eval import EvalConfig, get_task, run_eval  # noqa: E402
from metagen.eval.ray_runner import RayPool, ray_session  # noqa: E402
from metagen.eval.store import RunStore  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "metagen" / "testbed" / "models" / "policy"
CONFIG = EvalConfig(task="testbed", model={"path": str(POLICY), "backend": "local"},
                    strategy="self_consistency", ns=(1, 4), seed=3, limit=8,
                    sampling=SamplingParams(temperature=0.8, max_tokens=96))
TASK = get_task("testbed")


def _loader() -> Any:
    """A worker-index -> generator loader; nested, so Ray pickles it by value."""
    def load(index: int = 0) -> Any:
        from metagen.generators.local import LocalGenerator
        return LocalGenerator.from_pretrained(POLICY)
    return load


def _comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "times"}


def _stored(out: Path) -> dict:
    """Every stored sample (text, seed, grade) and result, keyed by item: the store's content."""
    with RunStore(out / "run.sqlite") as store:
        done = sorted(store.done_items())
        return {"done": done, "results": sorted(store.results()),
                "samples": {i: {j: (s.seed, s.completion.text, s.correct)
                                for j, s in store.samples(i).items()} for i in done}}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[dict, dict]:
    out = tmp_path_factory.mktemp("ray") / "single"
    report, code = run_eval(CONFIG, TASK, out, load_generator=_loader())
    assert code == 0 and report["status"] == "complete" and report["accounting"]["done"] == 8
    return _comparable(report), _stored(out)


@pytest.fixture(scope="module")
def cluster():
    with ray_session(None, 2) as r:
        yield r
    assert not ray.is_initialized()  # the Ray metagen started is shut down


def test_two_workers_equal_the_single_process_run(cluster, baseline, tmp_path):
    pool = RayPool(2, _loader())
    report, code = run_eval(CONFIG, TASK, tmp_path, load_generator=_loader(), pool=pool)
    assert code == 0 and pool.replaced == 0
    assert _comparable(report) == baseline[0]
    assert _stored(tmp_path) == baseline[1]
    json.loads((tmp_path / "results.json").read_text())  # written, strict JSON


def test_a_worker_killed_mid_run_loses_nothing(cluster, baseline, tmp_path):
    """SIGKILL of one worker's process while both hold an item: its item is requeued and redone
    by a replacement worker; the run completes with the single-process results."""
    pool = RayPool(2, _loader())
    killed: list[int] = []

    def kill_once(done: int, total: int) -> None:
        if done == 2 and not killed:
            pid = ray.get(pool.actors[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    report, code = run_eval(CONFIG, TASK, tmp_path, load_generator=_loader(), pool=pool,
                            progress=kill_once)
    assert killed and pool.replaced >= 1
    assert code == 0 and _comparable(report) == baseline[0]
    assert _stored(tmp_path) == baseline[1]


def test_resume_with_another_worker_count_completes_to_the_same_results(cluster, baseline,
                                                                        tmp_path):
    """Half the items single-process, the rest on one Ray worker, then nothing left for two:
    items are keyed by id, never by worker (L6)."""
    first, code = run_eval(EvalConfig(**{**_fields(CONFIG), "limit": 4}), TASK, tmp_path,
                           load_generator=_loader())
    assert code == 0 and first["accounting"]["done"] == 4
    report, code = run_eval(CONFIG, TASK, tmp_path, load_generator=_loader(),
                            pool=RayPool(1, _loader()))
    assert code == 0 and report["times"]["resumed_items"] == 4
    assert _comparable(report) == baseline[0] and _stored(tmp_path) == baseline[1]


def _fields(config: EvalConfig) -> dict:
    return {name: getattr(config, name) for name in config.__slots__}  # type: ignore[attr-defined]


def test_a_server_list_without_ray_is_refused_naming_base_url(tmp_path, capsys):
    from metagen.cli import main

    code = main(["eval", "testbed", "--strategy", "self_consistency", "--base-url",
                 "http://a:1/v1,http://b:1/v1", "--model", "M", "--out", str(tmp_path / "run")])
    assert code == 2 and "base_url" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
