"""The one table of engine options (:mod:`metagen.cli.engine_options`): every entry is an
``EngineConfig`` field, its choices are the config module's own constants, ``metagen generate``
and ``metagen serve`` both take every flag, and a bad value fails on both exactly as
``EngineConfig`` fails in Python -- one line naming the field, exit status 2, before any model
is loaded (the model folder given does not exist)."""

from __future__ import annotations

import dataclasses

import pytest

from metagen.cli import main
from metagen.cli.engine_options import ENGINE_OPTIONS, engine_flag
from metagen.engine import config as engine_config
from metagen.engine.config import EngineConfig
from metagen.errors import InvalidParameterError

MISSING = "/nonexistent/model"

# (argv, the EngineConfig keyword arguments it stands for, the field the error names)
BAD = [
    (["--kv-window-tokens", "7"], {"kv_window_tokens": 7}, "kv_window_tokens"),
    (["--kv-window-tokens", "0"], {"kv_window_tokens": 0}, "kv_window_tokens"),
    (["--kv-sink-tokens", "16"], {"kv_sink_tokens": 16}, "kv_sink_tokens"),
    (["--kv-window-tokens", "32", "--kv-sink-tokens", "-1"],
     {"kv_window_tokens": 32, "kv_sink_tokens": -1}, "kv_sink_tokens"),
    (["--kv-window-tokens", "32", "--prompt-lookup", "3"],
     {"kv_window_tokens": 32, "prompt_lookup": 3}, "kv_window_tokens"),
    (["--kv-cache-dtype", "fp8"], {"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
    (["--num-speculative-tokens", "0"], {"num_speculative_tokens": 0}, "num_speculative_tokens"),
    (["--num-speculative-tokens", "65"], {"num_speculative_tokens": 65},
     "num_speculative_tokens"),
    (["--prompt-lookup", "0"], {"prompt_lookup": 0}, "prompt_lookup"),
    (["--prompt-lookup", "3", "--speculative-model", "/some/draft"],
     {"prompt_lookup": 3, "speculative_model": "/some/draft"}, "prompt_lookup"),
    (["--speculative-quantization", "int8"], {"speculative_quantization": "int8"},
     "speculative_quantization"),
    (["--quantization", "int3"], {"quantization": "int3"}, "quantization"),
    (["--deterministic", "--kv-cache-dtype", "int8"],
     {"deterministic": True, "kv_cache_dtype": "int8"}, "deterministic"),
    (["--num-blocks", "0"], {"num_blocks": 0}, "num_blocks"),
    (["--speculative-tree", "2,1"], {"speculative_tree": (2, 1)}, "speculative_tree"),
    (["--speculative-model", "/some/draft", "--speculative-tree", "1,1,1,1,1"],
     {"speculative_model": "/some/draft", "speculative_tree": (1, 1, 1, 1, 1)},
     "speculative_tree"),
    (["--max-num-seqs", "-2"], {"max_num_seqs": -2}, "max_num_seqs"),
]
MALFORMED = [(["--kv-window-tokens", "x"], "kv_window_tokens"),
             (["--prompt-lookup", "2.5"], "prompt_lookup"),
             (["--num-speculative-tokens", "four"], "num_speculative_tokens"),
             (["--num-blocks", "many"], "num_blocks"),
             (["--speculative-tree", "2,x"], "speculative_tree")]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_entry_is_an_engine_config_field_with_the_configs_vocabulary() -> None:
    fields = {f.name: f for f in dataclasses.fields(EngineConfig)}
    for option in ENGINE_OPTIONS:
        assert option.name in fields, option.name
        assert option.help.strip(), option.name
        if option.kind == "choice":
            assert isinstance(getattr(engine_config, option.vocabulary), tuple)
        if option.kind == "flag":
            assert fields[option.name].default is False, option.name
    assert {o.name for o in ENGINE_OPTIONS} >= {
        "kv_window_tokens", "kv_sink_tokens", "kv_cache_dtype", "speculative_model",
        "num_speculative_tokens", "prompt_lookup", "speculative_quantization", "quantization",
        "deterministic"}


def test_a_choice_lists_the_config_modules_values_in_the_help() -> None:
    import click

    cmd = engine_flag("kv_cache_dtype")(click.command()(lambda **kw: None))
    metavar = cmd.params[0].make_metavar(click.Context(cmd))
    assert metavar == "|".join(engine_config.KV_CACHE_DTYPES)


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_both_commands_take_every_flag_of_the_table(command) -> None:
    from metagen.cli import cli

    cmd = cli.get_command(None, command)  # type: ignore[arg-type]
    flags = {opt for p in cmd.params for opt in p.opts}
    assert {o.flag for o in ENGINE_OPTIONS} <= flags


@pytest.mark.parametrize("argv, kwargs, field", BAD)
def test_a_bad_value_is_engine_configs_own_error_on_both_commands(capsys, argv, kwargs,
                                                                  field) -> None:
    with pytest.raises(InvalidParameterError) as python:
        EngineConfig(**kwargs)
    assert python.value.param == field
    for command in (["generate", MISSING, "Hi"], ["serve", MISSING]):
        code, out, err = run(capsys, *command, *argv)
        assert code == 2 and out == "", (command, argv, err)
        assert err == f"error: {python.value}\n", (command, argv)


@pytest.mark.parametrize("argv, field", MALFORMED)
def test_a_malformed_number_names_the_field_on_both_commands(capsys, argv, field) -> None:
    for command in (["generate", MISSING, "Hi"], ["serve", MISSING]):
        code, out, err = run(capsys, *command, *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert err.startswith(f"error: invalid {field}=") and "integer" in err


def test_generate_refuses_engine_options_on_hf_and_on_a_server(capsys) -> None:
    code, _, err = run(capsys, "generate", MISSING, "Hi", "--kv-cache-dtype", "int8",
                       "--backend", "hf")
    assert code == 2 and err.startswith("error: invalid kv_cache_dtype='int8'") \
        and "--backend local" in err
    # refused before anything is sent: nothing listens on port 9
    code, _, err = run(capsys, "generate", "--base-url", "http://127.0.0.1:9/v1", "--model",
                       "m", "Hi", "--kv-window-tokens", "32")
    assert code == 2 and err.startswith("error: invalid kv_window_tokens=32") \
        and "local model" in err and err.count("\n") == 1
