"""Answer keys: grouping by canonical form, typed errors, and GSM8K's key voting exactly like
the default extractor and match (scripted MockGenerator)."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.generators.mock import MockGenerator
from metagen.scorers.utilities import AnswerMatchUtility
from metagen.strategies import MBR, SelfConsistency, WeightedVote, self_consistency
from metagen.tasks.answer_key import AnswerKey, group_by_canonical
from metagen.tasks.gsm8k import GSM8K_ANSWER_KEY
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_tokens=64)


def test_scripted_gsm8k_key_votes_like_the_default():
    outs = ["#### 7", "#### 5", "no idea", "x #### 05", "#### 7 then 5", "$1,000", "1000.0"]
    default = self_consistency(MockGenerator(outs), "Q", n=7, params=PARAMS)
    keyed = self_consistency(MockGenerator(outs), "Q", n=7, params=PARAMS,
                             answer_key=GSM8K_ANSWER_KEY)
    assert keyed.trace == default.trace and keyed.scores == default.scores


def test_grouping_calls_match_only_for_new_canonical_forms():
    calls: list[tuple[str, str]] = []

    def match(a: str, b: str) -> bool:
        calls.append((a, b))
        return a.lower() == b.lower()

    ids = group_by_canonical(["A", "a", "A", None, "b", "a", "B"], match, canonical=str)
    assert ids == [0, 0, 0, None, 1, 0, 1]
    # "a" vs rep "A"; "b" vs "A"; "B" vs "A" then "b": repeated forms cost nothing
    assert calls == [("a", "A"), ("b", "A"), ("B", "A"), ("B", "b")]


def test_answer_key_conflicts_are_typed_errors():
    with pytest.raises(InvalidParameterError, match="answer_key"):
        SelfConsistency(extract=str, answer_key=GSM8K_ANSWER_KEY)
    with pytest.raises(InvalidParameterError, match="answer_key"):
        WeightedVote(match=lambda a, b: a == b, answer_key=GSM8K_ANSWER_KEY)
    with pytest.raises(InvalidParameterError, match="answer_key"):
        SelfConsistency(answer_key="gsm8k")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="answer_key"):
        AnswerMatchUtility(extract=str, answer_key=GSM8K_ANSWER_KEY)
    # a task's answer key groups answers for MBR's answer utility; the text utilities ignore it
    # (so a surface can hand every strategy the task's key)
    assert type(MBR("chrf", answer_key=GSM8K_ANSWER_KEY).utility).__name__ == "ChrFUtility"
    with pytest.raises(InvalidParameterError, match="match"):
        AnswerKey("k", str, "not callable")  # type: ignore[arg-type]
