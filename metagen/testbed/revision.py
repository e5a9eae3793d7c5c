"""A revision skill for the testbed policy (Snell et al. 2024): trained to rewrite a previous
attempt as a correct solution, so that sequential revision chains can be compared with parallel
sampling (:mod:`metagen.strategies.revision`).

An example is ``revision_prompt(format_prompt(p), attempt)`` -- the question, the attempt (its
``#### N`` line last), ``"\\nRevision:\\n"`` -- followed by a correct solution path of ``p`` (a
random one of ``p.solutions``) and ``<eos>``; the loss is on those revision tokens only. The
attempts are (a) the policy's own samples at T = 0.8 on train-split problems, wrong ones (what
revision is for) and right ones (so a right attempt is kept right), and (b) synthetic attempts
with one realistic mistake carried forward (:func:`~metagen.testbed.corrupt.corrupt_solution`)
on fresh train problems; ordinary examples (``prompt -> solution``, loss on the solution) are
mixed in so that first attempts do not degrade. Fine-tuned from the policy's weights with
:func:`~metagen.testbed.train_lm.train_cycle`. Deterministic given the seed (on one thread).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from metagen.errors import InvalidParameterError
from metagen.strategies.refine_prompts import revision_prompt
from metagen.testbed.problems import Problem, format_prompt, grade, iter_problems
from metagen.testbed.rm_data import Sample
from metagen.testbed.tokenizer import Codec
from metagen.testbed.train_lm import Example


@dataclass(frozen=True, slots=True)
class RevisionConfig:
    """The revision fine-tune: the attempt pool (``problems`` x ``k`` policy samples at
    ``temperature``), the mixture (``ordinary_frac`` plain examples, ``synthetic_frac``
    one-mistake attempts, the rest pooled policy samples, whose target is a random correct path,
or, for a right attempt with probability ``keep_right``, the attempt itself) and one cosine
cycle of ``steps``."""

    problems: int = 1000
    k: int = 2
    temperature: float = 0.8
    ordinary_frac: float = 0.3
    synthetic_frac: float = 0.2
    keep_right: float = 1.0  # chance that a right pooled attempt's target is itself
    steps: int = 600
    lr: float = 1e-3
    warmup: int = 30
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("problems", "k", "steps", "warmup"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidParameterError(name, v, "must be a positive integer")
        for name in ("ordinary_frac", "synthetic_frac", "keep_right"):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidParameterError(name, getattr(self, name), "must be in [0, 1]")
        if self.ordinary_frac + self.synthetic_frac > 1:
            raise InvalidParameterError("synthetic_frac", self.synthetic_frac,
                                        "ordinary_frac + synthetic_frac must be <= 1")


def supervised_example(codec: Codec, prompt: str, target: str) -> Example:
    """``(ids, weights)``: BOS and ``prompt`` (weight 0), then ``target`` and EOS (weight 1)."""
    ids = codec.encode(prompt)
    out = codec.encode(target, bos=False) + [codec.eos]
    return ids + out, [0.0] * len(ids) + [1.0] * len(out)


def revision_example(codec: Codec, problem: Problem, attempt: str, target: str) -> Example:
    """One revision example: the revision prompt of ``attempt`` (weight 0), then ``target``
    and EOS (weight 1)."""
    return supervised_example(codec, revision_prompt(format_prompt(problem), attempt), target)


def ordinary_example(codec: Codec, problem: Problem, target: str) -> Example:
    """A first attempt: the problem's prompt (weight 0), then ``target`` and EOS (weight 1)."""
    return supervised_example(codec, format_prompt(problem), target)


def revision_stream(pool: Sequence[Sample], cfg: RevisionConfig) -> Iterator[Example]:
    """Endless training examples in ``cfg``'s mixture; the pooled ``pool`` attempts are drawn
    uniformly, fresh train problems feed the ordinary and synthetic ones."""
    from metagen.testbed.corrupt import corrupt_solution

    if not pool:
        raise InvalidParameterError("pool", pool, "must hold at least one attempt")
    codec = Codec()
    rng = random.Random(f"revision:{cfg.seed}")
    fresh = iter_problems("train", 3000 + cfg.seed)
    while True:
        u = rng.random()
        if u < cfg.ordinary_frac:
            p = next(fresh)
            yield ordinary_example(codec, p, rng.choice(p.solutions))
        elif u < cfg.ordinary_frac + cfg.synthetic_frac:
            p = next(fresh)
            bad = corrupt_solution(rng.choice(p.solutions), p.answer, rng)
            if bad is not None:
                yield revision_example(codec, p, bad[0], rng.choice(p.solutions))
        else:
            s = pool[rng.randrange(len(pool))]
            keep = s.correct and rng.random() < cfg.keep_right
            yield revision_example(codec, s.problem, s.completion,
                                   s.completion if keep else rng.choice(s.problem.solutions))


def train_revision(policy_folder: str | Path, cfg: RevisionConfig,
                   out_dir: str | Path | None = None,
                   progress: Callable[[int, float], None] | None = None,
                   pool_progress: Callable[[], None] | None = None):
    """Fine-tune the policy at ``policy_folder`` into a reviser (see the module docstring);
    save it to ``out_dir`` when given. The pool is ``cfg.problems`` train problems (seed
    ``4000 + cfg.seed``) x ``cfg.k`` policy samples; ``pool_progress()`` is called once it is
    drawn."""
    import torch

    from metagen.testbed.modeling import save_model_folder
    from metagen.testbed.pipeline import load_causal
    from metagen.testbed.problems import make_problems
    from metagen.testbed.rm_data import policy_samples
    from metagen.testbed.train_lm import LMTrainConfig, training_rows, train_cycle

    torch.manual_seed(cfg.seed)
    model = load_causal(Path(policy_folder))
    problems = make_problems("train", cfg.problems, seed=4000 + cfg.seed)
    pool = policy_samples(model, problems, cfg.k, cfg.temperature, seed=cfg.seed)
    if pool_progress is not None:
        pool_progress()
    lm = LMTrainConfig(steps=cfg.steps, lr=cfg.lr, warmup=cfg.warmup, seed=cfg.seed)
    model.train()
    train_cycle(model, training_rows(lm, revision_stream(pool, cfg)), lm, cfg.steps, cfg.lr,
                cfg.warmup, progress=progress)
    model.eval()
    if out_dir is not None:
        save_model_folder(model, out_dir)
    return model


@dataclass(frozen=True, slots=True)
class RevisionRates:
    """How revising changes attempts: of ``wrong`` wrong attempts ``fixed`` became right, of
    ``right`` right ones ``broken`` became wrong."""

    wrong: int
    fixed: int
    right: int
    broken: int

    @property
    def fix_rate(self) -> float:
        return self.fixed / self.wrong if self.wrong else 0.0

    @property
    def break_rate(self) -> float:
        return self.broken / self.right if self.right else 0.0


def revision_rates(model, attempts: Sequence[Sample], temperature: float = 0.0,
                   seed: int = 0) -> RevisionRates:
    """One revision of every attempt by ``model`` (greedy by default), graded."""
    from metagen.testbed.sampler import sample

    prompts = [revision_prompt(format_prompt(a.problem), a.completion) for a in attempts]
    outs = sample(model, prompts, temperature=temperature, seed=seed)
    after = [grade(o, a.problem.answer) for o, a in zip(outs, attempts)]
    wrong = [ok for a, ok in zip(attempts, after) if not a.correct]
    right = [ok for a, ok in zip(attempts, after) if a.correct]
    return RevisionRates(len(wrong), sum(wrong), len(right), right.count(False))
