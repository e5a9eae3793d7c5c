"""Training data of the process reward model, made from policy samples graded by the testbed
grader: for each step prefix, the fraction of ``rollouts`` policy completions from that prefix
that reach the right answer (Math-Shepherd, Wang et al. 2024); the last step's label is the
sample's own correctness.
"""

from __future__ import annotations

from dataclasses import dataclass

from metagen.testbed.metrics import split_steps
from metagen.testbed.problems import Problem, format_prompt, grade
from metagen.testbed.sampler import sample


@dataclass(frozen=True, slots=True)
class Sample:
    problem: Problem
    completion: str
    correct: bool


@dataclass(frozen=True, slots=True)
class StepSample:
    sample: Sample
    steps: tuple[str, ...]
    values: tuple[float, ...]  # Monte-Carlo estimate of P(correct | prefix up to step i)


def policy_samples(policy, problems: list[Problem], k: int, temperature: float, seed: int,
                   batch_size: int = 256) -> list[Sample]:
    prompts = [format_prompt(p) for p in problems for _ in range(k)]
    outs = sample(policy, prompts, temperature=temperature, seed=seed, batch_size=batch_size)
    return [Sample(problems[i // k], o, grade(o, problems[i // k].answer)) for i, o in enumerate(outs)]


def balance(samples: list[Sample], rng) -> list[Sample]:
    """Equal numbers of correct and incorrect samples (the larger class is subsampled)."""
    pos = [s for s in samples if s.correct]
    neg = [s for s in samples if not s.correct]
    m = min(len(pos), len(neg))
    chosen = rng.sample(pos, m) + rng.sample(neg, m)
    rng.shuffle(chosen)
    return chosen


def synthetic_samples(problems: list[Problem], rng) -> list[tuple[Sample, int | None]]:
    """For each problem with a feasible corruption: a reference path (correct; index ``None``)
    and a path with one realistic mistake carried forward
    (:func:`~metagen.testbed.corrupt.corrupt_solution`; wrong, with the index of its first wrong
    line). Within-problem contrasts that the policy's own samples give too rarely."""
    from metagen.testbed.corrupt import corrupt_solution

    out: list[tuple[Sample, int | None]] = []
    for p in problems:
        bad = corrupt_solution(rng.choice(p.solutions), p.answer, rng)
        if bad is not None:
            out += [(Sample(p, rng.choice(p.solutions), True), None),
                    (Sample(p, bad[0], False), bad[1])]
    return out


def synthetic_step_samples(pairs: list[tuple[Sample, int | None]]) -> list[StepSample]:
    """PRM labels for :func:`synthetic_samples`: a step at or after the first wrong line is
    labelled 0 (a prefix holding an error cannot reach the answer except by chance); steps of a
    correct path and steps before the mistake are unlabelled (``nan``, no loss) since their
    Monte-Carlo value under the policy is unknown, except a correct path's final line (1)."""
    out = []
    for s, first in pairs:
        steps = tuple(split_steps(s.completion))
        if first is None:
            values = [float("nan")] * (len(steps) - 1) + [1.0]
        else:
            values = [float("nan") if i < first else 0.0 for i in range(len(steps))]
        out.append(StepSample(s, steps, tuple(values)))
    return out


def mc_step_values(policy, samples: list[Sample], rollouts: int, temperature: float, seed: int,
                   batch_size: int = 256, max_steps: int = 12) -> list[StepSample]:
    """Monte-Carlo value of every step prefix (one batched sampling pass over all prefixes)."""
    jobs: list[tuple[int, int, str]] = []  # (sample index, step index, prefix prompt)
    split = [tuple(split_steps(s.completion))[:max_steps] for s in samples]
    for si, (s, steps) in enumerate(zip(samples, split)):
        for i in range(len(steps) - 1):
            if not steps[i].endswith("\n"):
                continue
            prefix = format_prompt(s.problem) + "".join(steps[:i + 1])
            jobs.extend((si, i, prefix) for _ in range(rollouts))
    outs = sample(policy, [j[2] for j in jobs], temperature=temperature, seed=seed,
                  batch_size=batch_size)
    hits: dict[tuple[int, int], list[bool]] = {}
    for (si, i, prefix), out in zip(jobs, outs):
        full = prefix[len(format_prompt(samples[si].problem)):] + out
        hits.setdefault((si, i), []).append(grade(full, samples[si].problem.answer))
    result = []
    for si, (s, steps) in enumerate(zip(samples, split)):
        values = []
        for i in range(len(steps)):
            if i == len(steps) - 1:
                values.append(1.0 if s.correct else 0.0)
            else:
                h = hits.get((si, i), [])
                values.append(sum(h) / len(h) if h else 0.0)
        result.append(StepSample(s, steps, tuple(values)))
    return result
