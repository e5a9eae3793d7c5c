"""Parallel strategies end to end on a real model (stories260K through HFGenerator)."""

from __future__ import annotations

import pytest

from metagen.scorers.chrf import chrf
from metagen.strategies import (
    BestOfN,
    StrategyGenerator,
    best_of_n,
    mbr,
    rejection_sampling,
)
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_tokens=12, seed=7)


@pytest.fixture(scope="module")
def gen(stories_path):
    from metagen.generators.hf import HFGenerator
    return HFGenerator.from_pretrained(stories_path)


def length_reward(prompt: str, text: str) -> float:
    return float(len(text))


def test_best_of_n_one_call_real_tokens_and_reproducible(gen):
    before = gen.usage
    res = best_of_n(gen, "Once upon a time", n=4, reward=length_reward, params=PARAMS)
    spent = gen.usage - before
    assert spent.calls == 1
    assert len(res.candidates) == 4
    assert res.usage.generated_tokens == sum(len(c.token_ids) for c in res.candidates)
    assert res.text == max(res.candidates, key=lambda c: len(c.text)).text
    again = best_of_n(gen, "Once upon a time", n=4, reward=length_reward, params=PARAMS)
    assert [c.text for c in again.candidates] == [c.text for c in res.candidates]


def test_mbr_chrf_over_a_prompt_list_in_one_call(gen):
    before = gen.usage
    res = mbr(gen, ["Once upon a time", "Lily had a"], n=4, utility="chrf", params=PARAMS)
    assert (gen.usage - before).calls == 1 and len(res) == 2
    for r in res:
        texts = [c.text for c in r.candidates]
        want = [sum(chrf(h, x) for x in texts) / len(texts) for h in texts]
        assert r.scores == pytest.approx(want)
    assert sum(r.usage.generated_tokens for r in res) == (gen.usage - before).generated_tokens


def test_composition_and_rejection_on_real_samples(gen):
    inner = StrategyGenerator(gen, BestOfN(length_reward), group=2)
    before = gen.usage
    res = best_of_n(inner, "Once upon a time", n=3, reward=length_reward, params=PARAMS)
    assert (gen.usage - before).calls == 1 and len(res.candidates) == 3
    rs = rejection_sampling(gen, "Once upon a time", lambda p, c: "the" in c, batch=2,
                            max_samples=6, params=PARAMS)
    assert rs.trace["rounds"] <= 3
    assert rs.trace["accepted"] == ("the" in rs.text)
