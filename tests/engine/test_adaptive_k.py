"""Choosing k for speculative decoding: the round model's golden values and invariants, the
acceptance tracker's estimate, and parameter errors."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.adaptive_k import (
    PROBE_BUDGET, PROBE_MIN_STEPS, QUANTIZED_VERIFY_COST, VERIFY_COST, AcceptanceTracker, best_k,
    draft_step_cost, expected_tokens, probe_interval, round_cost, verify_step_cost,
)
from metagen.errors import InvalidParameterError


@pytest.mark.parametrize("a", [0.0, 0.3, 0.75, 0.99])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_expected_tokens_is_the_geometric_closed_form(a: float, k: int) -> None:
    assert expected_tokens(a, k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_best_k_golden_values() -> None:
    # the benchmark pair: a = 0.8, draft 0.3, verify 0.1 -> rates 1.286, 1.356, 1.342, 1.292
    assert best_k(0.8, 6, draft_cost=0.3, verify_cost=0.1) == 2
    assert best_k(1.0, 6, draft_cost=0.0) == 6  # free drafts, always accepted: as many as allowed
    assert best_k(0.0, 6, draft_cost=0.0) == 1  # never accepted: the least
    assert best_k(0.9, 6, draft_cost=0.05, verify_cost=0.05) == 6
    assert round_cost(2, 0.3, 0.1) == pytest.approx(1.8)


def test_best_k_is_monotone_in_acceptance_and_cost() -> None:
    grid = [i / 50 for i in range(51)]
    for cost in (0.0, 0.1, 0.3, 0.7):
        ks = [best_k(a, 16, cost) for a in grid]
        assert ks == sorted(ks)  # more acceptance, never fewer drafts
        assert ks[-1] > ks[0]
    for a in (0.5, 0.8, 0.95):
        ks = [best_k(a, 16, c / 20) for c in range(21)]
        assert ks == sorted(ks, reverse=True)  # dearer drafts, never more of them


def test_tracker_estimates_the_geometric_acceptance() -> None:
    t = AcceptanceTracker(prior=0.7, decay=1.0)
    assert t.rate == pytest.approx(0.7)
    t.update(2, 2)  # all accepted: no rejection
    t.update(3, 1)  # one accepted, then a rejection
    t.update(0, 0)  # no drafts: nothing learned
    assert t.rate == pytest.approx((0.7 + 3) / (0.7 + 3 + 0.3 + 1))
    # a rate of 0.8 per draft, drawn: the estimate converges to it
    gen = torch.Generator().manual_seed(0)
    t = AcceptanceTracker(decay=1.0)
    for _ in range(4000):
        u = torch.rand(4, generator=gen).tolist()
        na = next((i for i, x in enumerate(u) if x >= 0.8), 4)
        t.update(4, na)
    assert t.rate == pytest.approx(0.8, abs=0.02)


def test_tracker_follows_a_change_with_decay() -> None:
    fast, slow = AcceptanceTracker(decay=0.8), AcceptanceTracker(decay=1.0)
    for t in (fast, slow):
        for _ in range(30):
            t.update(4, 4)
    assert fast.rate > 0.99
    for t in (fast, slow):
        for _ in range(10):
            t.update(4, 0)
    # every draft rejected for 10 rounds: the decayed estimate has left 1 (accepted weight
    # 20 * 0.8**10 = 2.1 against 5 * (1 - 0.8**10) = 4.5 rejections); without decay it stays high
    assert fast.rate == pytest.approx(0.32, abs=0.01)
    assert slow.rate > 0.9


def test_draft_step_cost_is_a_byte_ratio() -> None:
    small, big = torch.nn.Linear(10, 10), torch.nn.Linear(10, 30)  # 110 and 330 parameters
    assert draft_step_cost(small, big, overhead_bytes=0) == pytest.approx(110 / 330)
    assert draft_step_cost(small, big, overhead_bytes=440) == pytest.approx(880 / 1760)


def test_draft_step_cost_counts_int8_weights() -> None:
    """An int8 projection is a buffer (1 byte a weight, one float32 scale per output channel):
    it counts, at its stored size."""
    from metagen.engine.models.int8 import Int8Weight

    fp32 = torch.nn.Linear(10, 30, bias=False)  # 300 float32 weights
    q8 = torch.nn.Module()
    q8.w = Int8Weight.from_in_out(fp32.weight.detach().T.contiguous())
    assert draft_step_cost(q8, fp32, overhead_bytes=0) == pytest.approx((300 + 30 * 4) / 1200)


@pytest.mark.parametrize("kwargs, name", [
    ({"acceptance": 1.5, "k_max": 4, "draft_cost": 0.1}, "acceptance"),
    ({"acceptance": 0.5, "k_max": 0, "draft_cost": 0.1}, "k_max"),
    ({"acceptance": 0.5, "k_max": 4, "draft_cost": float("nan")}, "draft_cost"),
    ({"acceptance": 0.5, "k_max": 4, "draft_cost": 0.1, "verify_cost": -1.0}, "verify_cost"),
])
def test_best_k_rejects_bad_parameters(kwargs: dict, name: str) -> None:
    with pytest.raises(InvalidParameterError, match=name):
        best_k(**kwargs)


def test_tracker_rejects_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError, match="prior"):
        AcceptanceTracker(prior=2.0)
    with pytest.raises(InvalidParameterError, match="decay"):
        AcceptanceTracker(decay=0.0)


def test_draft_step_cost_reads_one_row_of_an_untied_embedding(stories_path) -> None:
    """An untied embedding table is read one row per token; a tied one is the head, read whole."""
    from metagen.engine.models.loader import load_model

    model = load_model(stories_path)
    total = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    row = model.embed[0].numel() * 4
    read = total if model.lm_head is None else total - model.embed.numel() * 4 + row
    flat = torch.nn.Linear(1, total // 4, bias=False)  # a module of ``total`` bytes, no embed
    assert draft_step_cost(model, flat, overhead_bytes=0) == pytest.approx(read / total)
    if model.lm_head is not None:
        model.lm_head, head = None, model.lm_head  # tied: the table is the head
        assert draft_step_cost(model, flat, overhead_bytes=0) == pytest.approx(
            (total - sum(t.numel() * t.element_size() for t in head.parameters())) / total)
        model.lm_head = head


def test_best_k_may_choose_no_drafts_exactly_when_no_round_pays() -> None:
    """With ``k_min`` 0, ``best_k`` is 0 exactly where no k >= 1 has more expected tokens per
    cost than a plain step's 1 (ties go to the smaller k, so to 0), and otherwise the k that
    ``k_min`` 1 chooses."""
    # golden: a seldom-agreeing draft at 0.6 target steps (rate of k = 1: 1.16 / 1.7 = 0.68)
    assert best_k(0.16, 4, draft_cost=0.6, k_min=0) == 0
    assert best_k(0.16, 4, draft_cost=0.6) == 1
    assert best_k(0.8, 6, draft_cost=0.3, verify_cost=0.1, k_min=0) == 2
    for a in [i / 20 for i in range(21)]:
        for cost in (0.0, 0.1, 0.3, 0.6, 1.0):
            top = max(expected_tokens(a, k) / round_cost(k, cost) for k in range(1, 7))
            k0 = best_k(a, 6, cost, k_min=0)
            assert (k0 == 0) == (top <= 1.0), (a, cost)
            if k0:
                assert k0 == best_k(a, 6, cost)


@pytest.mark.parametrize("k_min", [-1, 2, True, 0.5])
def test_best_k_rejects_a_bad_k_min(k_min) -> None:
    with pytest.raises(InvalidParameterError, match="k_min"):
        best_k(0.5, 4, 0.1, k_min=k_min)


def test_probe_interval_spreads_a_probe_within_its_budget() -> None:
    """Golden values: prompt lookup (free drafts) probes every PROBE_MIN_STEPS = 8 steps; the
    benchmark's int8 draft on its float32 target (0.073 + 0.1 steps) every 9; a draft at half a
    target step every 30; and over a grid the interval is the least n >= 8 with
    (draft_cost + verify_cost) / n <= PROBE_BUDGET."""
    assert probe_interval(0.0) == PROBE_MIN_STEPS == 8
    assert probe_interval(0.073, 0.1) == 9
    assert probe_interval(0.5, 0.1) == 30
    # no round pays even with every draft accepted: never probe (k = 1 at 1.1 steps: 2 / 2.1;
    # with k up to 4: 5 / 5.4)
    assert probe_interval(1.0, 0.1) is None and probe_interval(1.0, 0.1, k_max=4) is None
    assert probe_interval(0.8, 0.1, k_max=4) == 45  # 5 / 4.6 pays at acceptance 1
    for d in (0.0, 0.05, 0.2, 0.35, 0.5):
        for v in (0.0, 0.1, 0.4):
            n = probe_interval(d, v, k_max=4)
            assert n is not None and n >= PROBE_MIN_STEPS and (d + v) / n <= PROBE_BUDGET + 1e-12
            assert n == PROBE_MIN_STEPS or (d + v) / (n - 1) > PROBE_BUDGET
    with pytest.raises(InvalidParameterError, match="draft_cost"):
        probe_interval(-0.1)
    with pytest.raises(InvalidParameterError, match="verify_cost"):
        probe_interval(0.1, float("nan"))


@pytest.mark.parametrize("scheme", [None, "int8", "w8a8", "int4"])
def test_verify_step_cost_follows_the_target_weights(stories_path, scheme) -> None:
    """Float weights: VERIFY_COST; int8 / int4 ones, whose products are bound by the multiply
    rate at one row on a CPU without VNNI: QUANTIZED_VERIFY_COST, the larger."""
    from metagen.engine.models.loader import load_model

    cost = verify_step_cost(load_model(stories_path, quantization=scheme))
    assert cost == (VERIFY_COST if scheme is None else QUANTIZED_VERIFY_COST)
    assert QUANTIZED_VERIFY_COST > VERIFY_COST
