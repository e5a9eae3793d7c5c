"""Several strategies over ONE sample set (scripted generator, testbed items): each subsampled
strategy's curve equals its own single-strategy run and the library's strategy on every subset;
``greedy`` is one temperature-0 sample at N = 1; every (strategy, N) has its cost rows; the run
key covers the strategy list."""

from __future__ import annotations

import itertools

import pytest

from metagen import mbr
from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.cost import FLOPS, TOKENS, CostModel
from metagen.eval.runner import STORE_NAME
from metagen.eval.store import RunStore
from metagen.generators.flops import FlopModel
from metagen.generators.mock import MockGenerator
from tests.eval.test_runner_scripted import ITEMS, N_MAX, TASK, _values, config, never, reward, text

ALL = "greedy,self_consistency,best_of_n,weighted_vote,mbr"


def _run(tmp_path, name: str, strategy: str) -> tuple[dict, MockGenerator]:
    gen = MockGenerator(text)
    report, code = run_eval(config(strategy=strategy, reward="scripted"), TASK, tmp_path / name,
                            load_generator=lambda: gen, load_reward=lambda: reward)
    assert code == 0
    return report, gen


def test_one_sample_set_serves_every_subsampled_strategy_as_its_own_run_would(tmp_path):
    both, gen = _run(tmp_path, "all", ALL)
    sampling = [c for c in gen.calls if c.params.n == N_MAX]
    assert len(sampling) == len(ITEMS)  # one sampling call per item, shared by all four
    for name in ("self_consistency", "best_of_n", "weighted_vote", "mbr"):
        alone, _ = _run(tmp_path, name, name)
        for metric in ("accuracy", TOKENS):
            assert _values(both, name, metric) == _values(alone, name, metric)
        assert _values(alone, name, "accuracy")  # not vacuous
    greedy, _ = _run(tmp_path, "greedy", "greedy")
    # the run's total: the one sample set once, plus greedy's own sample
    assert both["generated_tokens"] == alone["generated_tokens"] + greedy["generated_tokens"]


def test_mbr_at_k_is_the_mean_of_the_librarys_mbr_over_every_subset(tmp_path):
    report, _ = _run(tmp_path, "mbr", "mbr")
    k = 2
    per_item = []
    for it in ITEMS:
        subs = list(itertools.combinations(range(N_MAX), k))
        hits = [TASK.grade(mbr(MockGenerator(lambda p, j, s=s: text(p, s[j])), it.prompt, n=k,
                               answer_key=TASK.answer_key).text, it.problem) for s in subs]
        per_item.append(sum(hits) / len(subs))
    assert _values(report, "mbr", "accuracy")[k] == pytest.approx(sum(per_item) / len(ITEMS))


def test_greedy_is_one_temperature_zero_sample_at_n_1(tmp_path):
    report, gen = _run(tmp_path, "greedy", "greedy")
    assert all(c.params.n == 1 and c.params.temperature == 0.0 for c in gen.calls)
    assert len(gen.calls) == len(ITEMS)
    want = sum(TASK.grade(text(it.prompt, 0), it.problem) for it in ITEMS) / len(ITEMS)
    assert _values(report, "greedy", "accuracy") == {1: pytest.approx(want)}
    tokens = [len(gen.generate([it.prompt], c.params)[0][0].token_ids)
              for it, c in zip(ITEMS, gen.calls)]
    assert _values(report, "greedy", TOKENS) == {1: pytest.approx(sum(tokens) / len(ITEMS))}
    assert report["generated_tokens"] == sum(tokens) > 0  # greedy stores no sample set


def test_cost_rows_charge_n_times_the_mean_sample(tmp_path):
    report, _ = _run(tmp_path, "sc", "self_consistency")
    with RunStore(tmp_path / "sc" / STORE_NAME) as store:
        means = [sum(s.completion.num_tokens for s in store.samples(it.id).values()) / N_MAX
                 for it in ITEMS]
    for n in (1, 2, N_MAX):
        assert _values(report, "self_consistency", TOKENS)[n] == pytest.approx(
            n * sum(means) / len(means))
    assert not _values(report, "self_consistency", FLOPS)  # the mock has no model to count


def test_flops_of_one_sample_equal_the_flop_models_sequence_without_a_cache():
    model = FlopModel(matmul_params=1000, layers=2, attn_dim=8)
    cost = CostModel(model, lambda prompt: len(prompt.split()), {"reward": model})
    assert cost.sampling("a b c", [5], 1) == model.sequence(3, 5)
    # n samples share one prefill: n x the mean decode on top of it
    two = cost.sampling("a b c", [5, 9], 2)
    assert two == pytest.approx(model.sequence(3, 5) + model.sequence(3, 9)
                                - model.forward(0, 3))
    assert cost.scoring("reward", "a b c", [4], 1) == model.forward(0, 7)
    assert CostModel().sampling("a", [3], 1) != CostModel().sampling("a", [3], 1)  # NaN


def test_the_run_key_covers_the_strategy_list(tmp_path):
    _run(tmp_path, "run", "self_consistency,mbr")
    with pytest.raises(InvalidParameterError, match="run_key.*strategy"):
        run_eval(config(strategy="self_consistency", reward="scripted"), TASK,
                 tmp_path / "run", load_generator=never)


@pytest.mark.parametrize("bad", ["", "self_consistency,self_consistency", "nope", "greedy,,x"])
def test_a_bad_strategy_list_names_strategy(bad):
    with pytest.raises(InvalidParameterError, match="strategy"):
        EvalConfig(task="testbed", model={}, strategy=bad)


def test_a_tuple_and_a_comma_list_are_the_same_config():
    a = EvalConfig(task="testbed", model={}, strategy=("greedy", "mbr"))
    assert a == EvalConfig(task="testbed", model={}, strategy="greedy, mbr")
    assert a.strategies == ("greedy", "mbr")


def test_a_missing_scorer_is_named_before_any_load(tmp_path):
    with pytest.raises(InvalidParameterError, match="reward"):
        run_eval(config(strategy="mbr,best_of_n"), TASK, tmp_path, load_generator=never)
    with pytest.raises(InvalidParameterError, match="confidence"):
        run_eval(config(strategy="best_of_n_confidence"), TASK, tmp_path,
                 load_generator=never)
