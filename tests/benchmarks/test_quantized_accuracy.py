"""``benchmarks.quantized_accuracy``: McNemar's exact p-value on golden counts, the paired
comparison over real ``metagen eval testbed`` runs (the testbed policy, float32 and int8, a few
problems) against what the runs' own results say, and the untied copy of the policy that
``--untie`` measures (the same logits as the tied policy in transformers)."""

from __future__ import annotations

import math

import pytest

from benchmarks.quantized_accuracy import MODELS, compare_runs, mcnemar_exact, run_eval, untied_copy
from metagen.eval.store import RunStore


@pytest.mark.parametrize(("a", "b", "p"), [
    (0, 0, 1.0), (2, 0, 0.5), (4, 0, 0.125), (1, 3, 0.625), (0, 10, 2 / 1024),
    (5, 5, 1.0), (3, 12, 2 * (1 + 15 + 105 + 455) / 2 ** 15)])
def test_mcnemar_exact_golden_values_and_symmetry(a, b, p):
    assert mcnemar_exact(a, b) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(b, a) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_rejects_negative_counts():
    with pytest.raises(ValueError, match="discordant counts"):
        mcnemar_exact(-1, 3)


def test_the_untied_copy_is_the_policy_with_its_head_apart(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from metagen.engine.models import load_model
    from metagen.engine.models.int4 import Int4Weight

    dst = untied_copy(MODELS / "policy", tmp_path / "untied")
    tied = AutoModelForCausalLM.from_pretrained(MODELS / "policy").eval()
    untied = AutoModelForCausalLM.from_pretrained(dst).eval()
    assert not untied.config.tie_word_embeddings
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[1, 40, 41, 42, 17, 30, 50]])
    with torch.no_grad():  # the same weights through the same F.linear: the same bits
        assert torch.equal(tied(ids).logits, untied(ids).logits)
    assert isinstance(load_model(dst, quantization="int4-all").lm_head, Int4Weight)
    stamp = (dst / "model.safetensors").stat().st_mtime_ns
    assert untied_copy(MODELS / "policy", dst) == dst  # written once
    assert (dst / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="already untied"):
        untied_copy(dst, tmp_path / "again")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("qacc")
    return {(kind, q): run_eval(out, kind, q, problems=6, max_tokens=48)
            for kind in ("greedy", "bon") for q in (None, "int8")}


@pytest.mark.parametrize("kind", ["greedy", "bon"])
def test_paired_comparison_agrees_with_each_runs_own_accuracy(runs, kind):
    with RunStore(runs[(kind, None)] / "run.sqlite") as a, \
            RunStore(runs[(kind, "int8")] / "run.sqlite") as b:
        cmp = compare_runs(a, b)
        own = {}
        for store, side in ((a, "base"), (b, "other")):
            for _, strategy, n, metric, value in store.results():
                if metric == "accuracy":
                    own.setdefault((strategy, n, side), []).append(value)
    expected = {"greedy": {("greedy", 1)},
                "bon": {(s, n) for s in ("best_of_n", "self_consistency") for n in (1, 16)}}
    assert {(r["strategy"], r["n"]) for r in cmp["rows"]} == expected[kind]
    for r in cmp["rows"]:
        assert r["problems"] == 6
        for side in ("base", "other"):
            vals = own[(r["strategy"], r["n"], side)]
            assert r[side] == pytest.approx(math.fsum(vals) / len(vals))
        assert r["difference"] == pytest.approx(r["other"] - r["base"])
        assert r["strategy"] != "greedy" or r["mcnemar_p"] is not None  # one answer: 0 or 1
        if r["mcnemar_p"] is not None:  # right or wrong per problem
            assert (r["right_only_in_other"] - r["right_only_in_base"]) / 6 == \
                pytest.approx(r["difference"])
    assert cmp["samples_compared"] == (6 if kind == "greedy" else 6 * 16)
    assert 0.0 <= cmp["same_text"] <= 1.0


def test_a_run_against_itself_is_all_concordant(runs):
    with RunStore(runs[("bon", "int8")] / "run.sqlite") as a:
        cmp = compare_runs(a, a)
    assert cmp["same_text"] == 1.0
    for r in cmp["rows"]:
        assert r["difference"] == 0.0 and r["difference_stderr"] == 0.0
        assert r["mcnemar_p"] in (None, 1.0)
