"""``resolve_scorer``: each spec kind gives the scorer it names, from real local folders; one ORM
loader serves ``metagen eval`` and ``metagen serve`` (the same class for the same folder);
errors name the flag."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.scorers import (
    FormattedPRM, HFProcessRewardModel, HFRewardModel, LikelihoodVerifier, LMJudge,
    RemoteProcessRewardModel, RemoteRewardModel)
from metagen.scorers.resolve import resolve_prm, resolve_reward, resolve_scorer
from metagen.scorers.scorer_spec import parse_scorer_spec
from metagen.server.rewards import load_named, parse_named_specs
from tests.tolerances import SCORE_TOL

PROMPTS = ["Once upon a time", "Once upon a time"]
COMPLETIONS = [" there was a cat.", " a dog ran home."]


@pytest.fixture(scope="module")
def value_head_path(tmp_path_factory, stories_path):
    """stories260K with a TRL value head beside its weights (a value-head ORM checkpoint)."""
    import shutil

    import torch
    from safetensors.torch import save_file
    folder = tmp_path_factory.mktemp("value_head")
    for file in stories_path.iterdir():
        if file.is_file():
            shutil.copy(file, folder / file.name)
    torch.manual_seed(4)
    save_file({"v_head.summary.weight": 0.05 * torch.randn(1, _hidden(stories_path)),
               "v_head.summary.bias": torch.randn(1)}, folder / "v_head.safetensors",
              metadata={"format": "pt"})
    return folder


def _hidden(path) -> int:
    import json
    return int(json.loads((path / "config.json").read_text())["hidden_size"])


def test_a_causal_lm_folder_is_a_likelihood_verifier(stories_path):
    rm = resolve_reward(str(stories_path))
    assert type(rm) is LikelihoodVerifier and rm.batch_size == 64
    ref = LikelihoodVerifier.from_pretrained(stories_path)
    assert rm.score(PROMPTS, COMPLETIONS) == pytest.approx(ref.score(PROMPTS, COMPLETIONS),
                                                           abs=SCORE_TOL)


def test_a_classification_folder_is_a_reward_model(orm_path, orm2_path):
    for path in (orm_path, orm2_path):
        rm = resolve_reward(str(path))
        assert type(rm) is HFRewardModel
        ref = HFRewardModel.from_pretrained(path)
        assert rm.score(PROMPTS, COMPLETIONS) == pytest.approx(
            ref.score(PROMPTS, COMPLETIONS), abs=SCORE_TOL)


def test_a_value_head_checkpoint_is_a_reward_model(value_head_path):
    rm = resolve_reward(str(value_head_path))
    assert type(rm) is HFRewardModel
    assert all(0 < s < 1 for s in rm.score(PROMPTS, COMPLETIONS))


def test_one_orm_loader_for_eval_and_serve(stories_path, orm_path, value_head_path):
    """``metagen serve --orm NAME=SPEC`` loads what ``metagen eval --reward SPEC`` loads."""
    for path in (stories_path, orm_path, value_head_path):
        served = load_named(parse_named_specs([f"rm={path}"], "reward", "orm"), "reward",
                            "orm")["rm"]
        assert type(served) is type(resolve_reward(str(path)))
    served = load_named(parse_named_specs(["me=likelihood"], "reward", "orm"), "reward", "orm",
                        default_folder=stories_path)["me"]
    assert type(served) is LikelihoodVerifier


def test_likelihood_reads_the_given_or_default_folder(stories_path):
    explicit = resolve_prm(f"likelihood+{stories_path}")
    default = resolve_prm("likelihood", default_folder=stories_path)
    assert type(explicit) is type(default) is LikelihoodVerifier
    steps = [["Once upon", " a time"]]
    assert explicit.score_steps(["Hi"], steps) == default.score_steps(["Hi"], steps)
    with pytest.raises(InvalidParameterError) as err:
        resolve_prm("likelihood")
    assert err.value.param == "prm" and "likelihood+FOLDER" in str(err.value)


def test_prm_folders_and_presets(prm_path, stories_path):
    assert type(resolve_prm(str(prm_path))) is HFProcessRewardModel
    assert type(resolve_prm(f"math-shepherd+{stories_path}")) is FormattedPRM
    with pytest.raises(ModelLoadError, match="declare it"):
        resolve_prm(str(stories_path))  # a causal LM's PRM layout is not in its weights


def test_judge_over_a_folder(stories_path):
    judge = resolve_reward(f"judge+{stories_path}")
    assert isinstance(judge, LMJudge)
    scores = judge.score(PROMPTS, COMPLETIONS)
    assert all(0 < s < 1 for s in scores)


def test_remote_specs_build_remote_scorers_without_a_request(stories_path):
    rm = resolve_reward("classify+http://127.0.0.1:9?model=rm&labels=bad,good"
                        "&positive_label=good&batch_size=3")
    try:
        assert isinstance(rm, RemoteRewardModel)
        assert (rm.api, rm.model, rm.positive, rm.labels, rm.batch_size) == (
            "classify", "rm", 1, ["bad", "good"], 3)
        assert rm.base_url.rstrip("/") == "http://127.0.0.1:9"
    finally:
        rm.close()
    prm = resolve_prm(f"pooling+http://127.0.0.1:9?model=p&tokenizer={stories_path}"
                      "&aggregation=min")
    try:
        assert isinstance(prm, RemoteProcessRewardModel)
        assert (prm.api, prm.aggregation, prm.tokenizer.is_fast) == ("pooling", "min", True)
    finally:
        prm.close()


def test_a_refused_remote_keyword_names_the_flag_and_the_key():
    with pytest.raises(InvalidParameterError) as err:
        resolve_reward("pooling+http://127.0.0.1:9?model=rm&positive_label=good", flag="orm")
    assert err.value.param == "orm" and "'positive_label'" in str(err.value)


def test_missing_folders_are_model_load_errors(tmp_path):
    for spec in (str(tmp_path / "nope"), f"likelihood+{tmp_path / 'nope'}", str(tmp_path)):
        with pytest.raises(ModelLoadError):
            resolve_reward(spec)
    with pytest.raises(ModelLoadError):
        resolve_prm(str(tmp_path / "nope"))


def test_unit_tests_only_where_the_caller_has_them():
    oracle = object()
    assert resolve_reward("unit-tests", unit_tests=lambda: oracle) is oracle
    with pytest.raises(InvalidParameterError) as err:
        resolve_reward("unit-tests", flag="orm")
    assert err.value.param == "orm"


def test_a_parsed_spec_resolves_as_its_text(stories_path):
    parsed = parse_scorer_spec(str(stories_path), "reward", "reward")
    assert type(resolve_scorer(parsed, "reward", flag="reward")) is LikelihoodVerifier
