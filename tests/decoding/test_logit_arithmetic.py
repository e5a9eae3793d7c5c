"""Golden values and invariants of the logit-arithmetic combinations (contrastive decoding,
DExperts, proxy tuning)."""

from __future__ import annotations

import math

import pytest
import torch

from metagen.decoding.logit_arithmetic import (
    check_alpha, check_amateur_temperature, check_beta, check_weight, contrastive_scores, dexperts_logits, plausible,
    proxy_tuning_logits,
)
from metagen.errors import InvalidParameterError

INF = float("inf")


def test_contrastive_golden_difference_of_logprobs_under_the_cut():
    expert = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log() + 7.0  # logits: any row offset
    amateur = torch.tensor([[0.25, 0.25, 0.25, 0.25]]).log() - 3.0
    out = contrastive_scores(expert, amateur, alpha=0.5)  # keeps p >= 0.25: tokens 0 and 1
    expected = torch.tensor([[math.log(2.0), math.log(1.2), -INF, -INF]])
    torch.testing.assert_close(out, expected)


def test_contrastive_improved_form_golden_on_raw_logits():
    expert = torch.tensor([[2.0, 1.0, 0.0, -5.0]])
    amateur = torch.tensor([[1.0, 3.0, 0.0, 0.0]])
    out = contrastive_scores(expert, amateur, alpha=0.3, beta=0.5)
    # p_e = softmax(expert) = [.665, .245, .090, .0006]: tokens 0 and 1 pass 0.3 * 0.665
    expected = torch.tensor([[1.5 * 2.0 - 0.5 * 1.0, 1.5 * 1.0 - 0.5 * 3.0, -INF, -INF]])
    torch.testing.assert_close(out, expected)


def test_amateur_temperature_golden_and_one_is_bit_for_bit_the_default():
    expert = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    amateur = torch.tensor([[2.0, 0.0, 1.0, 1.0]])
    out = contrastive_scores(expert, amateur, alpha=0.5, amateur_temperature=0.5)
    # p_a = softmax([4, 0, 2, 2]) = e^[4, 0, 2, 2] / z with z = e^4 + 1 + 2 e^2
    z = math.exp(4.0) + 1.0 + 2.0 * math.exp(2.0)
    expected = torch.tensor([[math.log(0.5) - (4.0 - math.log(z)),
                              math.log(0.3) - (0.0 - math.log(z)), -INF, -INF]])
    torch.testing.assert_close(out, expected)
    beta = contrastive_scores(expert, amateur, alpha=0.5, beta=0.5, amateur_temperature=0.5)
    torch.testing.assert_close(beta[0, :2], 1.5 * expert[0, :2] - 0.5 * 2.0 * amateur[0, :2])
    g = torch.Generator().manual_seed(1)
    e, a = torch.randn(4, 50, generator=g) * 4, torch.randn(4, 50, generator=g) * 4
    for b in (None, 0.5):
        assert torch.equal(contrastive_scores(e, a, 0.1, b, amateur_temperature=1.0),
                           contrastive_scores(e, a, 0.1, b))


def test_plausibility_cut_edges():
    expert = torch.tensor([[3.0, 3.0, 1.0, -INF], [0.0, 1.0, 2.0, 3.0]])
    assert plausible(expert, 0.0).tolist() == [[True, True, True, False], [True] * 4]
    # alpha = 1 keeps exactly the most likely tokens (ties included)
    assert plausible(expert, 1.0).tolist() == [[True, True, False, False],
                                               [False, False, False, True]]


def test_contrastive_rows_are_independent_and_equal_one_row_at_a_time():
    g = torch.Generator().manual_seed(0)
    expert, amateur = torch.randn(5, 33, generator=g) * 3, torch.randn(5, 33, generator=g) * 3
    whole = contrastive_scores(expert, amateur, 0.1)
    for i in range(5):
        torch.testing.assert_close(whole[i:i + 1],
                                   contrastive_scores(expert[i:i + 1], amateur[i:i + 1], 0.1))
    # every row keeps its expert argmax, and the cut drops at least one token of each row here
    assert torch.isfinite(whole.gather(1, expert.argmax(-1, keepdim=True))).all()
    assert (~torch.isfinite(whole)).any(dim=-1).all()


def test_dexperts_and_proxy_tuning_golden():
    base = torch.tensor([[1.0, 2.0, 3.0]])
    expert = torch.tensor([[0.0, 1.0, 0.0]])
    anti = torch.tensor([[1.0, 0.0, 0.0]])
    torch.testing.assert_close(dexperts_logits(base, expert, anti, 2.0),
                               torch.tensor([[-1.0, 4.0, 3.0]]))
    torch.testing.assert_close(proxy_tuning_logits(base, expert, anti),
                               torch.tensor([[0.0, 3.0, 3.0]]))
    torch.testing.assert_close(dexperts_logits(base, expert, anti, 0.0), base)


@pytest.mark.parametrize("check,bad", [
    (check_alpha, -0.1), (check_alpha, 1.5), (check_alpha, float("nan")), (check_alpha, True),
    (check_beta, -1.0), (check_beta, INF), (check_beta, "0.5"),
    (check_amateur_temperature, 0.0), (check_amateur_temperature, -0.5),
    (check_amateur_temperature, INF), (check_amateur_temperature, float("nan")),
    (check_amateur_temperature, True), (check_amateur_temperature, "0.5"),
])
def test_bad_parameters_name_the_parameter(check, bad):
    with pytest.raises(InvalidParameterError) as err:
        check(bad)
    assert err.value.param in ("alpha", "beta", "amateur_temperature")


def test_bad_weight_names_it():
    with pytest.raises(InvalidParameterError) as err:
        check_weight("alpha", INF)
    assert err.value.param == "alpha"
    assert check_weight("alpha", -2) == -2.0
