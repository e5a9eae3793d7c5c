"""What the difficulty tables read of a store, on a hand-filled store: pass@1 and mean reward
per item from its samples and scores, tokens from a trace's usage or N x the mean sample
tokens, only done items, labels as stored."""

from __future__ import annotations

from metagen.eval.runrows import REWARD, read_run_rows
from metagen.eval.store import ItemResult, RunStore, StoredSample
from metagen.types import Completion


def _sample(j: int, tokens: int, correct: bool) -> StoredSample:
    return StoredSample(j, 7, Completion(f"s{j}", finish_reason="stop",
                                         generated_tokens=tokens), correct)


def test_rows_pass1_scores_and_tokens_of_done_items(tmp_path):
    with RunStore(tmp_path / "run.sqlite") as store:
        store.save_item("a", [_sample(0, 10, True), _sample(1, 30, False)],
                        scores={REWARD: {0: 0.5, 1: 0.25}},
                        results=[ItemResult("best_of_n", 2, "accuracy", 1.0, {})],
                        done=True, difficulty="d2")
        store.save_item("b", (), results=[ItemResult("step_beam_search", 4, "accuracy", 0.0,
                                                     {"usage": {"generated_tokens": 77}})],
                        done=True, difficulty=None)
        store.save_item("undone", [_sample(0, 5, True)],
                        results=[ItemResult("best_of_n", 2, "accuracy", 1.0, {})])
        run = read_run_rows(store)
        assert run.rows == (("a", "best_of_n", 2, "accuracy", 1.0),
                            ("b", "step_beam_search", 4, "accuracy", 0.0))
        assert dict(run.labels) == {"a": "d2", "b": None} and run.items == ["a", "b"]
        assert dict(run.pass1) == {"a": 0.5} and dict(run.mean_score) == {"a": 0.375}
        # best_of_n at N=2 spends 2 x the mean of (10, 30); the search its traced usage
        assert dict(run.tokens) == {("a", "best_of_n", 2): 40.0,
                                    ("b", "step_beam_search", 4): 77.0}
        assert read_run_rows(store, ["b"]).rows == run.rows[1:]
