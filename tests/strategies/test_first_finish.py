"""First Finish Search: the first trace to finish wins and the others stop there (scripted
generator); on the testbed policy a single trace is the plain step-by-step sample (step beam
search with one beam, same seed); and — added as one module, known to nothing else — it is
listed by ``metagen eval --help``, runs in ``metagen eval testbed`` and answers the openai SDK
through ``metagen serve`` with the library's choice."""

from __future__ import annotations

import json

import openai
import pytest
from click.testing import CliRunner

from metagen.cli import main
from metagen.cli.eval import eval_command
from metagen.generators.local import LocalGenerator
from metagen.strategies.first_finish import first_finish
from metagen.strategies.registry import get
from metagen.strategies.step_beam import step_beam_search
from metagen.testbed import format_prompt, make_problems, model_path
from metagen.types import SamplingParams
from tests.server.conftest import MODEL, start_server, stop_server
from tests.strategies._scripted_steps import ScriptedStepGenerator

LENGTHS = {0: 3, 1: 2, 2: 4, 3: 2}  # steps until trace i finishes
SHORT = {1: "long step text", 3: "s"}  # trace 3's last step is shorter than trace 1's


def script(prefix: str, i: int) -> str:
    """Root samples are ``T{i}``'s first step; a continued trace gets its next step, the last
    one ending the solution with ``#### i``."""
    if prefix == "Q:\n":
        trace, done = i, 0
    else:
        trace, done = int(prefix.split("T")[1].split(".")[0]), prefix.count("\n") - 1
    if done + 1 == LENGTHS[trace]:
        return f"T{trace}.{done + 1} {SHORT.get(trace, 'end')} #### {trace}"
    return f"T{trace}.{done + 1}\n"


def test_scripted_first_to_finish_wins_and_the_rest_stop():
    gen = ScriptedStepGenerator(script)
    [res] = first_finish(gen, ["Q:\n"], n=4, params=SamplingParams(temperature=1.0, seed=0))
    assert res.text.endswith("#### 3")  # traces 1 and 3 finish in round 2; 3 has fewer tokens
    assert res.trace["finished"] and res.trace["rounds"] == 2
    assert len(gen.calls) == 2  # the 4 roots, then one step for each of the 4 live traces
    assert gen.calls[1][1].n == 1 and len(gen.calls[1][0]) == 4
    assert len(res.candidates) == 4  # every trace as it stood: two of them stopped unfinished
    assert res.usage.generated_tokens == gen.usage.generated_tokens == sum(
        c.num_tokens for c in res.candidates)


def test_scripted_nothing_finishes_falls_back_to_the_shortest():
    gen = ScriptedStepGenerator(lambda prefix, i: f"T{i}.{prefix.count(chr(10))}\n")
    [res] = first_finish(gen, ["Q:\n"], n=2, max_depth=3)
    assert not res.trace["finished"] and res.best is not None
    assert res.trace["winner_tokens"] is None


PROBLEM = format_prompt(make_problems("test", 1, seed=3, difficulties=[3])[0])
PARAMS = SamplingParams(temperature=0.8, seed=5, max_tokens=64)


@pytest.fixture(scope="module")
def policy():
    gen = LocalGenerator.from_pretrained(model_path("policy"))
    yield gen
    gen.close()


def test_one_trace_is_the_step_by_step_sample(policy):
    [ffs] = first_finish(policy, [PROBLEM], n=1, params=PARAMS)
    [beam] = step_beam_search(policy, [PROBLEM], lambda p, s: 0.0, width=1, branching=1,
                              params=PARAMS)
    assert ffs.text == beam.text and "####" in ffs.text
    assert ffs.usage.generated_tokens == beam.usage.generated_tokens


def test_eval_lists_and_runs_it(tmp_path):
    assert "first_finish" in CliRunner().invoke(eval_command, ["--help"]).output
    out = tmp_path / "run"
    code = main(["eval", "testbed", "--model", str(model_path("policy")), "--strategy",
                 "first_finish", "--n", "1,4", "--limit", "3", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "results.json").read_text())
    rows = [r for r in report["results"] if r["strategy"] == "first_finish"
            and r["metric"] == "accuracy"]
    assert sorted(r["n"] for r in rows) == [1, 4] and all(r["items"] == 3 for r in rows)


def test_serve_answers_the_openai_sdk_with_the_librarys_choice(policy):
    running = start_server(policy)
    try:
        with openai.OpenAI(base_url=running.base_url, api_key="x", max_retries=0) as sdk:
            got = sdk.completions.create(
                model=MODEL, prompt=PROBLEM, max_tokens=64, temperature=0.8, seed=5,
                extra_body={"metagen": {"strategy": "first_finish", "n": 4,
                                        "return": "candidates"}})
    finally:
        stop_server(running)
    want = get("first_finish").run(policy, PROBLEM, n=4, params=PARAMS)
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.text
    assert info["candidates"] == [c.text for c in want.candidates]
    assert got.usage.completion_tokens == want.usage.generated_tokens > 0
