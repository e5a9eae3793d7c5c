"""A strategy is one module for eval: a spec registered with the registry (here a throwaway
``first_sample`` defined in this test, put into the registry) is listed by ``metagen eval
--help``, its parameters are ``--strategy-arg`` keys, and it runs through ``run_eval`` on the
testbed task with a scripted generator, each N's result the strategy's own call with the same
seed, with no eval file edited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from metagen.errors import InvalidParameterError
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.seeds import direct_seed
from metagen.eval.store import RunStore
from metagen.eval.table import curve_rows, label
from metagen.generators.mock import MockGenerator
from metagen.strategies import registry
from metagen.strategies.spec import StrategySpec, param
from metagen.types import Result, SamplingParams, Usage

TASK = get_task("testbed")
ITEMS = TASK.items(None, 3)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}
SAMPLING = SamplingParams(temperature=0.8, max_tokens=32)


def first_sample(generator, prompts: Sequence[str], *, n: int, skip: int = 0,
                 params: SamplingParams | None = None) -> list[Result]:
    """Sample N, keep the first (after ``skip``)."""
    rows = generator.generate(list(prompts), (params or SamplingParams()).with_(n=n))
    return [Result(best=row[min(skip, n - 1)], candidates=list(row),
                   usage=Usage(generated_tokens=sum(c.num_tokens for c in row)))
            for row in rows]


@dataclass(frozen=True, slots=True)
class FirstConfig:
    """first_sample's parameters besides N."""

    skip: int = param(0, "samples to pass over before the one kept", lo=0)


SPEC = StrategySpec("first_sample", first_sample, "each_n", "first of N", FirstConfig)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(registry, "_SPECS", {**registry.specs(), SPEC.name: SPEC})


def script(prompt: str, j: int) -> str:
    wrong = (sum(map(ord, prompt)) + j) % 3 == 0
    return f"#### {ANSWER[prompt] + 1 if wrong else ANSWER[prompt]}"


def test_a_registered_spec_is_listed_by_eval_help(registered):
    from metagen.cli import cli

    got = CliRunner().invoke(cli, ["eval", "--help"], terminal_width=1000)
    assert got.exit_code == 0
    assert "first_sample" in got.output and "step_beam_search" in got.output


def test_without_the_spec_eval_does_not_know_it():
    from metagen.cli import cli

    assert "first_sample" not in CliRunner().invoke(cli, ["eval", "--help"]).output
    with pytest.raises(InvalidParameterError) as err:
        EvalConfig(task="testbed", model={"path": "scripted"}, strategy="first_sample")
    assert err.value.param == "strategy"


def test_scripted_a_registered_spec_runs_through_run_eval(registered, tmp_path):
    cfg = EvalConfig(task="testbed", model={"path": "scripted"}, strategy="greedy,first_sample",
                     ns=(1, 4), sampling=SAMPLING, seed=7, limit=3, attempts=1,
                     strategy_args={"skip": 1})
    report, code = run_eval(cfg, TASK, tmp_path, load_generator=lambda: MockGenerator(script))
    assert code == 0 and report["accounting"]["done"] == 3
    with RunStore(tmp_path / STORE_NAME) as store:
        rows = {(r[0], r[1], r[2], r[3]): r[4] for r in store.results()}
    for it in ITEMS:
        for n in (1, 4):
            ref = first_sample(MockGenerator(script), [it.prompt], n=n, skip=1,
                               params=SAMPLING.with_(n=1, seed=direct_seed(7, it.id, n)))[0]
            key = (it.id, "first_sample", n)
            assert rows[(*key, "accuracy")] == float(TASK.grade(ref.text, it.problem))
            assert rows[(*key, "generated_tokens")] == ref.usage.generated_tokens
    assert label("first_sample") == "first of N"
    assert [r["strategy"] for r in curve_rows([report])] == ["greedy", *["first_sample"] * 2]
    with pytest.raises(InvalidParameterError) as err:  # its config checks its arguments
        EvalConfig(task="testbed", model={"path": "scripted"}, strategy="first_sample",
                   strategy_args={"skip": -1})
    assert err.value.param == "skip"
