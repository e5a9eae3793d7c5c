"""The policy family: the registry (names, shapes, parameter counts that the real model folders
match), ``train --only policy-s`` never into the shipped folder, and ``testbed eval --family``
on the real models."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main
from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.testbed.family_eval import family_greedy
from metagen.testbed.modeling import (DRAFT_ARCH, FAMILY, MODELS_DIR, NAMES, PIPELINE,
                                      POLICY_ARCH, load_model, model_path)
from metagen.testbed.pipeline import train_all
from metagen.testbed.tokenizer import Codec


def _present(name: str) -> bool:
    return (model_path(name) / "config.json").is_file()  # type: ignore[arg-type]


def test_the_family_is_named_small_to_large_and_policy_s_is_a_model_name() -> None:
    assert list(FAMILY) == ["draft", "policy-s", "policy"]
    assert FAMILY["draft"] is DRAFT_ARCH and FAMILY["policy"] is POLICY_ARCH
    sizes = [arch.params(Codec().size) for arch in FAMILY.values()]
    # the data card's counts: 270,816 and 1,869,504; policy-s's shape gives 918,656
    assert sizes == [270_816, 918_656, 1_869_504]
    assert "policy-s" in NAMES and "policy-s" not in PIPELINE  # a plain train makes the four
    assert model_path("policy-s") == MODELS_DIR / "policy-s"


@pytest.mark.parametrize("name", list(FAMILY))
def test_a_members_folder_has_the_shape_and_parameter_count_of_its_arch(name: str) -> None:
    if not _present(name):
        pytest.skip(f"{name} is not in {MODELS_DIR} (train it with "
                    f"`metagen testbed train --only {name}`)")
    arch = FAMILY[name]
    model = load_model(name)  # type: ignore[arg-type]
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.intermediate_size) == (
        arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.intermediate)
    assert sum(p.numel() for p in model.parameters()) == arch.params(cfg.vocab_size)


def test_train_only_policy_s_is_refused_into_the_shipped_folder(capsys) -> None:
    before = {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()}
    assert main(["testbed", "train", "--only", "policy-s", "--out", str(MODELS_DIR)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--overwrite-shipped" in err, err
    with pytest.raises(InvalidParameterError, match="shipped"):
        train_all(only="policy-s", out_root=MODELS_DIR)
    with pytest.raises(InvalidParameterError, match="only"):
        train_all(only="policy-xl", out_root=MODELS_DIR)
    assert {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()} == before


def test_family_eval_rows_on_the_real_models(capsys) -> None:
    assert main(["testbed", "eval", "--model", "policy", "--model", "draft", "--limit", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["family"]
    assert [r["model"] for r in rows] == ["draft", "policy"]  # the family's order
    assert [r["params"] for r in rows] == [270_816, 1_869_504]
    for r in rows:
        assert r["n"] == 3 and set(r["by_difficulty"]) == {"1", "2", "3"}  # difficulty i % 6 + 1
        assert r["greedy_accuracy"] == pytest.approx(
            sum(r["by_difficulty"].values()) / 3)  # one problem per difficulty


def test_family_eval_checks_every_member_before_any_runs(tmp_path) -> None:
    with pytest.raises(InvalidParameterError) as bad:
        family_greedy(("draft", "policy-xl"))
    assert bad.value.param == "model"
    with pytest.raises(ModelLoadError, match="policy-s.*--only policy-s"):
        family_greedy(("policy-s",), root=tmp_path)
