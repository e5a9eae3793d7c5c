"""Beam search and speculative decoding reach every layer: ``metagen generate --num-beams``
equals transformers' beam search, ``--speculative-model`` / ``--prompt-lookup`` equal plain
greedy, :class:`BeamSearchGenerator` is a Generator over the local and hf backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from metagen.cli import main
from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator
from metagen.generators.beam import BeamSearchGenerator
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

TESTBED = Path(__file__).resolve().parents[2] / "metagen" / "testbed" / "models"


def run_json(capsys, *argv: str) -> dict:
    code = main(["generate", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_cli_num_beams_equals_transformers_beam_search(capsys, stories_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    doc = run_json(capsys, str(stories_path), "Once upon a time", "--num-beams", "4",
                   "--max-tokens", "30")
    tok = AutoTokenizer.from_pretrained(stories_path)
    hf = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()
    ids = tok("Once upon a time", return_tensors="pt").input_ids
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), num_beams=4, max_new_tokens=30,
                      do_sample=False, output_scores=True, return_dict_in_generate=True)
    (comp,) = doc["completions"]
    gen = ref.sequences[0, ids.shape[1]:].tolist()
    assert comp["token_ids"] == gen[:len(comp["token_ids"])]
    assert comp["cumulative_logprob"] == pytest.approx(ref.sequences_scores[0].item(),
                                                       abs=FLOAT_LOGPROB_TOL)
    assert doc["beam"]["num_beams"] == 4 and doc["backend"] == "local"


@pytest.mark.parametrize("flags", [["--speculative-model", str(TESTBED / "draft")],
                                   ["--speculative-model", str(TESTBED / "draft"),
                                    "--speculative-quantization", "int8"],
                                   ["--prompt-lookup", "3", "--num-speculative-tokens", "3"]])
def test_cli_speculative_equals_plain_greedy(capsys, flags) -> None:
    prompt = "Question: Sam has 12 apples and buys 7 more. How many apples does Sam have?\n"
    args = [str(TESTBED / "policy"), prompt, "--temperature", "0", "--max-tokens", "48"]
    plain = run_json(capsys, *args)
    spec = run_json(capsys, *args, *flags)
    assert spec["completions"][0]["token_ids"] == plain["completions"][0]["token_ids"]
    assert spec["completions"][0]["text"] == plain["completions"][0]["text"]


def test_cli_speculative_quantization_needs_a_draft_model(capsys) -> None:
    code = main(["generate", str(TESTBED / "policy"), "x", "--prompt-lookup", "3",
                 "--speculative-quantization", "int8"])
    assert code != 0 and "speculative_quantization" in capsys.readouterr().err


def test_cli_beam_flags_need_num_beams(capsys, stories_path) -> None:
    code = main(["generate", str(stories_path), "x", "--diversity-penalty", "1.0"])
    assert code != 0 and "num-beams" in capsys.readouterr().err.replace("_", "-")


def test_beam_search_generator_is_a_generator_on_both_backends(stories_path) -> None:
    from metagen.generators.hf import HFGenerator
    from metagen.generators.local import LocalGenerator

    local = BeamSearchGenerator(LocalGenerator.from_pretrained(stories_path, device="cpu"), 4)
    hf = BeamSearchGenerator(HFGenerator.from_pretrained(stories_path), 4)
    assert isinstance(local, Generator) and isinstance(hf, Generator)
    params = SamplingParams(n=3, max_tokens=20)
    a = local.generate(["Tom had a big", "Once upon a time"], params)
    b = hf.generate(["Tom had a big", "Once upon a time"], params)
    for ca, cb in zip(a, b):
        assert [c.token_ids for c in ca] == [c.token_ids for c in cb] and len(ca) == 3
        assert [c.text for c in ca] == [c.text for c in cb]
        assert [c.cumulative_logprob for c in ca] == pytest.approx(
            [c.cumulative_logprob for c in cb], abs=FLOAT_LOGPROB_TOL)
    assert local.usage.calls == 1 and local.usage.generated_tokens > 0
    with pytest.raises(InvalidParameterError, match="num_return_sequences"):
        local.generate(["x y"], SamplingParams(n=5, max_tokens=5))
    with pytest.raises(InvalidParameterError, match="top_p"):
        local.generate(["x y"], SamplingParams(top_p=0.5, max_tokens=5))
    with pytest.raises(InvalidParameterError, match="num_beam_groups"):
        BeamSearchGenerator(hf.generator, 4, num_beam_groups=2,
                            diversity_penalty=1.0).generate(["x y"], SamplingParams())
    diverse = BeamSearchGenerator(local.generator, 4, num_beam_groups=2, diversity_penalty=2.0)
    assert len({c.token_ids for c in diverse.generate(["Tom had"], params)[0]}) == 3
