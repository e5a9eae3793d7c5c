"""Speculative greedy decoding equals plain greedy on the testbed's trained pair (policy + draft),
on a random-weight pair built so the draft often agrees, and with prompt lookup on problems whose
solutions copy the question's numbers -- with a fixed k and with k chosen adaptively.

The reference is transformers' greedy decoding of the target (for the testbed policy) and the
plain engine's greedy (itself tested against transformers in test_engine_equivalence)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.testbed import format_prompt, make_problems, model_path
from metagen.types import SamplingParams

NEW = 48


def _engine(target: Path, **options) -> LLMEngine:
    return LLMEngine.from_pretrained(target, EngineConfig(device="cpu", num_blocks=256,
                                                          block_size=8, **options),
                                     tokenizer=False)


@pytest.fixture(scope="module")
def testbed_prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path("policy"))
    return [tok(format_prompt(p)).input_ids for p in make_problems("test", 4, seed=3)]


@pytest.fixture(scope="module")
def random_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A random 2-layer target and a draft equal to it plus noise (agrees often, not always)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    target = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # peaky logits: few near-ties for the noise to flip
        for p in target.parameters():
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
    root = tmp_path_factory.mktemp("random_pair")
    target.save_pretrained(root / "target")
    with torch.no_grad():
        for p in target.parameters():
            p.add_(torch.randn_like(p) * 0.3 * p.std())
    target.save_pretrained(root / "draft")
    return root / "target", root / "draft"


def _hf_greedy(folder: Path, prompts: list[list[int]], n: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for ids in prompts:
        x = torch.tensor([ids])
        with torch.no_grad():
            y = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                            max_new_tokens=n, pad_token_id=0)
        out.append(y[0, len(ids):].tolist())
    return out


def _check(target: Path, prompts: list[list[int]], reference: list[list[int]], **spec) -> None:
    eng = _engine(target, **spec)
    out = eng.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW))
    assert [list(o.outputs[0].token_ids) for o in out] == reference
    stats = eng.speculator.stats
    assert stats.proposed > 0 and stats.accepted > 0
    # a request's first token is sampled after its prefill, the others in rounds or (prompt
    # lookup without a match) in plain steps
    assert stats.emitted <= sum(len(r) for r in reference) - len(prompts)
    eng.check_integrity()


@pytest.mark.parametrize("adaptive", [False, True])
def test_testbed_pair_greedy_equals_transformers(testbed_prompts, adaptive: bool) -> None:
    ref = _hf_greedy(model_path("policy"), testbed_prompts, NEW)
    assert all(len(r) < NEW for r in ref)  # the policy ends its solutions: EOS is exercised
    _check(model_path("policy"), testbed_prompts, ref, speculative_model=str(model_path("draft")),
           num_speculative_tokens=4, adaptive_speculation=adaptive)
    _check(model_path("policy"), testbed_prompts, ref, prompt_lookup=3,
           num_speculative_tokens=5, adaptive_speculation=adaptive)


def test_int8_draft_greedy_equals_transformers(testbed_prompts) -> None:
    """A draft quantized to int8 drafts other tokens (sometimes), never other output: the
    float32 target verifies them."""
    ref = _hf_greedy(model_path("policy"), testbed_prompts, NEW)
    _check(model_path("policy"), testbed_prompts, ref, speculative_model=str(model_path("draft")),
           speculative_quantization="int8", num_speculative_tokens=3)


@pytest.mark.parametrize("adaptive", [False, True])
def test_random_pair_greedy_equals_plain(random_pair, adaptive: bool) -> None:
    target, draft = random_pair
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 384, (n,), generator=gen).tolist() for n in (5, 23, 40)]
    plain = _engine(target)
    plain.eos_token_ids = ()
    ref = [list(o.outputs[0].token_ids) for o in plain.generate(
        prompts, SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True))]
    for spec in ({"speculative_model": str(draft)}, {"prompt_lookup": 2},
                 {"speculative_model": str(draft), "speculative_quantization": "int8"}):
        eng = _engine(target, num_speculative_tokens=6, adaptive_speculation=adaptive, **spec)
        eng.eos_token_ids = ()
        out = eng.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW,
                                                   ignore_eos=True))
        assert [list(o.outputs[0].token_ids) for o in out] == ref
        st = eng.speculator.stats
        if eng.speculator.adaptive and eng.speculator.probe_every is None:
            # the draft engine's step costs about the target's on these tiny models: adaptive k
            # sees that no round could pay, even at acceptance 1, and never drafts
            assert st.rounds == 0 and "prompt_lookup" not in spec
        else:
            assert 0 < st.accepted < st.proposed or "prompt_lookup" in spec
        eng.check_integrity()
