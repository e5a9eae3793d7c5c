"""SamplingParams validation (bad sampling input, rows V1-V25) and Usage arithmetic."""

from __future__ import annotations

import math

import pytest

from metagen import InvalidParameterError, SamplingParams, Usage


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", "0.7"), ("temperature", True),                        # V1
    ("top_p", 0), ("top_p", -0.1), ("top_p", 1.0000001), ("top_p", 1.5),
    ("top_p", math.nan),                                                  # V4
    ("top_k", -2), ("top_k", 0.01), ("top_k", 2.5),                       # V5
    ("min_p", -0.1), ("min_p", 1.1), ("presence_penalty", 2.5),
    ("frequency_penalty", -3), ("repetition_penalty", 0),                 # V6
    ("n", 0), ("n", -1), ("n", 1.5), ("n", 10**6),                        # V7
    ("max_tokens", 0), ("max_tokens", -1), ("max_tokens", -186),
    ("max_tokens", 10**12),                                               # V9
    ("stop", ""), ("stop", [""]), ("stop", ["x"] * 10_000),
    ("stop", ["x" * 1_000_000]),                                          # V11
    ("logprobs", -2), ("logprobs", 10**6),                                # V13
    ("logit_bias", {"abc": 1.0}), ("logit_bias", {-1: 1.0}),              # V14
    ("allowed_token_ids", []), ("stop_token_ids", [-1]),                  # V15
    ("seed", 2**64), ("seed", "abc"), ("seed", -2),                       # V23
    ("typical_p", 0.0), ("epsilon_cutoff", 1.0), ("eta_cutoff", -0.5),
    ("mirostat_tau", 0.0), ("no_repeat_ngram_size", -1),
])
def test_bad_values_raise_naming_the_field(field, value):
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(**{field: value})
    assert info.value.param == field
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)
    assert len(str(info.value)) < 1000  # bounded message (V25)


def test_greedy_with_n_greater_than_one_is_rejected():  # V8
    with pytest.raises(InvalidParameterError, match="n"):
        SamplingParams(n=4, temperature=0)


def test_min_tokens_above_max_tokens_is_rejected():  # V10
    with pytest.raises(InvalidParameterError, match="min_tokens"):
        SamplingParams(min_tokens=10, max_tokens=5)


def test_work_cap_is_enforced():  # V7
    with pytest.raises(InvalidParameterError, match="n"):
        SamplingParams(n=1000, max_tokens=100_000, temperature=1.0)


def test_accepted_values_and_normalisation():
    p = SamplingParams(temperature=0, top_p=1.0, top_k=-1, seed=-1, stop="END",
                       logit_bias={5: 1e9, 6: -1e9})
    assert p.is_greedy and p.seed is None and p.stop == ("END",)
    assert p.logit_bias == {5: 100.0, 6: -100.0}  # V14: clamped
    assert SamplingParams(temperature=1e-8).is_greedy  # V3: documented greedy threshold
    assert not SamplingParams(temperature=0.009).is_greedy
    assert SamplingParams(top_k=10**9).top_k == 10**9  # V5: clamped to the vocab by the backend


def test_usage_adds_and_subtracts():
    a = Usage(prompt_tokens=3, generated_tokens=5, calls=1, generator_flops=10.0)
    b = Usage(prompt_tokens=1, cached_prompt_tokens=1, generated_tokens=2, calls=1)
    total = a + b
    assert total.prompt_tokens == 4 and total.generated_tokens == 7 and total.calls == 2
    assert total.cached_prompt_tokens == 1 and total.prefilled_tokens == 3
    assert total - b == a
