"""Adaptive self-consistency on the built-in engine (the testbed policy): its rounds are the
requests self-consistency makes, and a prompt's samples do not depend on the run around it.

Seeded samples are the same tokens in any batch and at any prefix-cache state unless two
candidates' probabilities lie within float32 rounding of each other (the engine's batch-
composition guarantee), so sample equality is asserted for all but ``FLIPS`` of them.
"""

from __future__ import annotations

import pytest

from benchmarks.adaptive_samples import BATCH, N, Recorder, runners
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=0.8, seed=3, max_tokens=64)
FLIPS = 0.05  # the share of samples a rounding-level logit difference may change


@pytest.fixture(scope="module")
def runs():
    tb = pytest.importorskip("metagen.testbed")
    if not (tb.model_path("policy") / "config.json").exists():
        pytest.skip("testbed policy not committed")
    from metagen.generators.local import LocalGenerator
    gen = Recorder(LocalGenerator.from_pretrained(tb.model_path("policy")))
    prompts = [tb.format_prompt(p) for p in tb.make_problems("test", 6, seed=0)]
    out = {}
    for name, run in runners(gen).items():  # SC@16, live adaptive SC, adaptive SC drawing all
        gen.calls = []
        out[name] = (run(prompts, PARAMS), gen.calls)
    return prompts, out


def _equal_share(a, b):
    """The share of equal texts among the paired samples of two runs' results."""
    pairs = [(x.text, y.text) for ra, rb in zip(a, b)
             for x, y in zip(ra.candidates, rb.candidates)]
    return sum(x == y for x, y in pairs) / len(pairs)


def test_every_round_is_self_consistencys_request_but_for_n_and_seed(runs):
    prompts, out = runs
    (sc_call,) = out["sc"][1]
    rounds = [r.trace["rounds"] for r in out["live"][0]]
    seeds = []
    for k, (call_prompts, params) in enumerate(out["live"][1]):
        assert call_prompts == [p for p, r in zip(prompts, rounds) if r > k]
        assert params.n == BATCH and params.with_(n=N, seed=PARAMS.seed) == sc_call[1]
        seeds.append(params.seed)
    forced = [p.seed for _, p in out["forced"][1]]
    assert seeds[0] == PARAMS.seed and forced[:len(seeds)] == seeds
    assert len(forced) == N // BATCH and len(set(forced)) == len(forced)


def test_round_zero_is_self_consistencys_first_batch_on_a_warm_prefix_cache(runs):
    _, out = runs
    sc, live = out["sc"][0], out["live"][0]
    pairs = [(x.text, y.text) for a, b in zip(sc, live)
             for x, y in zip(a.candidates[:BATCH], b.candidates[:BATCH])]
    assert sum(x == y for x, y in pairs) >= (1 - FLIPS) * len(pairs)


def test_a_prompts_rounds_do_not_depend_on_which_prompts_are_still_open(runs):
    _, out = runs
    live, forced = out["live"][0], out["forced"][0]
    assert all(len(r.candidates) == N for r in forced)
    assert _equal_share(live, forced) >= 1 - FLIPS  # a live run that stopped: its prefix
