"""End to end on loopback: ``metagen serve`` (a real process) serves reward models, and
``metagen eval testbed --strategy best_of_n --reward <remote spec>`` makes the same choices as
``--reward <the local folder>``.

- ``pooling+URL?model=cls&positive_label=1``: a sequence classifier (the testbed ORM's backbone
  under a seeded two-label head) over vLLM's ``/pooling``;
- ``json+URL?model=tb``: the testbed ORM itself, a generative verifier read by its confidence in
  the completion, over ``/score`` (``/pooling`` carries no prompt/completion boundary for it).

The run key holds the local folder (and its fingerprint) for the one, the remote spec string for
the other."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from metagen.cli import main
from metagen.eval.timing import untimed
from metagen.testbed import model_path
from tests.server.conftest import spawned_server
from tests.tolerances import SCORE_TOL



@pytest.fixture(scope="module")
def testbed():
    for name in ("policy", "orm"):
        if not (model_path(name) / "config.json").is_file():
            pytest.skip(f"testbed model {name} not trained yet")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, testbed) -> Path:
    """The testbed ORM's backbone under a seeded two-label sequence-classification head."""
    import torch
    from transformers import AutoTokenizer, LlamaForSequenceClassification

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("testbed_cls")
    LlamaForSequenceClassification.from_pretrained(model_path("orm"), num_labels=2) \
        .save_pretrained(folder)
    AutoTokenizer.from_pretrained(model_path("orm")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reward_server(classifier):
    """``metagen serve <testbed policy> --orm cls=<classifier> --orm tb=<testbed ORM>`` on a
    free loopback port, killed on teardown."""
    with spawned_server(model_path("policy"), "--orm", f"cls={classifier}",
                        "--orm", f"tb={model_path('orm')}") as (_, url):
        yield url


def _eval(out: Path, reward: str, limit: int) -> None:
    assert main(["eval", "testbed", "--model", str(model_path("policy")), "--strategy",
                 "best_of_n", "--n", "1,4", "--limit", str(limit), "--reward", reward,
                 "--out", str(out), "--concurrency", "4"]) == 0


def _stored(out: Path) -> tuple[list, list, dict]:
    """(best-of-N accuracy rows with their chosen samples, the samples' texts, scores)."""
    db = sqlite3.connect(out / "run.sqlite")
    try:
        chosen = [(*r[:3], untimed(json.loads(r[3]))) for r in db.execute(
            "SELECT item_id, n, value, trace FROM results WHERE strategy = 'best_of_n' AND "
            "metric = 'accuracy' ORDER BY 1, 2")]  # the traces up to their times
        texts = db.execute("SELECT item_id, sample_index, text FROM samples ORDER BY 1, 2"
                           ).fetchall()
        scores = {(i, s): v for i, s, v in db.execute(
            "SELECT item_id, sample_index, value FROM scores WHERE scorer = 'reward'")}
    finally:
        db.close()
    return chosen, texts, scores


@pytest.mark.parametrize(("name", "query", "limit"), [
    ("cls", "pooling+{url}?model=cls&positive_label=1", 3),
    ("tb", "json+{url}?model=tb", 2),
])
def test_remote_reward_makes_the_local_choices(reward_server, classifier, tmp_path, name,
                                               query, limit):
    folder = classifier if name == "cls" else model_path("orm")
    remote = query.format(url=reward_server)
    _eval(tmp_path / "local", str(folder), limit)
    _eval(tmp_path / "remote", remote, limit)
    local_chosen, local_texts, local_scores = _stored(tmp_path / "local")
    remote_chosen, remote_texts, remote_scores = _stored(tmp_path / "remote")
    assert remote_texts == local_texts and len(local_chosen) == 2 * limit
    assert remote_chosen == local_chosen  # the same picks, the same accuracy
    per_item: dict[str, set[float]] = {}
    for (item, _), value in local_scores.items():
        per_item.setdefault(item, set()).add(value)
    assert any(len(values) > 1 for values in per_item.values())  # there was a choice to make
    assert remote_scores.keys() == local_scores.keys()
    for key, value in local_scores.items():
        assert remote_scores[key] == pytest.approx(value, abs=SCORE_TOL)
    local_key = json.loads((tmp_path / "local" / "results.json").read_text())["config"]
    remote_key = json.loads((tmp_path / "remote" / "results.json").read_text())["config"]
    assert local_key["reward"] == str(Path(folder).resolve()) and local_key["reward_files"]
    assert remote_key["reward"] == remote and "reward_files" not in remote_key
