"""DeepConf: golden values of the confidence measures, and online vs offline on a scripted
(MockGenerator) step generator whose traces carry top-k log-probabilities."""

from __future__ import annotations

import random

import pytest

from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.mock import MockGenerator
from metagen.strategies import deepconf
from metagen.strategies.trace_confidence import (
    confidence_threshold,
    lowest_group_confidence,
    stop_position,
    token_confidence,
)
from metagen.types import Completion, SamplingParams

SURE = {1: 0.0, 2: -10.0}      # token confidence 5.0 (top-2)
UNSURE = {3: -0.7, 4: -0.7}    # token confidence 0.7
PARAMS = SamplingParams(temperature=1.0, seed=5)


def test_token_confidence_golden_values():
    top = {1: -0.1, 2: -2.0, 3: -3.0}
    assert token_confidence(top, 2) == pytest.approx(1.05)
    assert token_confidence(top) == pytest.approx(5.1 / 3)
    assert token_confidence(SURE, 2) == 5.0
    with pytest.raises(InvalidParameterError, match="top_logprobs"):
        token_confidence(top, 4)


def test_stop_position_golden_values_and_brute_force():
    confs = [5.0, 5.0, 1.0, 1.0, 5.0]
    assert stop_position(confs, 2, 2.0) == 4          # window [1, 1] at t = 3
    assert stop_position(confs, 2, 3.5) == 3          # window [5, 1] at t = 2
    assert stop_position(confs, 2, 2.0, start=4) is None
    assert stop_position(confs[:1], 2, 10.0) is None  # no complete window yet
    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.uniform(0, 5) for _ in range(rng.randint(0, 12))]
        w, thr, start = rng.randint(1, 4), rng.uniform(1, 4), rng.randint(0, 6)
        ref = next((t + 1 for t in range(max(start, w - 1), len(xs))
                    if sum(xs[t - w + 1:t + 1]) / w < thr), None)
        assert stop_position(xs, w, thr, start) == ref
        if xs:
            means = [sum(xs[i:i + w]) / w for i in range(len(xs) - w + 1)]
            assert lowest_group_confidence(xs, w) == pytest.approx(
                min(means) if means else sum(xs) / len(xs))


def test_confidence_threshold_golden_percentiles():
    assert confidence_threshold([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(1.3)
    assert confidence_threshold([1.0, 2.0, 3.0, 4.0], 0.1) == pytest.approx(3.7)
    assert confidence_threshold([4.0, 1.0], 1.0) == 1.0
    with pytest.raises(InvalidParameterError, match="keep"):
        confidence_threshold([1.0], 0.0)


def _step(text, top, final=False, tokens=2):
    return Completion(text=text, token_ids=(7,) * tokens, logprobs=(0.0,) * tokens,
                      cumulative_logprob=0.0, top_logprobs=(top,) * tokens,
                      finish_reason="stop", stop_reason=None if final else "\n")


def _script(prompt, j):
    """Even samples start confidently and answer 1; odd ones hesitate, then answer 2."""
    if prompt == "Q":
        return _step("good", SURE) if j % 2 == 0 else _step("bad", UNSURE)
    return _step("#### 1" if prompt.endswith("good\n") else "#### 2", SURE, final=True,
                 tokens=3)


def test_scripted_online_stops_unconfident_traces_and_agrees_with_offline():
    online_gen, offline_gen = MockGenerator(_script), MockGenerator(_script)
    kw = {"n": 8, "keep": 0.5, "window": 2, "top_k": 2, "params": PARAMS}
    online = deepconf(online_gen, ["Q"], warmup=4, **kw)[0]
    offline = deepconf(offline_gen, ["Q"], warmup=8, **kw)[0]
    # threshold: the median of the warm-up lows [5, 0.7, 5, 0.7]
    assert online.trace["threshold"] == pytest.approx(2.85) == offline.trace["threshold"]
    assert online.trace["stopped"] == [None, 2, None, 2]     # bad traces stop after 2 tokens
    assert online.text == offline.text == "good\n#### 1"
    assert online.trace["votes"] == offline.trace["votes"] == {"1": 20.0}
    # warm-up 4 x 5 tokens; online: 2 good x 5 + 2 stopped x 2; offline 8 x 5
    assert online.usage.generated_tokens == 34 and offline.usage.generated_tokens == 40
    assert all(c.params.logprobs == 2 for c in online_gen.calls)


def test_scripted_consensus_skips_online_waves():
    gen = MockGenerator(_script)
    res = deepconf(gen, ["Q"], n=8, warmup=4, keep=0.5, window=2, top_k=2, wave=1,
                   consensus=0.95, params=PARAMS)[0]
    assert res.trace["n"] == 4 and res.usage.generated_tokens == 20
    assert res.trace["answer"] == "1"


def test_scripted_backend_without_top_logprobs_is_a_capability_error():
    gen = MockGenerator(["#### 1"])
    with pytest.raises(CapabilityError, match="top-k"):
        deepconf(gen, ["Q"], n=2, warmup=1, params=PARAMS)


@pytest.mark.parametrize("kw,name", [({"warmup": 9}, "warmup"), ({"keep": 1.5}, "keep"),
                                     ({"window": 0}, "window"), ({"top_k": 0}, "top_k"),
                                     ({"consensus": 1.0}, "consensus")])
def test_bad_options_are_refused_before_any_call(kw, name):
    gen = MockGenerator(_script)
    with pytest.raises(InvalidParameterError, match=name):
        deepconf(gen, ["Q"], **{"n": 8, **kw})
    assert gen.num_calls == 0
