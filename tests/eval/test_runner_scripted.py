"""The runner on a scripted generator (testbed items, no model): derived metrics equal the
library's strategies run on each subset; failed samples are counted by reason, never stored and
retried on resume (L7, L14); nothing is loaded before the folder and run key checks (L5, L9)."""

from __future__ import annotations

import itertools
import json

import pytest

from metagen import self_consistency
from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import RESULTS_NAME, STORE_NAME
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.strategies import best_of_n
from metagen.types import SamplingParams

TASK = get_task("testbed")
ITEMS = TASK.items(None, 6)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}
N_MAX = 5


def text(prompt: str, j: int) -> str:
    """Sample j of a prompt: right for some (prompt, j), a few wrong answers otherwise."""
    answer = ANSWER[prompt]
    h = (sum(map(ord, prompt)) * 31 + j * 7) % 5
    return f"step {j}\n#### {answer if h < 2 else answer + h}"


def reward(prompt: str, completion: str) -> float:
    return (sum(map(ord, completion)) % 97) / 97


def config(**kw) -> EvalConfig:
    base = dict(task="testbed", model={"path": "scripted"}, strategy="self_consistency",
                ns=(1, 2, N_MAX), sampling=SamplingParams(temperature=0.8, max_tokens=32),
                seed=3, limit=6, attempts=1)
    return EvalConfig(**{**base, **kw})


def never() -> MockGenerator:
    raise AssertionError("no model may be loaded here")


def comparable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "times"}


def _values(report: dict, strategy: str, metric: str) -> dict[int, float]:
    return {r["n"]: r["mean"] for r in report["results"]
            if r["strategy"] == strategy and r["metric"] == metric}


def test_majority_at_k_is_the_mean_of_self_consistency_over_every_subset(tmp_path):
    report, code = run_eval(config(), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    assert code == 0 and report["status"] == "complete"
    for k in (1, 2, N_MAX):
        per_item = []
        for it in ITEMS:
            outcomes = []
            for sub in itertools.combinations(range(N_MAX), k):
                gen = MockGenerator(lambda p, j, sub=sub: text(p, sub[j]))
                chosen = self_consistency(gen, it.prompt, n=k, params=SamplingParams(
                    temperature=0.8, max_tokens=32))
                outcomes.append(TASK.grade(chosen.text, it.problem))
            per_item.append(sum(outcomes) / len(outcomes))
        assert _values(report, "self_consistency", "accuracy")[k] == \
            pytest.approx(sum(per_item) / len(per_item))
    # pass@N_MAX: the fraction of items with a correct sample
    solved = [any(TASK.grade(text(it.prompt, j), it.problem) for j in range(N_MAX))
              for it in ITEMS]
    assert _values(report, "samples", "pass@k")[N_MAX] == pytest.approx(sum(solved) / 6)


def test_best_of_k_is_the_mean_of_best_of_n_over_every_subset(tmp_path):
    report, _ = run_eval(config(strategy="best_of_n", reward="scripted"), TASK, tmp_path,
                         load_generator=lambda: MockGenerator(text), load_reward=lambda: reward)
    k = 2
    per_item = []
    for it in ITEMS:
        subs = list(itertools.combinations(range(N_MAX), k))
        hits = [TASK.grade(best_of_n(MockGenerator(lambda p, j, s=s: text(p, s[j])), it.prompt,
                                     n=k, reward=reward).text, it.problem) for s in subs]
        per_item.append(sum(hits) / len(subs))
    assert _values(report, "best_of_n", "accuracy")[k] == pytest.approx(sum(per_item) / 6)
    with RunStore(tmp_path / STORE_NAME) as store:  # every sample scored once, stored
        assert store.scores(ITEMS[0].id, "reward") == {
            j: pytest.approx(reward(ITEMS[0].prompt, text(ITEMS[0].prompt, j)))
            for j in range(N_MAX)}


def test_scripted_failures_are_counted_not_stored_and_retried_on_resume(tmp_path):
    clean, _ = run_eval(config(), TASK, tmp_path / "clean",
                        load_generator=lambda: MockGenerator(text))
    bad = {ITEMS[1].prompt: {0: "timeout", 3: "server_error"}, ITEMS[4].prompt: {2: "timeout"}}

    def fault(prompt: str, j: int, call: int) -> str | None:
        return bad.get(prompt, {}).get(j)

    first, code = run_eval(config(), TASK, tmp_path / "run",
                           load_generator=lambda: MockGenerator(text, fault=fault))
    assert code == 1 and first["status"] == "partial"
    assert first["accounting"] == {"n_items_total": 6, "done": 4, "failed": 2, "skipped": 0}
    assert first["failures_by_reason"] == {"server_error": 1, "timeout": 2}
    assert first["failed_items"] == sorted([ITEMS[1].id, ITEMS[4].id])
    with RunStore(tmp_path / "run" / STORE_NAME) as store:
        assert sorted(store.samples(ITEMS[1].id)) == [1, 2, 4]  # the failures were not stored
    gen = MockGenerator(text)
    second, code = run_eval(config(), TASK, tmp_path / "run", load_generator=lambda: gen)
    assert code == 0 and second["accounting"]["done"] == 6
    assert [c.prompts for c in gen.calls] == [[ITEMS[1].prompt], [ITEMS[4].prompt]]
    assert second["failures_by_reason"] == first["failures_by_reason"]  # history is kept
    assert {**comparable(second), "failures_by_reason": {}} == comparable(clean)
    assert second["times"]["sessions"] == 2 and second["times"]["resumed_items"] == 4
    assert second["provenance"]["backends"] == ["MockGenerator"]
    assert second["provenance"]["versions"]["metagen"] == second["config"]["metagen_version"]


def test_retries_within_a_session_complete_an_item(tmp_path):
    def fault(prompt: str, j: int, call: int) -> str | None:
        return "timeout" if call == 0 and j == 1 else None

    report, code = run_eval(config(attempts=2), TASK, tmp_path,
                            load_generator=lambda: MockGenerator(text, fault=fault))
    assert code == 0 and report["failures_by_reason"] == {"timeout": 1}


def test_a_rerun_of_a_done_run_loads_nothing_and_gives_the_same_results(tmp_path):
    first, _ = run_eval(config(), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    again, code = run_eval(config(), TASK, tmp_path, load_generator=never)
    assert code == 0 and comparable(again) == comparable(first)
    assert json.loads((tmp_path / RESULTS_NAME).read_text())["status"] == "complete"


@pytest.mark.parametrize("change", [
    {"seed": 4}, {"sampling": SamplingParams(temperature=0.7, max_tokens=32)},
    {"sampling": SamplingParams(temperature=0.8, top_p=0.9, max_tokens=32)},
    {"sampling": SamplingParams(temperature=0.8, max_tokens=33)}, {"ns": (1, 2, 6)},
    {"model": {"path": "other"}}, {"strategy_args": {"min_successful": 2}}])
def test_a_changed_setting_is_refused_before_any_load_unless_forced(tmp_path, change):
    run_eval(config(), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    with pytest.raises(InvalidParameterError, match="run_key"):
        run_eval(config(**change), TASK, tmp_path, load_generator=never)
    if "strategy_args" not in change:
        report, code = run_eval(config(**change), TASK, tmp_path, force_resume=True,
                                load_generator=lambda: MockGenerator(text))
        assert code == 0


def test_a_larger_limit_extends_the_run(tmp_path):
    run_eval(config(limit=3), TASK, tmp_path, load_generator=lambda: MockGenerator(text))
    gen = MockGenerator(text)
    report, _ = run_eval(config(), TASK, tmp_path, load_generator=lambda: gen)
    assert gen.num_calls == 3 and report["accounting"]["done"] == 6


@pytest.mark.parametrize("kind", ["under_a_file", "sys"])
def test_an_unusable_output_folder_is_refused_before_any_load(tmp_path, kind):
    if kind == "under_a_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "run"
    else:
        out = "/sys/metagen-eval-test"  # a read-only file system
    with pytest.raises(InvalidParameterError, match="out.*not a writable folder"):
        run_eval(config(), TASK, out, load_generator=never)


def test_too_little_free_space_is_refused(tmp_path, monkeypatch):
    from metagen.eval import preflight
    monkeypatch.setattr(preflight, "MIN_FREE_BYTES", 1 << 62)
    with pytest.raises(InvalidParameterError, match="MiB free"):
        run_eval(config(), TASK, tmp_path, load_generator=never)


def test_item_seeds_depend_on_run_seed_and_item_only(tmp_path):
    gen = MockGenerator(text)
    run_eval(config(), TASK, tmp_path / "a", load_generator=lambda: gen)
    seeds = [c.params.seed for c in gen.calls]
    assert len(set(seeds)) == 6
    gen2 = MockGenerator(text)
    run_eval(config(limit=3), TASK, tmp_path / "b", load_generator=lambda: gen2)
    assert [c.params.seed for c in gen2.calls] == seeds[:3]
    assert all(c.params.n == N_MAX and c.params.temperature == 0.8 for c in gen.calls)
