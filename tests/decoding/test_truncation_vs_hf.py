"""Temperature and truncation samplers against transformers' own warpers on random logits.

Each row of a batch gets its own parameter; the batched result must equal, row by row, the
transformers warper applied to that row alone (same kept set, same values), and rows with the
"off" value must come back unchanged bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper, EtaLogitsWarper, MinPLogitsWarper, TemperatureLogitsWarper,
    TopKLogitsWarper, TopPLogitsWarper, TypicalLogitsWarper,
)

from metagen.decoding import (
    apply_temperature, epsilon_filter, eta_filter, min_p_filter, top_k_filter, top_p_filter,
    typical_filter,
)

V = 64
NEG_INF = float("-inf")


def random_logits(rows: int, seed: int, with_inf: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, V, generator=g) * 2.5
    if with_inf:  # some tokens already removed by constraints upstream
        x[torch.rand(rows, V, generator=g) < 0.3] = NEG_INF
    return x


def assert_same(ours: torch.Tensor, ref: torch.Tensor) -> None:
    assert torch.equal(torch.isneginf(ours), torch.isneginf(ref)), "kept sets differ"
    keep = ~torch.isneginf(ref)
    torch.testing.assert_close(ours[keep], ref[keep], rtol=0, atol=0)


CASES = [
    # (our function, transformers warper factory, per-row values, off value)
    (apply_temperature, lambda v: TemperatureLogitsWarper(v), [0.05, 0.3, 0.7, 1.3, 4.0], 1.0),
    (top_k_filter, lambda v: TopKLogitsWarper(v), [1, 2, 5, 17, V - 1], 0),
    (top_p_filter, lambda v: TopPLogitsWarper(v), [0.01, 0.2, 0.5, 0.9, 0.999], 1.0),
    (min_p_filter, lambda v: MinPLogitsWarper(v), [0.001, 0.05, 0.2, 0.6, 1.0], 0.0),
    (typical_filter, lambda v: TypicalLogitsWarper(v), [0.01, 0.2, 0.5, 0.9, 0.99], 1.0),
    (epsilon_filter, lambda v: EpsilonLogitsWarper(v), [1e-4, 3e-3, 0.02, 0.1, 0.5], 0.0),
    (eta_filter, lambda v: EtaLogitsWarper(v), [1e-4, 3e-3, 0.02, 0.1, 0.5], 0.0),
]
IDS = ["temperature", "top_k", "top_p", "min_p", "typical", "epsilon", "eta"]


@pytest.mark.parametrize("fn,make,values,off", CASES, ids=IDS)
@pytest.mark.parametrize("with_inf", [False, True])
def test_each_row_matches_transformers(fn, make, values, off, with_inf):
    for seed in range(4):
        rows = values + [off]
        logits = random_logits(len(rows), seed, with_inf)
        dtype = torch.int64 if isinstance(values[0], int) else torch.float32
        ours = fn(logits, torch.tensor(rows, dtype=dtype))
        dummy_ids = torch.zeros((1, 1), dtype=torch.long)
        for b, value in enumerate(values):
            ref = make(value)(dummy_ids, logits[b:b + 1].clone())
            assert_same(ours[b:b + 1], ref)
        assert torch.equal(ours[-1], logits[-1]), "an 'off' row must be unchanged"
        assert not torch.isneginf(ours).all(dim=-1).any(), "every row keeps a token"


@pytest.mark.parametrize("fn,make,values,off", CASES, ids=IDS)
def test_mixed_batch_equals_rows_alone(fn, make, values, off):
    rows = [values[2], off, values[0], values[4], off, values[1]]
    logits = random_logits(len(rows), 11)
    dtype = torch.int64 if isinstance(values[0], int) else torch.float32
    batched = fn(logits, torch.tensor(rows, dtype=dtype))
    for b, value in enumerate(rows):
        alone = fn(logits[b:b + 1], torch.tensor([value], dtype=dtype))
        assert torch.equal(batched[b:b + 1], alone)


def test_functions_do_not_mutate_input():
    logits = random_logits(3, 5)
    before = logits.clone()
    top_p_filter(logits, torch.tensor([0.5, 0.9, 1.0]))
    typical_filter(logits, torch.tensor([0.5, 0.9, 1.0]))
    top_k_filter(logits, torch.tensor([2, 0, 5]))
    assert torch.equal(logits, before)


def test_top_k_larger_than_vocab_is_off():
    logits = random_logits(2, 7)
    out = top_k_filter(logits, torch.tensor([V, 10 * V]))
    assert torch.equal(out, logits)


def test_top_k_keeps_ties_with_kth_value_like_transformers():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    ours = top_k_filter(logits, torch.tensor([2]))
    ref = TopKLogitsWarper(2)(torch.zeros((1, 1), dtype=torch.long), logits.clone())
    assert_same(ours, ref)
    assert (~torch.isneginf(ours)).sum() == 3  # 3.0 and both 2.0s


@pytest.mark.parametrize("prefix", [1, 4, 16, 63])
def test_top_p_prefix_path_matches_transformers(prefix):
    for seed in range(6):
        values = [0.05, 0.3, 0.6, 0.9, 0.99, 1.0]
        logits = random_logits(len(values), 100 + seed) * (1 + seed)  # peaked and flat rows
        ours = top_p_filter(logits, torch.tensor(values), prefix=prefix)
        for b, value in enumerate(values[:-1]):
            ref = TopPLogitsWarper(value)(torch.zeros((1, 1), dtype=torch.long),
                                         logits[b:b + 1].clone())
            assert_same(ours[b:b + 1], ref)
        assert torch.equal(ours[-1], logits[-1])
