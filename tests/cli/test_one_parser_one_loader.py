"""One ``--n`` / ``--ns`` parser and one model loader behind ``metagen eval``, ``metagen
generate`` and ``metagen demo``: a malformed list names the flag of the command it came from,
and the demo's testbed policy goes through the same loader as ``--backend local|hf``."""

from __future__ import annotations

import pytest

from metagen.cli.flags import parse_ns
from metagen.errors import InvalidParameterError


def test_parse_ns_reads_comma_separated_integers_and_names_its_flag():
    assert parse_ns("1, 4,,16") == (1, 4, 16)
    with pytest.raises(InvalidParameterError) as exc:
        parse_ns("1,x")
    assert exc.value.param == "n"
    with pytest.raises(InvalidParameterError) as exc:
        parse_ns("4,y", "step_ns")
    assert exc.value.param == "step_ns"


@pytest.mark.parametrize("args, flag", [(["eval", "testbed", "--strategy", "mbr", "--model",
                                          "m", "--out", "o", "--n", "1,x"], "n"),
                                        (["demo", "--ns", "1,x"], "ns"),
                                        (["demo", "--step-ns", "2,x"], "step_ns")])
def test_each_command_s_malformed_list_names_its_flag(args, flag, capsys):
    from metagen.cli import main

    assert main(args) == 2
    assert f"invalid {flag}=" in capsys.readouterr().err


def test_the_demo_loads_its_policy_with_the_one_loader(monkeypatch):
    import metagen.eval.demo as preset
    import metagen.generators.loading as loading

    calls = []
    monkeypatch.setattr(preset, "testbed_model", lambda name: f"/models/{name}")
    monkeypatch.setattr(loading, "load_generator",
                        lambda backend, path, **kw: calls.append((backend, path, kw)) or
                        (backend, object()))
    preset.load_testbed_policy("hf")
    preset.load_testbed_policy("local")
    local = ("local", "/models/policy", {"kv_cache_bytes": preset.KV_CACHE_BYTES})
    assert calls[0] == ("hf", "/models/policy", {})
    assert calls[1] == (local if "local" in loading.available_backends()
                        else ("hf", "/models/policy", {}))
