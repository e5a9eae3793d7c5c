"""The strategies eval takes from the registry beyond its former tables (self_refine,
tree_of_thoughts, rejection_sampling, lookahead_search) run through ``run_eval`` with a scripted
generator and scripted scorers: each N's stored result equals the library's own call with the
same seed and the knobs the spec derives, and its cost rows are the run's measured usage;
``--strategy-arg`` entries reach only the strategies whose config has them and are checked
before anything is loaded; a feedback strategy on a task without feedback is refused up front;
weighted_vote reads the reward only when the run gives one."""

from __future__ import annotations

import json

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.seeds import direct_seed
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.strategies import rejection_sampling, self_refine, step_beam_search, tree_of_thoughts
from metagen.types import Completion, SamplingParams

TASK = get_task("testbed")
ITEMS = TASK.items(None, 3)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}
SAMPLING = SamplingParams(temperature=0.8, max_tokens=32)


def script(prompt: str, j: int) -> str:
    """A critique says NO ISSUES on even samples; any other prompt gets the item's answer, wrong
    by (prompt, j)."""
    base = next(p for p in ANSWER if prompt.startswith(p))
    if prompt.endswith("Review:"):
        return "NO ISSUES" if j % 2 == 0 else "the sum is off"
    wrong = (sum(map(ord, prompt)) + j) % 3 == 0
    return f"#### {ANSWER[base] + 1 if wrong else ANSWER[base]}"


def prm(prompt: str, steps: list[str]) -> list[float]:
    return [(len(s) % 7) / 7 for s in steps]


def reward(prompt: str, completion: str) -> float:
    return (sum(map(ord, completion)) % 10) / 10


def never():
    raise AssertionError("no model may be loaded here")


def config(strategy: str, **kw) -> EvalConfig:
    base = dict(task="testbed", model={"path": "scripted"}, strategy=strategy, ns=(2, 4),
                sampling=SAMPLING, seed=5, limit=3, attempts=1)
    return EvalConfig(**{**base, **kw})


def library(strategy: str, prompt: str, n: int, params: SamplingParams):
    """The library's call for ``strategy`` at scale ``n``, the knobs written out."""
    gen = MockGenerator(script)
    if strategy == "self_refine":
        return self_refine(gen, [prompt], max_attempts=n, params=params)[0]
    if strategy == "rejection_sampling":
        return rejection_sampling(gen, prompt, reward, max_samples=n, batch=min(4, n),
                                  params=params)
    if strategy == "tree_of_thoughts":
        return tree_of_thoughts(gen, [prompt], prm, branching=min(4, n), breadth=max(1, n // 4),
                                max_expansions=n, params=params)[0]
    branching = min(4, n)  # lookahead_search: step beam search with 2 steps of lookahead
    return step_beam_search(gen, [prompt], prm, width=max(1, n // branching),
                            branching=branching, lookahead=2, params=params)[0]


@pytest.mark.parametrize("strategy", ["self_refine", "rejection_sampling", "tree_of_thoughts",
                                      "lookahead_search"])
def test_scripted_each_n_equals_the_library_call_with_the_same_seed(tmp_path, strategy):
    report, code = run_eval(config(strategy), TASK, tmp_path,
                            load_generator=lambda: MockGenerator(script),
                            load_reward=lambda: reward, load_prm=lambda: prm)
    assert code == 0 and report["accounting"]["done"] == 3
    with RunStore(tmp_path / STORE_NAME) as store:
        rows = {(r[0], r[2], r[3]): r[4] for r in store.results()}
        traces = dict(store.db.execute("SELECT item_id || ':' || n, trace FROM results "
                                       "WHERE metric = 'accuracy'"))
    tokens = 0
    for it in ITEMS:
        for n in (2, 4):
            ref = library(strategy, it.prompt, n,
                          SAMPLING.with_(n=1, seed=direct_seed(5, it.id, n)))
            assert rows[(it.id, n, "accuracy")] == float(TASK.grade(ref.text, it.problem))
            assert json.loads(traces[f"{it.id}:{n}"])["text"] == ref.text
            assert rows[(it.id, n, "generated_tokens")] == ref.usage.generated_tokens
            tokens += ref.usage.generated_tokens
    assert tokens > 0 and report["generated_tokens"] == tokens  # measured, its own run


def test_scripted_strategy_args_reach_only_the_strategies_that_take_them(tmp_path):
    cfg = config("self_consistency,tree_of_thoughts",
                 strategy_args={"mode": "dfs", "n_solutions": 2}, prm="scripted")
    assert cfg.options == {"self_consistency": {},
                           "tree_of_thoughts": {"mode": "dfs", "n_solutions": 2}}
    run_eval(cfg, TASK, tmp_path, load_generator=lambda: MockGenerator(script),
             load_prm=lambda: prm)
    it, n = ITEMS[0], 4
    ref = tree_of_thoughts(MockGenerator(script), [it.prompt], prm, mode="dfs", n_solutions=2,
                           branching=4, breadth=1, max_expansions=4,
                           params=SAMPLING.with_(n=1, seed=direct_seed(5, it.id, n)))[0]
    with RunStore(tmp_path / STORE_NAME) as store:
        (trace,) = store.db.execute("SELECT trace FROM results WHERE item_id = ? AND n = ? AND "
                                    "strategy = 'tree_of_thoughts' AND metric = 'accuracy'",
                                    (it.id, n)).fetchone()
    assert json.loads(trace)["text"] == ref.text


@pytest.mark.parametrize("args,param", [({"nope": 1}, "strategy_arg"),
                                        ({"mode": "sideways"}, "mode"),
                                        ({"branching": 0}, "branching")])
def test_a_bad_strategy_arg_is_refused_naming_it_before_any_load(args, param):
    with pytest.raises(InvalidParameterError) as err:
        config("self_consistency,tree_of_thoughts", strategy_args=args)
    assert err.value.param == param
    if param == "strategy_arg":  # the keys the run's strategies do take are listed
        assert "mode" in str(err.value) and "min_successful" in str(err.value)


def test_a_feedback_strategy_on_a_task_without_feedback_is_refused_up_front(tmp_path):
    for strategy in ("refine_with_feedback", "treefinement"):
        with pytest.raises(InvalidParameterError) as err:
            run_eval(config(strategy), TASK, tmp_path / strategy, load_generator=never)
        assert err.value.param == "strategy" and strategy in str(err.value)
        assert not (tmp_path / strategy / STORE_NAME).exists()


def test_weighted_vote_reads_the_reward_only_when_the_run_gives_one(tmp_path):
    assert config("weighted_vote").scorers_needed == set()
    assert config("weighted_vote", reward="scripted").scorers_needed == {"reward"}
    assert config("best_of_n").scorers_needed == {"reward"}  # a need, given or not
    assert config("tree_of_thoughts,mbr").scorers_needed == {"prm"}
    def with_logprobs(prompt: str, j: int) -> Completion:
        return Completion(script(prompt, j), token_ids=(1, 2), cumulative_logprob=-0.1 * (j + 1),
                          finish_reason="stop")

    scores = {}
    for name, kw in (("logprobs", {}), ("reward", {"reward": "scripted"})):
        report, code = run_eval(config("weighted_vote", **kw), TASK, tmp_path / name,
                                load_generator=lambda: MockGenerator(with_logprobs),
                                load_reward=lambda: reward)
        assert code == 0
        with RunStore(tmp_path / name / STORE_NAME) as store:
            scores[name] = store.scores(ITEMS[0].id, "reward")
    assert scores["logprobs"] == {} and len(scores["reward"]) == 4


def test_the_cli_refuses_a_strategy_arg_no_strategy_takes_before_any_load(tmp_path, capsys):
    from metagen.cli import main

    code = main(["eval", "testbed", "--model", str(tmp_path / "no-model"), "--strategy",
                 "self_consistency,deepconf", "--strategy-arg", "keep=0.1", "--strategy-arg",
                 "nope=1", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "strategy_arg" in err and "keep" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / STORE_NAME).exists()
