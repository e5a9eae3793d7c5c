"""Adaptive strategies run directly at each N (scripted generator): the stored results equal the
library's own strategy run with the item's seed, no PRM is needed, and the cost rows are the
run's measured tokens (smaller than N samples' when the vote is decided early)."""

from __future__ import annotations

from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.seeds import direct_seed
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.strategies import adaptive_self_consistency
from metagen.types import SamplingParams

TASK = get_task("testbed")
ITEMS = TASK.items(None, 3)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}
SAMPLING = SamplingParams(temperature=0.8, max_tokens=32)


def answer(prompt: str, j: int) -> str:
    """Item 0 always right (decided early), the others split between two answers."""
    right = ANSWER[prompt]
    if prompt == ITEMS[0].prompt:
        return f"#### {right}"
    return f"#### {right if j % 2 else right + 1}"


def test_adaptive_sc_each_n_is_the_librarys_run_and_needs_no_prm(tmp_path):
    cfg = EvalConfig(task="testbed", model={"path": "scripted"},
                     strategy="adaptive_self_consistency", ns=(4, 8), sampling=SAMPLING, seed=5,
                     limit=3, attempts=1, strategy_args={"batch": 2})
    report, code = run_eval(cfg, TASK, tmp_path, load_generator=lambda: MockGenerator(answer))
    assert code == 0 and report["accounting"]["done"] == 3
    with RunStore(tmp_path / STORE_NAME) as store:
        rows = {(r[0], r[2], r[3]): r[4] for r in store.results()}
    for it in ITEMS:
        for n in (4, 8):
            ref = adaptive_self_consistency(
                MockGenerator(answer), it.prompt, n=n, batch=2,
                params=SAMPLING.with_(n=1, seed=direct_seed(5, it.id, n)),
                answer_key=TASK.answer_key)
            assert rows[(it.id, n, "accuracy")] == float(TASK.grade(ref.text, it.problem))
            assert rows[(it.id, n, "generated_tokens")] == ref.usage.generated_tokens
    # the unanimous item stops after two rounds of 2 (4-0 votes: 31/32 >= 0.95), 2 tokens each;
    # a split one draws all N
    assert rows[(ITEMS[0].id, 8, "generated_tokens")] == 4 * 2
    assert rows[(ITEMS[1].id, 8, "generated_tokens")] == 8 * 2
