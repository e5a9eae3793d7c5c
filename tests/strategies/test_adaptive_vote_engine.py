"""Adaptive self-consistency on the built-in engine (the testbed policy): its rounds are the
requests self-consistency makes, and a prompt's samples do not depend on the run around it.

Seeded samples are the same tokens in any batch and at any prefix-cache state unless two
candidates' probabilities lie within float32 rounding of each other (the engine's batch-
composition guarantee), so sample equality is asserted for all but ``FLIPS`` of them.
"""

from __future__ import annotations

import pytest

from metagen.strategies import adaptive_self_consistency, self_consistency
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=0.8, seed=3, max_tokens=64)
N, BATCH = 16, 4
NEVER = 1.0 - 1e-9  # above the Beta rule's largest value at N = 16: every prompt draws N
FLIPS = 0.05  # the share of samples a rounding-level logit difference may change


class Recorder:
    """Forwards to a generator and keeps every call's (prompts, params)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    @property
    def capabilities(self):
        return self.inner.capabilities

    @property
    def usage(self):
        return self.inner.usage

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        return self.inner.generate(prompts, params)


@pytest.fixture(scope="module")
def runs():
    tb = pytest.importorskip("metagen.testbed")
    if not (tb.model_path("policy") / "config.json").exists():
        pytest.skip("testbed policy not committed")
    from metagen.generators.local import LocalGenerator
    gen = Recorder(LocalGenerator.from_pretrained(tb.model_path("policy")))
    prompts = [tb.format_prompt(p) for p in tb.make_problems("test", 6, seed=0)]
    out = {}
    for name, run in (
            ("sc", lambda: self_consistency(gen, prompts, n=N, params=PARAMS)),
            ("live", lambda: adaptive_self_consistency(gen, prompts, n=N, batch=BATCH,
                                                       params=PARAMS)),
            ("forced", lambda: adaptive_self_consistency(gen, prompts, n=N, batch=BATCH,
                                                         confidence=NEVER, params=PARAMS))):
        gen.calls = []
        out[name] = (run(), gen.calls)
    return prompts, out


def _equal_share(a, b):
    """The share of equal texts among the paired samples of two runs' results."""
    pairs = [(x.text, y.text) for ra, rb in zip(a, b) for x, y in zip(ra.candidates, rb.candidates)]
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
