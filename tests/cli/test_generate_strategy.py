"""``metagen generate --strategy NAME``: the command's choice is the library's — ``get(NAME).run``
with the same scorers, options and seed (stories260K, and a tiny real PRM folder) — and bad
strategy flags fail as one line naming the flag, before any model loads."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main
from metagen.generators.local import LocalGenerator
from metagen.scorers.resolve import resolve_prm
from metagen.strategies.registry import get, names
from metagen.strategies.spec import Scorers
from metagen.types import SamplingParams
from tests.scorers.conftest import prm_path  # noqa: F401  (the tiny real PRM's folder)

PROMPT = "Once upon a time"
PARAMS = SamplingParams(temperature=1.0, max_tokens=12, seed=4)


def cli_json(capsys, *argv: str) -> dict:
    code = main(["generate", *argv, "--json", "--max-tokens", "12", "--seed", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def gen(stories_path):
    generator = LocalGenerator.from_pretrained(stories_path)
    yield generator
    generator.close()


@pytest.mark.parametrize("name, args, options", [
    ("self_consistency", [], {}),
    ("adaptive_self_consistency", ["--strategy-arg", "batch=2"], {"batch": 2}),
    ("self_refine", ["--strategy-arg", "stop_phrase=The end"], {"stop_phrase": "The end"}),
])
def test_strategy_equals_the_library(capsys, gen, stories_path, name, args, options):
    out = cli_json(capsys, str(stories_path), PROMPT, "--strategy", name, "--n", "3", *args)
    ref = get(name).run(gen, PROMPT, n=3, params=PARAMS, options=options)
    assert out["strategy"] == name and out["n"] == 3 and out["options"] == options
    assert out["text"] == ref.text and out["candidates"] == [c.text for c in ref.candidates]
    assert out["usage"]["generated_tokens"] == ref.usage.generated_tokens


def test_step_search_with_a_prm_folder(capsys, gen, stories_path, prm_path):  # noqa: F811
    out = cli_json(capsys, str(stories_path), PROMPT, "--strategy", "dvts", "--n", "4",
                   "--prm", str(prm_path), "--strategy-arg", "max_depth=2")
    ref = get("dvts").run(gen, PROMPT, n=4, params=PARAMS,
                          scorers=Scorers(prm=resolve_prm(str(prm_path))),
                          options={"max_depth": 2})
    assert out["text"] == ref.text and out["scores"] == pytest.approx(ref.scores)
    assert out["trace"]["search_steps"] == ref.trace["search_steps"]


@pytest.mark.parametrize("argv, named", [
    (["--strategy", "nope"], "strategy"),
    (["--strategy", "dvts"], "prm"),
    (["--strategy", "dvts", "--prm", "x", "--strategy-arg", "width=2"], "width"),
    (["--strategy", "mbr", "--strategy-arg", "utility=meteor"], "utility"),
    (["--strategy", "mbr", "--strategy-arg", "utility"], "strategy_arg"),
    (["--strategy", "refine_with_feedback"], "strategy"),
    (["--strategy", "mbr", "--stream"], "strategy"),
    (["--strategy-arg", "width=2"], "strategy_arg"),
    (["--prm", "x"], "prm"),
])
def test_bad_strategy_flags_are_one_line_before_loading(capsys, tmp_path, argv, named):
    code = main(["generate", str(tmp_path / "no_model"), PROMPT, *argv])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and f"invalid {named}=" in err, err


@pytest.fixture(scope="module")
def policy():
    from metagen.testbed import model_path
    generator = LocalGenerator.from_pretrained(model_path("policy"))
    yield generator
    generator.close()


@pytest.mark.parametrize("name", names(surface="cli"))
def test_every_cli_strategy_runs_and_equals_the_library(capsys, policy, name):
    """Each strategy available on the CLI, on the testbed policy with its own confidence as
    the reward and the PRM (``likelihood``): the command's choice is ``get(name).run``'s."""
    from metagen.scorers.resolve import resolve_scorer
    from metagen.testbed import format_prompt, make_problems, model_path

    problem = format_prompt(make_problems("test", 1, seed=3, difficulties=[2])[0])
    folder = str(model_path("policy"))
    out = cli_json(capsys, folder, problem, "--strategy", name, "--n", "2", "--reward",
                   "likelihood", "--prm", "likelihood", "--temperature", "0.8")
    confidence = resolve_scorer("likelihood", "reward", flag="reward", default_folder=folder)
    scorers = Scorers(reward=confidence, confidence=confidence,
                      prm=resolve_scorer("likelihood", "prm", flag="prm", default_folder=folder))
    ref = get(name).run(policy, problem, n=2, params=PARAMS.with_(temperature=0.8),
                        scorers=scorers)
    assert out["text"] == ref.text and out["candidates"] == [c.text for c in ref.candidates]
