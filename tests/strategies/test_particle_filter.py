"""Particle filtering: golden values of the weights, ESS and systematic resampling, and the
search on scripted step generators and PRMs (resampling moves compute to the likely steps)."""

from __future__ import annotations

import json
import math
import random

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError
from metagen.strategies import particle_filtering
from metagen.strategies.resampling import (
    effective_sample_size,
    softmax_weights,
    systematic_resample,
)
from metagen.types import SamplingParams

SEEDED = SamplingParams(temperature=1.0, seed=3)
TABLE = {"0": 0.8, "1": 0.9, "2": 0.3, "3": 0.2, "00": 0.95, "10": 0.2, "11": 0.6}


def test_softmax_weights_and_ess_golden_values():
    assert softmax_weights([0.0, 1.0]) == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)])
    assert softmax_weights([5.0, 5.0, 5.0], 0.01) == pytest.approx([1 / 3] * 3)
    assert softmax_weights([1000.0, 0.0], 1.0) == pytest.approx([1.0, 0.0])  # no overflow
    assert effective_sample_size([0.25] * 4) == pytest.approx(4.0)
    assert effective_sample_size([1.0, 0.0, 0.0]) == pytest.approx(1.0)
    assert effective_sample_size([0.5, 0.5, 0.0, 0.0]) == pytest.approx(2.0)
    assert effective_sample_size([2.0, 2.0]) == pytest.approx(2.0)  # scale-free
    w = softmax_weights([0.8, 0.9, 0.3, 0.2], 0.1)
    assert effective_sample_size(w) == pytest.approx(1.6562244597, rel=1e-9)
    for bad in [{"temperature": 0.0}, {"temperature": float("nan")}]:
        with pytest.raises(InvalidParameterError, match="temperature"):
            softmax_weights([1.0], **bad)


@pytest.mark.parametrize("weights,u,golden", [
    ([0.1, 0.2, 0.3, 0.4], 0.5, [1, 2, 3, 3]),
    ([0.1, 0.2, 0.3, 0.4], 0.0, [0, 1, 2, 3]),
    ([0.7, 0.1, 0.1, 0.1], 0.99, [0, 0, 1, 3]),
    ([0.0, 0.0, 1.0], 0.3, [2, 2, 2]),
    ([1.0, 1.0, 2.0, 0.0], 0.2, [0, 1, 2, 2]),   # unnormalised weights
])
def test_systematic_resample_golden_values(weights, u, golden):
    assert systematic_resample(weights, u) == golden


def test_systematic_resample_copies_are_floor_or_ceil_of_n_w():
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(1, 9)
        w = [rng.random() for _ in range(n)]
        idx = systematic_resample(w, rng.random())
        assert len(idx) == n and idx == sorted(idx)
        for i, wi in enumerate(w):
            expect = n * wi / sum(w)
            assert math.floor(expect) <= idx.count(i) <= math.ceil(expect) + 1e-9


def test_scripted_resampling_moves_particles_to_the_likely_step():
    # the documented per-prompt draws for seed 2: u = 0.0594 (round 0), 0.4464 (round 1)
    rng = random.Random(f"2|{'Q:' + chr(10)!r}")
    u0, u1 = rng.random(), rng.random()
    assert (round(u0, 4), round(u1, 4)) == (0.0594, 0.4464)
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    [res] = particle_filtering(gen, ["Q:\n"], ScriptedPRM(TABLE), particles=4, temperature=0.1,
                               seed=2, params=SEEDED)
    # round 0: 4 first steps from one prefix, scores .8 .9 .3 .2: ESS 1.66 < 2, resampled with
    # u0 to [0, 0, 1, 1]; round 1: two copies of "0" and of "1" share their prefixes (n = 2,
    # different samples); "00" (0.95) takes 0.97 of the weight and u1 puts every copy on it
    assert systematic_resample(softmax_weights([0.8, 0.9, 0.3, 0.2], 0.1), u0) == [0, 0, 1, 1]
    assert [(p, c.n) for p, c in gen.calls] == [(["Q:\n"], 4), (["Q:\n0\n", "Q:\n1\n"], 2)]
    assert res.trace["nodes"] == 1 + 4 + 4
    assert res.trace["resampled"] == [0, 1]
    assert res.trace["ess"][0] == pytest.approx(1.6562244597)
    assert [c.text for c in res.candidates] == ["0\n00 #### 00"] * 4
    assert res.text == "0\n00 #### 00"
    json.dumps(res.trace)


def test_scripted_no_resampling_is_independent_chains():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    [res] = particle_filtering(gen, ["Q:\n"], ScriptedPRM(TABLE), particles=4,
                               temperature=0.1, ess_threshold=0.0, seed=0)
    assert [c.text.split("\n")[1].split()[0] for c in res.candidates] == ["00", "10", "20",
                                                                           "30"]
    assert res.trace["resampled"] == [] and res.text == "0\n00 #### 00"


def test_scripted_seeded_runs_are_reproducible_and_prompts_share_calls():
    def run(seed):
        gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
        prm = ScriptedPRM(lambda prompt, name: 0.1 * len(name) + 0.05 * int(name[-1]))
        res = particle_filtering(gen, ["A:\n", "B:\n"], prm, particles=6, temperature=0.05,
                                 ess_threshold=1.0, seed=seed)
        return gen, [(r.text, [c.text for c in r.candidates], r.trace["resampled"])
                     for r in res]
    gen, first = run(7)
    assert run(7)[1] == first
    assert len(gen.calls) == 3 and gen.calls[0][0] == ["A:\n", "B:\n"]


@pytest.mark.parametrize("kw,name", [({"particles": 0}, "particles"),
                                     ({"temperature": -1.0}, "temperature"),
                                     ({"ess_threshold": 1.5}, "ess_threshold"),
                                     ({"select": "best"}, "select")])
def test_bad_options_are_refused_before_any_call(kw, name):
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    with pytest.raises(InvalidParameterError, match=name):
        particle_filtering(gen, ["Q:\n"], ScriptedPRM(TABLE), **kw)
    assert gen.calls == []
