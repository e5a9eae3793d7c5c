"""How well each testbed reward model ranks the policy's samples: pooled against within one
problem (``metagen testbed eval --rank-k K``).

``k`` policy samples per problem (temperature 0.8, the reward models' training distribution),
graded; each scorer's outcome score of every sample is its process reward aggregated over the
sample's steps (lines): ``last`` for a PRM whose step score is a value of the prefix (the step
head, the verifier's confidence so far) and ``min`` for the classifier PRM (its own convention).
Per scorer: the pooled AUROC (which a score that only recognises hard problems wins) and the
within-problem AUROC (:func:`~metagen.testbed.metrics.within_problem_auroc`, which it cannot:
what best-of-N and step search need).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metagen.scorers.base import StepAggregation, aggregate_steps
from metagen.testbed.metrics import auroc, split_steps, within_problem_auroc
from metagen.testbed.problems import Problem, format_prompt, grade
from metagen.testbed.sampler import sample


def ranking_metrics(scores: Sequence[float], labels: Sequence[bool], groups: Sequence[object]
                    ) -> dict[str, float | int]:
    """``auroc`` (pooled), ``within_auroc`` (mean over mixed problems), ``pair_accuracy`` (over
    their mixed pairs) and ``problems`` (how many are mixed)."""
    within, pairs, n = within_problem_auroc(scores, labels, groups)
    return {"auroc": auroc(scores, labels), "within_auroc": within, "pair_accuracy": pairs,
            "problems": n}


def rank_eval(policy: Any, scorers: Mapping[str, tuple[Any, StepAggregation]],
              problems: Sequence[Problem], k: int = 8, temperature: float = 0.8, seed: int = 0
              ) -> dict[str, Any]:
    """:func:`ranking_metrics` of every scorer (``name -> (PRM, step aggregation)``) on ``k``
    samples of each problem, with the samples' accuracy."""
    prompts = [format_prompt(p) for p in problems for _ in range(k)]
    outs = sample(policy, prompts, temperature=temperature, seed=seed)
    labels = [grade(o, problems[i // k].answer) for i, o in enumerate(outs)]
    groups = [i // k for i in range(len(outs))]
    steps = [split_steps(o) or [o] for o in outs]
    res: dict[str, Any] = {"samples": len(outs), "k": k,
                           "sample_accuracy": sum(labels) / max(1, len(labels))}
    for name, (prm, how) in scorers.items():
        chains = prm.score_steps(prompts, steps)
        res[name] = ranking_metrics([aggregate_steps(c, how) for c in chains], labels, groups)
    return res


def testbed_rankers(root: Path) -> dict[str, tuple[Any, StepAggregation]]:
    """The reward models of the testbed folder ``root`` that are there: the step head
    (``prm-head``), the classifier PRM (``prm``, min over steps), the ORM's confidence (the
    generative verifier) and, for comparison, the confidences of the policy and of policy-s."""
    from metagen.scorers.confidence_head import ConfidenceHeadPRM
    from metagen.scorers.likelihood import LikelihoodVerifier
    from metagen.scorers.load_prm import load_prm

    out: dict[str, tuple[Any, StepAggregation]] = {}
    if (root / "prm-head" / "config.json").is_file():
        out["prm-head"] = (ConfidenceHeadPRM.from_folder(root / "prm-head"), "last")
    if (root / "prm" / "config.json").is_file():
        out["prm"] = (load_prm(root / "prm", batch_size=64), "min")
    for name, label in (("orm", "orm-confidence"), ("policy", "policy-confidence"),
                        ("policy-s", "policy-s-confidence")):
        if (root / name / "config.json").is_file():
            out[label] = (LikelihoodVerifier.from_pretrained(root / name, batch_size=64), "last")
    return out
