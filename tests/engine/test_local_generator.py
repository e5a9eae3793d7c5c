"""LocalGenerator implements the Generator protocol over the engine and agrees with HFGenerator."""

from __future__ import annotations

import json

import pytest

from metagen.errors import InvalidPromptError, ModelLoadError
from metagen.generators.base import Generator, ScoringGenerator
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL


@pytest.fixture(scope="module")
def local(stories_engine_factory):
    return LocalGenerator(stories_engine_factory(block_size=4))


@pytest.fixture(scope="module")
def hf(stories_path):
    from metagen.generators.hf import HFGenerator

    return HFGenerator.from_pretrained(stories_path)


PROMPTS = ["Once upon a time", "The little dog"]


def test_protocol_and_capabilities(local):
    assert isinstance(local, Generator) and isinstance(local, ScoringGenerator)
    caps = local.capabilities
    assert caps.logprobs and caps.prompt_scoring and caps.prefix_cache and caps.seeded


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.0, max_tokens=40),
    SamplingParams(temperature=0.8, top_p=0.9, n=3, seed=5, max_tokens=20, logprobs=2),
    SamplingParams(temperature=0.0, max_tokens=30, stop=["park", "Lily."], min_tokens=3),
])
def test_generate_equals_hf_generator(local, hf, params):
    ours = local.generate(PROMPTS, params)
    ref = hf.generate(PROMPTS, params)
    for row_a, row_b in zip(ours, ref):
        assert len(row_a) == params.n
        for a, b in zip(row_a, row_b):
            assert (a.text, a.token_ids, a.finish_reason, a.stop_reason) == \
                (b.text, b.token_ids, b.finish_reason, b.stop_reason)
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < FLOAT_LOGPROB_TOL
            if params.logprobs:
                assert [sorted(t) for t in a.top_logprobs] == [sorted(t) for t in b.top_logprobs]


def test_usage_counts_prefill_cache_and_generation(stories_engine_factory):
    gen = LocalGenerator(stories_engine_factory(block_size=4))
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play"
    params = SamplingParams(temperature=0.7, n=4, seed=1, max_tokens=10, ignore_eos=True)
    gen.generate([prompt], params)
    first = gen.usage
    n_prompt = len(gen.tokenizer(prompt)["input_ids"])
    assert first.prompt_tokens == n_prompt and first.cached_prompt_tokens == 0
    assert first.generated_tokens == 40 and first.calls == 1
    assert first.generator_flops > 2 * gen.engine.model.cfg.num_params * (n_prompt + 36)
    gen.generate([prompt], params)
    second = gen.usage - first
    assert second.cached_prompt_tokens == (n_prompt - 1) // 4 * 4  # whole blocks, one recomputed
    assert second.prefilled_tokens == n_prompt - second.cached_prompt_tokens


def test_stream_never_leaks_a_stop_string(local):
    params = SamplingParams(temperature=0.0, max_tokens=60, stop=["the park", "Lily."])
    full = local.generate(["Once upon a time"], params)[0][0]
    assert full.finish_reason == "stop"
    seen = ""
    for delta in local.stream("Once upon a time", params):
        seen += delta
        assert full.text.startswith(seen)  # nothing emitted is ever taken back
    assert seen == full.text and "Lily." not in seen


def test_score_equals_hf_score(local, hf):
    conts = [[", there was a girl", " the end", ""], [" barked", " sat on the mat"]]
    ours = local.score(PROMPTS, conts)
    ref = hf.score(PROMPTS, conts)
    for a, b in zip(ours, ref):
        assert all(abs(x - y) < FLOAT_LOGPROB_TOL for x, y in zip(a, b))
    assert local.usage.scorer_calls >= 1


def test_numerical_error_marks_only_that_completion(local):
    bad_ids = local.tokenizer("The little dog")["input_ids"]

    def hook(logits, states):
        for i, st in enumerate(states):
            if st.prompt_ids == bad_ids:
                logits[i] = float("nan")
        return logits

    local.logits_hook = hook
    try:
        out = local.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=10))
    finally:
        local.logits_hook = None
    assert out[0][0].finish_reason == "length"
    assert out[1][0].finish_reason == "error" and out[1][0].stop_reason == "numerical_error"


def test_bad_prompts_and_unsupported_architecture(local, tmp_path):
    with pytest.raises(InvalidPromptError):
        local.generate([""], SamplingParams())
    with pytest.raises(InvalidPromptError, match="maximum context length"):
        local.generate(["Once " * 600], SamplingParams(max_tokens=5))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel.*HFGenerator"):
        LocalGenerator.from_pretrained(tmp_path)


def test_closing_a_stream_early_aborts_its_request(stories_engine_factory):
    gen = LocalGenerator(stories_engine_factory(prefix_cache=False))
    it = gen.stream("Once upon a time", SamplingParams(temperature=0.0, max_tokens=50))
    assert next(it)
    it.close()  # the client went away (S9)
    # the loop runs the abort before this call (submissions are applied in order)
    assert gen.loop.call(lambda e: (e.has_unfinished(), len(e.requests), e.blocks.num_free)) \
        == (False, 0, gen.engine.blocks.num_blocks)
    assert gen.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_tokens=5))[0][0].text


def test_a_prompt_that_fits_alone_but_not_with_max_tokens_is_the_prompts_error_as_in_hf(
        local, hf):
    """A 292-token GSM8K prompt with max_tokens=256 on a 512-token model: both backends refuse
    the prompt (``InvalidPromptError`` naming ``prompt``, with both numbers), so a caller of many
    prompts (the eval runner) fails that item alone; one token less fits."""
    prompt = "Once upon a time"
    n = len(hf.tokenizer(prompt)["input_ids"])
    for gen in (local, hf):
        with pytest.raises(InvalidPromptError) as info:
            gen.generate([prompt], SamplingParams(max_tokens=512 - n + 1))
        assert info.value.param == "prompt"
        assert f"{n} tokens" in str(info.value) and "512" in str(info.value)
        out = gen.generate([prompt], SamplingParams(max_tokens=512 - n, temperature=0.0))
        assert out[0][0].finish_reason in ("length", "stop")
