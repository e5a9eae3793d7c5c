"""Composition (scripted): self-consistency over best-of-4 groups from ONE underlying call."""

from __future__ import annotations

from metagen.generators.base import Generator
from metagen.generators.mock import MockGenerator
from metagen.strategies import BestOfN, StrategyGenerator, best_of_n, self_consistency
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import PARAMS, TableReward


def _scripted():
    # 3 groups of 4: the best of each group (by reward) answers 2, 1, 2
    outs = ["g0 #### 1", "g0 #### 2", "g0 #### 3", "g0 #### 1",
            "g1 #### 2", "g1 #### 1", "g1 #### 2", "g1 #### 2",
            "g2 #### 2", "g2 #### 3", "g2 #### 3", "g2 #### 3"]
    reward = {o: 0.1 for o in outs}
    reward.update({"g0 #### 2": 0.9, "g1 #### 1": 0.8, "g2 #### 2": 0.7})
    return MockGenerator(outs), TableReward(reward)


def test_scripted_self_consistency_over_best_of_4_groups():
    gen, rm = _scripted()
    inner = StrategyGenerator(gen, BestOfN(rm), group=4)
    assert isinstance(inner, Generator)
    res = self_consistency(inner, "Q", n=3, extract=last_int, match=same, params=PARAMS)
    assert [c.text for c in res.candidates] == ["g0 #### 2", "g1 #### 1", "g2 #### 2"]
    assert res.trace["answer"] == "2" and res.text == "g0 #### 2"
    assert gen.num_calls == 1 and gen.calls[0].params.n == 12
    assert len(rm.calls) == 1 and len(rm.calls[0][1]) == 12
    assert res.usage.generated_tokens == gen.usage.generated_tokens
    assert res.usage.scorer_calls == 1


def test_scripted_failed_groups_become_failed_samples():
    gen, rm = _scripted()
    gen = MockGenerator([f"x #### {j}" for j in range(8)],
                        fault=lambda p, j, c: "timeout" if j < 4 else None)
    inner = StrategyGenerator(gen, BestOfN(lambda p, c: 1.0), group=4)
    res = best_of_n(inner, "Q", n=2, reward=lambda p, c: 1.0, params=PARAMS)
    assert res.failures == {"insufficient_samples": 1} and res.text == "x #### 4"


def test_scripted_traces_are_json_serialisable():
    import json

    from metagen.strategies import mbr, rejection_sampling, weighted_vote
    outs = ["a #### 1", "b #### 2", "c #### 2", "d #### 1"]
    kw = {"extract": last_int, "match": same, "params": PARAMS}
    results = [
        self_consistency(MockGenerator(outs), ["Q1", "Q2"], n=4, **kw)[0],
        weighted_vote(MockGenerator(outs), "Q", n=4, reward=lambda p, c: 0.5, **kw),
        best_of_n(MockGenerator(outs), "Q", n=4, reward=lambda p, c: 1.0, params=PARAMS),
        mbr(MockGenerator(outs), "Q", n=4, utility="chrf", method="prune", schedule=(2,),
            params=PARAMS),
        rejection_sampling(MockGenerator(outs), "Q", lambda p, c: "2" in c, params=PARAMS),
    ]
    for r in results:
        json.dumps(r.trace)
        json.dumps(r.usage.to_dict())
