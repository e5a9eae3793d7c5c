"""LM judge with a scripted scoring generator (scripted: log-probs are given, not computed)."""

from __future__ import annotations

import math

import pytest

from metagen.errors import CapabilityError
from metagen.generators.base import Capabilities
from metagen.scorers import LMJudge
from metagen.types import Usage


class ScriptedScorer:
    """Scripted ScoringGenerator: log p(option | prompt) from a table keyed by a word in prompt."""

    def __init__(self, table, caps=Capabilities(prompt_scoring=True)):
        self.table, self.capabilities, self.calls = table, caps, []
        self._usage = Usage()

    @property
    def usage(self):
        return self._usage

    def generate(self, prompts, params):
        raise AssertionError("a judge must not generate")

    def score(self, prompts, continuations):
        self.calls.append((list(prompts), [list(c) for c in continuations]))
        self._usage += Usage(prompt_tokens=10 * len(prompts), calls=1, generator_flops=5.0)
        return [[self.table[next(k for k in self.table if k in p)][c] for c in conts]
                for p, conts in zip(prompts, continuations)]


TABLE = {"right": {" Yes": math.log(0.6), " No": math.log(0.2)},
         "wrong": {" Yes": math.log(0.1), " No": math.log(0.7)}}


def test_judge_normalised_and_raw_p_yes_in_one_call():
    gen = ScriptedScorer(TABLE)
    judge = LMJudge(gen)
    assert judge.score(["q "] * 2, ["right", "wrong"]) == pytest.approx([0.75, 0.125])
    assert len(gen.calls) == 1 and gen.calls[0][1] == [[" Yes", " No"]] * 2
    assert "Is the answer above correct?" in gen.calls[0][0][0]
    raw = LMJudge(gen, normalize=False).score(["q "], ["right"])
    assert raw == pytest.approx([0.6])
    assert judge.usage.scorer_calls == 1 and judge.usage.scorer_tokens == 20
    assert judge.usage.scorer_flops == 5.0


def test_judge_needs_prompt_scoring_before_any_call():
    gen = ScriptedScorer(TABLE, caps=Capabilities(prompt_scoring=False))
    with pytest.raises(CapabilityError, match="prompt_scoring"):
        LMJudge(gen)
    assert gen.calls == []
