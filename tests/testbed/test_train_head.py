"""The step-value head's fit (golden: soft labels made by a known head are fitted back to it)
and the within-problem AUROC (golden values; a problem-level score gets exactly 0.5)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from metagen.errors import InvalidParameterError
from metagen.testbed.metrics import within_problem_auroc
from metagen.testbed.train_head import fit_logistic


def test_fit_recovers_the_head_that_made_the_soft_labels():
    """Labels y = sigmoid(b + w.x) exactly: at l2 -> 0 the BCE minimum is (w, b) itself (the
    gradient sum (p - y) x vanishes there and the loss is strictly convex). With l2 = 1e-8 the
    optimum moves by about l2 |w| / (smallest Hessian eigenvalue ~ N/16 here) < 1e-9."""
    rng = random.Random(0)
    w, b = [1.5, -0.7, 0.0, 2.0], -0.3
    x = [[rng.gauss(0, 1) for _ in w] for _ in range(400)]
    y = [1 / (1 + math.exp(-(b + sum(a * c for a, c in zip(w, row))))) for row in x]
    got_w, got_b = fit_logistic(x, y, l2=1e-8)
    assert got_w == pytest.approx(w, abs=1e-6) and got_b == pytest.approx(b, abs=1e-6)


def test_fit_is_the_penalised_optimum():
    """With hard labels and l2 = 1: the gradient of the penalised loss is zero at the fit."""
    rng = random.Random(1)
    x = np.array([[rng.gauss(0, 1), rng.gauss(0, 1)] for _ in range(200)])
    y = np.array([float(rng.random() < 1 / (1 + math.exp(-row[0]))) for row in x])
    w, b = fit_logistic(x.tolist(), y.tolist(), l2=1.0)
    p = 1 / (1 + np.exp(-(x @ np.array(w) + b)))
    grad_w = x.T @ (p - y) + np.array(w)
    assert np.abs(grad_w).max() < 1e-8 and abs(float((p - y).sum())) < 1e-8


def test_fit_refuses_bad_input_by_name():
    with pytest.raises(InvalidParameterError, match="invalid x="):
        fit_logistic([], [])
    with pytest.raises(InvalidParameterError, match="invalid y="):
        fit_logistic([[0.0]], [1.5])
    with pytest.raises(InvalidParameterError, match="invalid l2="):
        fit_logistic([[0.0]], [1.0], l2=0.0)


def test_within_problem_auroc_golden():
    # problem a: right 0.9, 0.2; wrong 0.5 -> pairs (0.9>0.5), (0.2<0.5): 1/2
    # problem b: right 0.3; wrong 0.1, 0.3 -> 1 and a tie (1/2): 3/4
    # problem c: all right -> not counted
    scores = [0.9, 0.2, 0.5, 0.3, 0.1, 0.3, 0.7]
    labels = [1, 1, 0, 1, 0, 0, 1]
    groups = ["a", "a", "a", "b", "b", "b", "c"]
    mean, pairs, n = within_problem_auroc(scores, labels, groups)
    assert (mean, pairs, n) == (pytest.approx(0.625), pytest.approx(2.5 / 4), 2)
    # a score that only knows the problem (its difficulty) ranks nothing within one
    assert within_problem_auroc([1.0, 1.0, 0.0, 0.0], [1, 0, 1, 0], [1, 1, 2, 2])[:2] == (0.5, 0.5)
    assert math.isnan(within_problem_auroc([1.0], [1], ["a"])[0])


def test_the_head_stage_writes_a_head_fitted_to_the_policys_step_values(tmp_path):
    """``train --only prm-head``'s stage at a tiny size over the shipped models (linked into a
    scratch root): a loadable head folder naming its scorers relative to the root, finite
    weights, and its provenance; without a scorer it names the command that trains it."""
    from metagen.errors import ModelLoadError
    from metagen.scorers.confidence_head import ConfidenceHeadPRM
    from metagen.testbed.modeling import MODELS_DIR
    from metagen.testbed.pipeline import RMDataConfig
    from metagen.testbed.train_head import train_head_folder

    for name in ("policy", "orm"):
        (tmp_path / name).symlink_to(MODELS_DIR / name)
    tiny = RMDataConfig(problems=6, k=4, prm_samples=6, rollouts=2, synthetic=0)
    with pytest.raises(ModelLoadError, match="--only policy-s"):
        train_head_folder(tmp_path, ("orm", "policy-s"), tiny)
    folder = train_head_folder(tmp_path, ("orm",), tiny)
    head = ConfidenceHeadPRM.from_folder(folder)
    assert len(head.weights) == 1 and all(math.isfinite(w) for w in head.weights[0])
    import json
    config = json.loads((folder / "config.json").read_text())
    assert config["scorers"] == ["../orm"] and config["trained_on"]["rollouts"] == 2
    assert config["trained_on"]["steps"] > 0
