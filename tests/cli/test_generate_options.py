"""``metagen generate`` exposes every decoding option of SamplingParams: each flag reaches
SamplingParams unchanged (seen in ``--json``'s ``params``), and a bad value is the same typed
error as in Python: one line naming the parameter, exit status 2, before any model is loaded."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_new_option_reaches_sampling_params(capsys, stories_path) -> None:
    code, out, err = run(
        capsys, "generate", str(stories_path), "Once upon a time", "--seed", "1",
        "--max-tokens", "6", "--json", "--epsilon-cutoff", "0.0003", "--eta-cutoff", "0.0004",
        "--no-repeat-ngram-size", "3", "--logit-bias", "5=2.5", "--logit-bias", "7=-100",
        "--bad-words", "dog", "--bad-words", "big cat", "--stop-token-ids", "13",
        "--stop-token-ids", "14", "--ignore-eos")
    assert code == 0, err
    params = json.loads(out)["params"]
    assert params["epsilon_cutoff"] == 0.0003 and params["eta_cutoff"] == 0.0004
    assert params["no_repeat_ngram_size"] == 3
    assert params["logit_bias"] == {"5": 2.5, "7": -100.0}
    assert params["bad_words"] == ["dog", "big cat"]
    assert params["stop_token_ids"] == [13, 14]
    assert params["ignore_eos"] is True
    assert params["mirostat_tau"] is None and params["mirostat_eta"] == 0.1


def test_mirostat_options_reach_sampling_params(capsys, stories_path) -> None:
    code, out, err = run(capsys, "generate", str(stories_path), "Once upon a time", "--seed",
                         "1", "--max-tokens", "6", "--json", "--mirostat-tau", "3",
                         "--mirostat-eta", "0.25")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["params"]["mirostat_tau"] == 3.0 and doc["params"]["mirostat_eta"] == 0.25
    assert len(doc["completions"][0]["token_ids"]) == 6


def test_defaults_are_sampling_params_defaults(capsys, stories_path) -> None:
    from metagen.types import SamplingParams

    code, out, err = run(capsys, "generate", str(stories_path), "Hi", "--max-tokens", "2",
                         "--json", "--seed", "0")
    assert code == 0, err
    params = json.loads(out)["params"]
    defaults = SamplingParams().to_dict()
    for name in ("epsilon_cutoff", "eta_cutoff", "mirostat_tau", "mirostat_eta",
                 "no_repeat_ngram_size", "logit_bias", "bad_words", "stop_token_ids",
                 "ignore_eos"):
        assert params[name] == defaults[name], name


@pytest.mark.parametrize("flag, value, param", [
    ("--epsilon-cutoff", "1", "epsilon_cutoff"),
    ("--epsilon-cutoff", "x", "epsilon_cutoff"),
    ("--eta-cutoff", "-0.1", "eta_cutoff"),
    ("--eta-cutoff", "inf", "eta_cutoff"),
    ("--mirostat-tau", "0", "mirostat_tau"),
    ("--mirostat-tau", "tau", "mirostat_tau"),
    ("--mirostat-eta", "2", "mirostat_eta"),
    ("--no-repeat-ngram-size", "-1", "no_repeat_ngram_size"),
    ("--no-repeat-ngram-size", "2.5", "no_repeat_ngram_size"),
    ("--logit-bias", "5", "logit_bias"),
    ("--logit-bias", "x=1", "logit_bias"),
    ("--logit-bias", "5=big", "logit_bias"),
    ("--logit-bias", "5=nan", "logit_bias"),
    ("--logit-bias", "-1=2", "logit_bias"),
    ("--bad-words", "", "bad_words"),
    ("--stop-token-ids", "-3", "stop_token_ids"),
    ("--stop-token-ids", "x", "stop_token_ids"),
])
def test_bad_value_is_one_line_naming_the_parameter(capsys, flag, value, param) -> None:
    # the model path is never opened: parameters are validated first
    code, out, err = run(capsys, "generate", "/nonexistent/model", "Hi", flag, value)
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and f"invalid {param}=" in lines[0] and "Traceback" not in err


def test_logit_bias_given_twice_for_one_token_is_refused(capsys) -> None:
    code, _, err = run(capsys, "generate", "/nonexistent/model", "Hi", "--logit-bias", "5=1",
                       "--logit-bias", "5=2")
    assert code == 2 and "logit_bias" in err and "twice" in err


def test_out_of_vocabulary_ids_are_refused_by_the_model(capsys, stories_path) -> None:
    """Checks that need the model (ids below its vocabulary of 512) still name the parameter."""
    for flag, value, param in (("--logit-bias", "512=1", "logit_bias"),
                               ("--stop-token-ids", "9999", "stop_token_ids")):
        code, out, err = run(capsys, "generate", str(stories_path), "Hi", flag, value)
        assert code == 2 and out == "" and param in err, err
        assert len(err.strip().splitlines()) == 1
