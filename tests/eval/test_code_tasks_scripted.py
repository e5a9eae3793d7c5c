"""HumanEval and MBPP through the runner with a scripted generator (canonical solutions for some
items and samples, wrong code otherwise), graded in the default sandbox: pass@k equals the known
value; without the opt-in the run is refused before anything is loaded or stored."""

from __future__ import annotations

import pytest

from metagen.errors import CodeExecutionNotAllowed
from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.generators.mock import MockGenerator
from metagen.sandbox import ENV_ALLOW
from metagen.tasks.mbpp import END_MARKER
from metagen.types import SamplingParams
from tests.tasks.conftest import _data_file

DATA = {"humaneval": "HumanEval.jsonl.gz", "mbpp": "mbpp.jsonl"}
WRONG = {"humaneval": "    return None\n", "mbpp": "def nothing():\n    pass\n" + END_MARKER}
# item index -> the sample indices that are the canonical solution (n_max = 2)
RIGHT = {0: {0, 1}, 1: {0}}
PASS_AT = {1: (1 + 0.5) / 4, 2: (1 + 1) / 4}  # pass_at_k per item, averaged over 4 items


def canonical(task: str, problem) -> str:
    if task == "humaneval":
        return problem.reference[len(problem.prompt):]
    return problem.reference + "\n" + END_MARKER


def config(task: str, path) -> EvalConfig:
    return EvalConfig(task=task, model={"path": "scripted"}, strategy="best_of_n", ns=(1, 2),
                      sampling=SamplingParams(temperature=0.8, max_tokens=2000), seed=0,
                      data=str(path), limit=4, attempts=1)


def never() -> MockGenerator:
    raise AssertionError("no model may be loaded here")


@pytest.mark.parametrize("task", ["humaneval", "mbpp"])
def test_scripted_pass_at_k_equals_the_known_fraction(task, tmp_path, monkeypatch,
                                                      default_sandbox):
    monkeypatch.setenv(ENV_ALLOW, "1")
    path = _data_file(DATA[task])
    spec = get_task(task)
    items = spec.items(path, 4)
    index = {it.prompt: i for i, it in enumerate(items)}

    def text(prompt: str, j: int) -> str:
        i = index[prompt]
        return canonical(task, items[i].problem) if j in RIGHT.get(i, ()) else WRONG[task]

    report, code = run_eval(config(task, path), spec, tmp_path,
                            load_generator=lambda: MockGenerator(text),
                            load_reward=lambda: (lambda prompt, completion: 0.0))
    assert code == 0 and report["status"] == "complete"
    got = {r["n"]: r["mean"] for r in report["results"] if r["metric"] == "pass@k"}
    assert got == pytest.approx(PASS_AT)
    limits = config(task, path).key_fields(spec)["executor_limits"]
    assert limits["call_seconds"] == 5.0 and limits["wall_seconds"] == 20.0  # in the run key
    assert report["provenance"]["executor"] == limits


@pytest.mark.parametrize("task", ["humaneval", "mbpp"])
def test_without_opt_in_refused_before_any_load(task, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_ALLOW, raising=False)
    with pytest.raises(CodeExecutionNotAllowed):
        run_eval(config(task, _data_file(DATA[task])), get_task(task), tmp_path,
                 load_generator=never, load_reward=never)
    assert not (tmp_path / STORE_NAME).exists()


def test_unit_test_oracle_only_for_code_tasks(monkeypatch, default_sandbox):
    from metagen.cli.eval import unit_test_oracle
    from metagen.errors import InvalidParameterError

    monkeypatch.setenv(ENV_ALLOW, "1")
    with pytest.raises(InvalidParameterError) as err:
        unit_test_oracle(get_task("testbed"), None, 2)
    assert err.value.param == "reward"
    spec = get_task("humaneval")
    path = str(_data_file(DATA["humaneval"]))
    [item] = spec.items(path, 1)
    oracle = unit_test_oracle(spec, path, 1)
    right = canonical("humaneval", item.problem)
    assert oracle.score([item.prompt] * 2, [right, WRONG["humaneval"]]) == [1.0, 0.0]
