"""Constrained decoding on HFGenerator: outputs in the language, the same constrained greedy
tokens as the engine, V19 before any forward pass."""

from __future__ import annotations

import re

import pytest

from metagen.constraints import INSTALL_HINT
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

pytest.importorskip("llguidance", reason=INSTALL_HINT)

PATTERN = r"(Tom|Lily) (ran|sat|ate)( and (ran|sat|ate)){0,3}\."


def test_hf_constrained_greedy_equals_the_engines(stories_gen, stories_path) -> None:
    from metagen.engine.llm_engine import LLMEngine
    engine = LLMEngine.from_pretrained(stories_path, device="cpu")
    prompt = "Once upon a time"
    for params in (SamplingParams(temperature=0.0, max_tokens=30, regex=PATTERN),
                   SamplingParams(temperature=0.0, max_tokens=30, choice=["a cat", "a dog"])):
        hf = stories_gen.generate([prompt], params)[0][0]
        ids = engine.tokenizer(prompt)["input_ids"]
        ref = engine.generate([ids], params)[0].outputs[0]
        assert hf.token_ids == ref.token_ids and hf.finish_reason == "stop"


def test_hf_n_samples_match_the_regex(stories_gen) -> None:
    params = SamplingParams(n=6, temperature=1.0, seed=3, max_tokens=40, regex=PATTERN)
    texts = [c.text for c in stories_gen.generate(["Once upon a time"], params)[0]]
    assert len(set(texts)) > 1
    assert all(re.fullmatch(PATTERN, t) for t in texts), texts


def test_hf_invalid_constraint_is_refused_before_generating(stories_gen) -> None:
    calls = stories_gen.usage.calls
    with pytest.raises(InvalidParameterError) as info:
        stories_gen.generate(["x"], SamplingParams(regex=r"[^\s\S]"))
    assert info.value.param == "regex" and stories_gen.usage.calls == calls
