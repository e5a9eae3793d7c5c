"""Beam-search bookkeeping: equals transformers' beam search; diverse and stochastic beams.

The equivalence tests drive :func:`beam_step` with full (cache-free) forwards of the real
stories260K model and compare with ``model.generate(num_beams=...)``. Statistical tests use a
chi-square test at significance 1e-6 (Wilson-Hilferty critical value): a fresh seed would fail a
correct implementation with probability about 1e-6; seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from metagen.decoding.beam import (
    BeamParams, BeamState, StochasticBeamState, beam_step, best_hypotheses, diversity_penalty,
    gumbel_from_uniform, gumbel_top_k, stochastic_beam_step, truncated_gumbel)
from metagen.errors import InvalidParameterError

Z_1E6 = 4.7534


def chi2_critical(df: int) -> float:
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + Z_1E6 * math.sqrt(a)) ** 3


def chi2_ok(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    expected = probs.double() * counts.sum()
    assert counts[expected == 0].sum() == 0
    keep = expected > 0
    stat = (((counts[keep] - expected[keep]) ** 2) / expected[keep]).sum().item()
    return stat, chi2_critical(int(keep.sum()) - 1)


@pytest.mark.parametrize("kwargs", [
    {"num_beams": 0, "max_tokens": 4},
    {"num_beams": 2, "max_tokens": 4, "num_return_sequences": 3},
    {"num_beams": 65, "max_tokens": 4},
    {"num_beams": 4, "max_tokens": 0},
    {"num_beams": 4, "max_tokens": 4, "num_beam_groups": 3},
    {"num_beams": 4, "max_tokens": 4, "early_stopping": "sometimes"},
    {"num_beams": 4, "max_tokens": 4, "length_penalty": float("nan")},
    {"num_beams": 4, "max_tokens": 4, "diversity_penalty": -1.0},
])
def test_invalid_beam_params_rejected(kwargs: dict) -> None:
    """V18: num_beams 0, num_beams < num_return_sequences, width > cap."""
    with pytest.raises(InvalidParameterError):
        BeamParams(**kwargs)


@pytest.fixture(scope="module")
def stories(stories_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(stories_path)
    return model, tok


def run_pure_beam(model, prompt_ids: list[int], params: BeamParams) -> list:
    """Beam search driven by beam_step with a full forward per step (no KV cache)."""
    groups = [BeamState(params.group_size) for _ in range(params.num_beam_groups)]
    while not all(g.done for g in groups):
        chosen: list[int] = []
        for gi, state in enumerate(groups):
            if state.done:
                continue
            ids = torch.tensor([prompt_ids + list(r) for r in state.running])
            with torch.no_grad():
                logits = model(ids).logits[:, -1].float()  # (W, V)
            lp = torch.log_softmax(logits, dim=-1)
            lp = diversity_penalty(lp, chosen, params.diversity_penalty)
            groups[gi], move = beam_step(state, lp, params)
            chosen.extend(move.tokens)
    return best_hypotheses(groups, params.num_return_sequences)


CASES = [
    dict(num_beams=3, length_penalty=1.0, early_stopping=False, eos=(426,)),
    dict(num_beams=4, length_penalty=0.0, early_stopping=True, eos=(426,)),
    dict(num_beams=4, length_penalty=2.0, early_stopping="never", eos=(426, 432)),
    dict(num_beams=2, length_penalty=-1.0, early_stopping=False, eos=(426, 432)),
    dict(num_beams=4, length_penalty=1.0, early_stopping=False, eos=(2,)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"W{c['num_beams']}-lp{c['length_penalty']}-"
                         f"es{c['early_stopping']}-eos{len(c['eos'])}")
def test_beam_step_equals_transformers(stories, case: dict) -> None:
    model, tok = stories
    prompt = tok("Once upon a time, there was a", return_tensors="pt").input_ids
    max_new = 24
    params = BeamParams(num_beams=case["num_beams"], max_tokens=max_new,
                        num_return_sequences=2, length_penalty=case["length_penalty"],
                        early_stopping=case["early_stopping"], eos_token_ids=case["eos"])
    ours = run_pure_beam(model, prompt[0].tolist(), params)
    ref = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                         num_beams=case["num_beams"],
                         num_return_sequences=2, length_penalty=case["length_penalty"],
                         early_stopping=case["early_stopping"], max_new_tokens=max_new,
                         eos_token_id=list(case["eos"]), pad_token_id=1,
                         output_scores=True, return_dict_in_generate=True)
    for hyp, seq, score in zip(ours, ref.sequences, ref.sequences_scores):
        gen = seq[prompt.shape[1]:].tolist()
        assert gen[:len(hyp.tokens)] == list(hyp.tokens)
        assert all(t == 1 for t in gen[len(hyp.tokens):])  # pad (0 would be falsy in HF)
        assert hyp.score == pytest.approx(score.item(), rel=1e-4, abs=1e-4)


def test_diverse_beam_one_group_is_beam_search(stories) -> None:
    model, tok = stories
    prompt = tok("Once upon a time", return_tensors="pt").input_ids[0].tolist()
    plain = BeamParams(num_beams=4, max_tokens=12, num_return_sequences=4, eos_token_ids=(426,))
    div = BeamParams(num_beams=4, max_tokens=12, num_return_sequences=4, eos_token_ids=(426,),
                     diversity_penalty=5.0)
    assert [h.tokens for h in run_pure_beam(model, prompt, plain)] == \
        [h.tokens for h in run_pure_beam(model, prompt, div)]


def test_diverse_beam_groups_differ(stories) -> None:
    """With a large Hamming penalty, groups pick different tokens at every step."""
    model, tok = stories
    prompt = tok("Once upon a time", return_tensors="pt").input_ids[0].tolist()
    same = BeamParams(num_beams=4, max_tokens=8, num_return_sequences=4, num_beam_groups=4)
    div = BeamParams(num_beams=4, max_tokens=8, num_return_sequences=4, num_beam_groups=4,
                     diversity_penalty=100.0)
    hyp_same = run_pure_beam(model, prompt, same)
    hyp_div = run_pure_beam(model, prompt, div)
    assert len({h.tokens for h in hyp_same}) == 1  # no penalty: every group is the same greedy
    assert len({h.tokens for h in hyp_div}) == 4
    for step in range(8):
        assert len({h.tokens[step] for h in hyp_div}) == 4


def test_gumbel_top_k_pairs_are_without_replacement() -> None:
    """P(first=i, second=j) = p_i p_j / (1 - p_i) (sampling without replacement)."""
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    n = 100_000
    g = gumbel_from_uniform(torch.rand(n, 5, generator=gen, dtype=torch.float64))
    idx = gumbel_top_k(p.log().expand(n, 5), 2, g)
    counts = torch.bincount(idx[:, 0] * 5 + idx[:, 1], minlength=25).double()
    exact = torch.tensor([p[i] * p[j] / (1 - p[i]) if i != j else 0.0
                          for i in range(5) for j in range(5)], dtype=torch.float64)
    stat, crit = chi2_ok(counts, exact)
    assert stat < crit


def test_truncated_gumbel_has_the_given_max_and_keeps_order() -> None:
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(6, 10, generator=gen, dtype=torch.float64) * 3
    t = torch.randn(6, generator=gen, dtype=torch.float64)
    out = truncated_gumbel(g, t)
    assert torch.allclose(out.max(-1)[0], t)
    assert torch.equal(out.argsort(-1), g.argsort(-1))
    assert bool((out <= t[:, None] + 1e-12).all())


def _bigram(v: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(v, v, generator=gen, dtype=torch.float64) * 1.5, -1)


def run_stochastic(table: torch.Tensor, k: int, max_tokens: int, eos: int,
                   gen: torch.Generator) -> StochasticBeamState:
    params = BeamParams(num_beams=k, max_tokens=max_tokens, eos_token_ids=(eos,))
    state = StochasticBeamState(k)
    while not state.done:
        prev = [state.beams[i][-1] if state.beams[i] else 0 for i in state.running_index]
        lp = table[torch.tensor(prev)]
        state, _ = stochastic_beam_step(state, lp, torch.rand(lp.shape, generator=gen,
                                                               dtype=torch.float64), params)
    return state


def test_stochastic_beam_enumerates_all_sequences_when_k_is_large() -> None:
    table = _bigram(3, 2)  # token 2 is EOS; 3 + 3 + 9 ... sequences of length <= 2
    state = run_stochastic(table, 20, 2, 2, torch.Generator().manual_seed(0))
    expected = {(2,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)}
    assert set(state.beams) == expected and len(state.beams) == len(expected)
    for beam, lp in zip(state.beams, state.logprobs):
        prev, total = 0, 0.0
        for t in beam:
            total += table[prev, t].item()
            prev = t
        assert lp == pytest.approx(total)


@pytest.mark.parametrize("k", [1, 3])
def test_stochastic_beam_top_sample_follows_model(k: int) -> None:
    """The highest-key beam is an exact sample from the sequence model (Gumbel-max)."""
    v, eos, max_tokens, n = 3, 2, 2, 2000
    table = _bigram(v, 3)
    gen = torch.Generator().manual_seed(k)
    seqs = [(2,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    exact = torch.tensor([sum(table[p, t].item() for p, t in zip((0,) + s[:-1], s))
                          for s in seqs], dtype=torch.float64).exp()
    counts = torch.zeros(len(seqs), dtype=torch.float64)
    for _ in range(n):
        state = run_stochastic(table, k, max_tokens, eos, gen)
        counts[seqs.index(state.beams[0])] += 1
    stat, crit = chi2_ok(counts, exact)
    assert stat < crit
