"""Reproduce every testbed model from scratch, and evaluate them (the ``metagen testbed`` CLI).

``train_all`` runs, in order, policy -> draft -> ORM -> PRM (the PRM needs the policy's samples
and weights). Everything is seeded; on one CPU thread two runs give the same weights. The
family's middle size ``policy-s`` (:data:`~metagen.testbed.modeling.FAMILY`) is trained only when
asked for by name (``only="policy-s"``): every member of the family, draft included, gets the
policy's recipe at its own shape. So is ``revise`` (``only="revise"``), the policy fine-tuned to
revise a previous attempt (:mod:`metagen.testbed.revision`), from ``out_root/policy`` when that
folder holds a model, else from the shipped policy.

The ORM is a *generative verifier*: a second policy, same architecture, trained from seed
``seed + 1`` with the policy's recipe and then a second cosine cycle of as many steps (a warm
restart: on 500 validation problems best-of-16 by its confidence rose from greedy + 7.6 to
greedy + 12.4 points); a solution's outcome score is its confidence under that model
(:class:`~metagen.scorers.LikelihoodVerifier`, the weakest token). Sequence-classification ORMs
trained on graded policy samples (removed; see the git history of ``train_rm.py``) never learned to rank solutions of the
same problem at this scale (within-problem pair accuracy 0.44-0.51 in every variant tried; see
the testbed README), while an independently trained model's confidence does: its errors are not
the policy's, so it doubts the policy's confident mistakes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from metagen.errors import InvalidParameterError
from metagen.testbed.modeling import FAMILY, MODELS_DIR, NAMES, PIPELINE
from metagen.testbed.problems import make_problems

RECOMMENDED_TEMPERATURE = 0.8
Progress = Callable[[str, int, int, float], None]  # (stage, step, total, loss)


@dataclass(frozen=True, slots=True)
class RMDataConfig:
    """How the PRM's data is made from the policy (train split problems)."""

    problems: int = 1000
    k: int = 4  # samples per problem for the PRM's pool
    temperature: float = RECOMMENDED_TEMPERATURE
    prm_samples: int = 800
    rollouts: int = 4
    synthetic: int = 2000  # extra problems with a reference and a corrupted path
    add_references: bool = False  # also reference solutions as positives (for a weak policy)


def load_causal(folder: Path):
    import torch
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


#: The step-value head (``prm-head``): the LMs whose confidences it weighs, and its data (fewer
#: problems than the PRM's pool, twice the rollouts per step: each label is a mean of 8).
HEAD_SCORERS: tuple[str, ...] = ("orm", "policy-s")
HEAD_DATA = RMDataConfig(problems=400, k=4, prm_samples=800, rollouts=8, synthetic=0)

DEFAULT_OUT = Path("testbed_models")  # relative to the working directory, outside the package


def check_out_root(out_root: str | Path, overwrite_shipped: bool) -> Path:
    """``out_root`` as a Path; ``InvalidParameterError`` naming ``out`` when it is the package's
    own models folder (the shipped models) and ``overwrite_shipped`` is False."""
    root = Path(out_root)
    if root.resolve() == MODELS_DIR.resolve() and not overwrite_shipped:
        raise InvalidParameterError(
            "out", str(root), "is the folder of the testbed models shipped with metagen; "
            "training there overwrites them: give another --out, or --overwrite-shipped to "
            "replace them on purpose")
    return root


def _train_revise(root: Path, seed: int, progress: Progress | None) -> float:
    """Train ``root/revise`` from ``root/policy`` (else the shipped policy); seconds taken."""
    from metagen.testbed.modeling import model_path
    from metagen.testbed.revision import RevisionConfig, train_revision

    policy = root / "policy" if (root / "policy" / "config.json").is_file() \
        else model_path("policy")
    cfg = RevisionConfig(seed=seed)
    t0 = time.time()
    if progress is None:
        train_revision(policy, cfg, root / "revise")
    else:
        report = progress
        report("attempts", 0, 1, 0.0)
        train_revision(policy, cfg, root / "revise",
                       progress=lambda s, l: report("revise", s + 1, cfg.steps, l),
                       pool_progress=lambda: report("attempts", 1, 1, 0.0))
    return time.time() - t0


def train_all(only: str | None = None, seed: int = 0, out_root: str | Path = DEFAULT_OUT,
              progress: Progress | None = None, data: RMDataConfig = RMDataConfig(),
              overwrite_shipped: bool = False) -> dict[str, float]:
    """Train the requested models (the four of :data:`PIPELINE` by default; ``only`` may also
    name ``policy-s`` or ``revise``) into ``out_root/<name>`` (default ``./testbed_models``). Returns
    seconds per stage. The PRM stage reads the policy from
    ``out_root/policy``. The shipped models' folder is refused (``InvalidParameterError``
    naming ``out``, before any training) unless ``overwrite_shipped``."""
    from metagen.testbed.rm_data import (balance, mc_step_values, policy_samples,
                                         synthetic_samples, synthetic_step_samples)
    from metagen.testbed.train_lm import LMTrainConfig, train_lm
    from metagen.testbed.modeling import save_model_folder
    from metagen.testbed.train_rm import RMTrainConfig, train_prm

    if only is not None and only not in NAMES:
        raise InvalidParameterError("only", only, f"must be one of {NAMES}")
    root = check_out_root(out_root, overwrite_shipped)
    todo = [only] if only else list(PIPELINE)
    times: dict[str, float] = {}

    def cb(stage: str, total: int):
        return (lambda s, l: progress(stage, s + 1, total, l)) if progress else None

    lm_configs = {name: LMTrainConfig(arch=arch, seed=seed, restart_steps=0)  # the family
                  for name, arch in FAMILY.items()}
    lm_configs["orm"] = LMTrainConfig(seed=seed + 1, restart_steps=2400)  # the verifier
    for name, cfg in lm_configs.items():
        if name in todo:
            t0 = time.time()
            train_lm(cfg, out_dir=root / name, progress=cb(name, cfg.steps + cfg.restart_steps))
            times[name] = time.time() - t0
    if "revise" in todo:
        times["revise"] = _train_revise(root, seed, progress)
    if "prm-head" in todo:
        from metagen.testbed.train_head import train_head_folder
        t0 = time.time()
        train_head_folder(root, HEAD_SCORERS, HEAD_DATA, seed, progress=progress)
        times["prm-head"] = time.time() - t0
    if "prm" not in todo:
        return times
    policy = load_causal(root / "policy")
    probs = make_problems("train", data.problems, seed=1000 + seed)
    synthetic = synthetic_samples(make_problems("train", data.synthetic, seed=2000 + seed),
                                  random.Random(f"synthetic:{seed}"))

    t0 = time.time()
    if progress:
        progress("samples", 0, 1, 0.0)
    pool = policy_samples(policy, probs, data.k, data.temperature, seed=seed)
    if data.add_references:  # a weak policy has few correct samples: add reference solutions
        from metagen.testbed.rm_data import Sample
        ref_rng = random.Random(seed)
        pool += [Sample(p, ref_rng.choice(p.solutions), True) for p in probs]
    if progress:
        progress("samples", 1, 1, 0.0)
    chosen = balance(pool, random.Random(seed + 1))[: data.prm_samples]
    if progress:
        progress("rollouts", 0, 1, 0.0)
    step_data = mc_step_values(policy, chosen, data.rollouts, data.temperature, seed=seed)
    step_data += synthetic_step_samples(synthetic)
    if progress:
        progress("rollouts", 1, 1, 0.0)
    prm_cfg = RMTrainConfig(seed=seed, epochs=3)
    steps = prm_cfg.epochs * ((len(step_data) + prm_cfg.batch - 1) // prm_cfg.batch)
    save_model_folder(train_prm(root / "policy", step_data, prm_cfg, cb("prm", steps)),
                      root / "prm")
    times["prm"] = time.time() - t0
    return times
