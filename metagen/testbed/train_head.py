"""Training of the testbed's step-value head (:class:`~metagen.scorers.ConfidenceHeadPRM`).

Data: policy samples of train-split problems with Monte-Carlo step values
(:func:`~metagen.testbed.rm_data.mc_step_values`, Math-Shepherd labels: the fraction of
``rollouts`` policy completions from each step prefix that reach the right answer; the last step
is the sample's own correctness). Features: each scoring LM's confidence features of every step
(:func:`~metagen.scorers.confidence_head.step_features`). Fit: a logistic regression with soft
labels and an L2 penalty on the weights (:func:`fit_logistic`, Newton's method: the loss is
convex, so the fit is the unique minimum whatever the start).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from metagen.errors import InvalidParameterError
from metagen.scorers.confidence_head import FEATURES, ConfidenceHeadPRM, write_head
from metagen.scorers.likelihood import LikelihoodVerifier
from metagen.testbed.pipeline import Progress, RMDataConfig
from metagen.testbed.problems import format_prompt
from metagen.testbed.rm_data import StepSample


def fit_logistic(x: Sequence[Sequence[float]], y: Sequence[float], l2: float = 1e-2,
                 iterations: int = 100, tol: float = 1e-10) -> tuple[list[float], float]:
    """Weights and bias minimising ``sum_i BCE(sigmoid(b + w . x_i), y_i) + l2/2 |w|^2`` for
    soft labels ``y_i`` in [0, 1] (the bias is not penalised). Newton's method until the step's
    largest component is below ``tol``."""
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.ndim != 2 or len(xs) != len(ys) or len(ys) == 0:
        raise InvalidParameterError("x", xs.shape, f"need a non-empty (rows, features) matrix "
                                    f"with one label per row ({len(ys)} labels)")
    if not np.all((ys >= 0) & (ys <= 1)):
        raise InvalidParameterError("y", "...", "labels must lie in [0, 1]")
    if not l2 > 0:
        raise InvalidParameterError("l2", l2, "must be positive (keeps the fit unique)")
    xb = np.hstack([xs, np.ones((len(xs), 1))])  # (N, F+1): the bias last
    penalty = np.full(xb.shape[1], l2)
    penalty[-1] = 0.0
    w = np.zeros(xb.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -500, 500)))
        grad = xb.T @ (p - ys) + penalty * w
        hess = (xb * (p * (1 - p) + 1e-12)[:, None]).T @ xb + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < tol:
            break
    return [float(v) for v in w[:-1]], float(w[-1])


def head_rows(head: ConfidenceHeadPRM, data: Sequence[StepSample], batch: int = 256
              ) -> tuple[list[list[float]], list[float]]:
    """Feature rows and labels of every step of ``data`` (steps whose value is ``nan``, i.e.
    unlabelled, are left out)."""
    rows: list[list[float]] = []
    labels: list[float] = []
    for start in range(0, len(data), batch):
        part = data[start:start + batch]
        feats = head.features([format_prompt(d.sample.problem) for d in part],
                              [list(d.steps) for d in part])
        for d, chain in zip(part, feats):
            for f, v in zip(chain, d.values):
                if v == v:  # not nan
                    rows.append(f)
                    labels.append(v)
    return rows, labels


def train_head(head: ConfidenceHeadPRM, data: Sequence[StepSample], l2: float = 1e-2
               ) -> tuple[ConfidenceHeadPRM, int]:
    """``head``'s scoring LMs with weights fitted to ``data``'s step values, and the number of
    labelled steps they were fitted to."""
    rows, labels = head_rows(head, data)
    w, b = fit_logistic(rows, labels, l2)
    n = len(w) // len(head.verifiers)
    return ConfidenceHeadPRM(head.verifiers, [w[i * n:(i + 1) * n] for i in
                                              range(len(head.verifiers))], b), len(rows)


def train_head_folder(root: Path, scorers: Sequence[str], data: RMDataConfig, seed: int = 0,
                      l2: float = 1e-2, progress: Progress | None = None) -> Path:
    """Fit the head over the scoring LMs ``root/<scorer>`` to Monte-Carlo step values of the
    policy ``root/policy`` on train-split problems, and write it to ``root/prm-head`` (its
    config names the scorers as ``../<scorer>``). ``ModelLoadError`` naming the command that
    trains a missing model."""
    import random

    from metagen.testbed.modeling import require_model
    from metagen.testbed.pipeline import load_causal
    from metagen.testbed.problems import make_problems
    from metagen.testbed.rm_data import balance, mc_step_values, policy_samples

    folders = [require_model(s, root / s) for s in scorers]
    policy = load_causal(require_model("policy", root / "policy"))
    problems = make_problems("train", data.problems, seed=3000 + seed)
    def mark(stage: str, done: int) -> None:
        if progress:
            progress(stage, done, 1, 0.0)

    mark("samples", 0)
    pool = policy_samples(policy, problems, data.k, data.temperature, seed=seed)
    chosen = balance(pool, random.Random(seed + 1))[: data.prm_samples]
    mark("samples", 1)
    mark("rollouts", 0)
    steps = mc_step_values(policy, chosen, data.rollouts, data.temperature, seed=seed)
    mark("rollouts", 1)
    mark("fit", 0)
    blank = ConfidenceHeadPRM([LikelihoodVerifier.from_pretrained(f) for f in folders],
                              [[0.0] * len(FEATURES)] * len(folders), 0.0)
    head, labelled = train_head(blank, steps, l2)
    mark("fit", 1)
    return write_head(root / "prm-head", [f"../{s}" for s in scorers], head.weights, head.bias,
                      trained_on={"policy": "../policy", "problems": data.problems,
                                  "samples_per_problem": data.k, "samples": len(chosen),
                                  "rollouts": data.rollouts, "temperature": data.temperature,
                                  "seed": seed, "l2": l2, "steps": labelled})
