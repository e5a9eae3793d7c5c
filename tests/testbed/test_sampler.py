"""The batched KV-cache sampler against transformers' generate (greedy), batch invariance,
and seeded reproducibility, on a small random-weight Llama with the testbed tokenizer."""

import pytest
import torch

from metagen.testbed.modeling import ArchConfig
from metagen.testbed.problems import format_prompt, make_problems
from metagen.testbed.sampler import sample
from metagen.testbed.tokenizer import Codec


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = ArchConfig(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128).llama_config()
    return LlamaForCausalLM(cfg).eval()


def test_greedy_matches_transformers_generate(tiny):
    codec = Codec()
    prompts = [format_prompt(p) for p in make_problems("test", 3)]
    ours = sample(tiny, prompts, temperature=0.0, max_new_tokens=12)
    for p, o in zip(prompts, ours):
        ids = torch.tensor([codec.encode(p)])
        ref = tiny.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                            do_sample=False, eos_token_id=codec.eos, pad_token_id=codec.pad)
        assert o == codec.decode(ref[0, ids.shape[1]:].tolist())


def test_batched_equals_unbatched_and_seeded(tiny):
    prompts = [format_prompt(p) for p in make_problems("test", 4)]
    batched = sample(tiny, prompts, temperature=0.0, max_new_tokens=10)
    single = [sample(tiny, [p], temperature=0.0, max_new_tokens=10)[0] for p in prompts]
    assert batched == single
    a = sample(tiny, prompts, temperature=1.0, max_new_tokens=10, seed=3)
    b = sample(tiny, prompts, temperature=1.0, max_new_tokens=10, seed=3)
    assert a == b
