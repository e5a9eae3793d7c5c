"""Evaluation of the testbed policy: greedy accuracy by difficulty, pass@k, self-consistency@k."""

from __future__ import annotations

from collections import Counter, defaultdict

from metagen.tasks.answer import extract_answer
from metagen.testbed.paths import is_well_formed
from metagen.testbed.problems import Problem, format_prompt, grade
from metagen.testbed.sampler import sample


def majority(answers: list[str | None]) -> str | None:
    """Most frequent non-None answer; ties go to the one seen first (Wang et al. 2023)."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None
    best = max(votes.values())
    return next(a for a in answers if a is not None and votes[a] == best)


def greedy_eval(model, problems: list[Problem], batch_size: int = 256) -> dict:
    """``greedy_accuracy``, ``by_difficulty`` (str(d) -> accuracy), ``n``, and the completions."""
    outs = sample(model, [format_prompt(p) for p in problems], temperature=0.0,
                  batch_size=batch_size)
    ok = [grade(o, p.answer) for o, p in zip(outs, problems)]
    by: dict[int, list[bool]] = defaultdict(list)
    for p, c in zip(problems, ok):
        by[p.difficulty].append(c)
    return {"greedy_accuracy": sum(ok) / max(1, len(ok)),
            "by_difficulty": {str(d): sum(v) / len(v) for d, v in sorted(by.items())},
            "n": len(problems), "completions": outs}


def sampled_eval(model, problems: list[Problem], k: int = 16, temperature: float = 0.7,
                 seed: int = 0, batch_size: int = 512) -> dict:
    """pass@k, self-consistency@k (majority vote), mean sample accuracy, well-formed rate."""
    prompts = [format_prompt(p) for p in problems for _ in range(k)]
    outs = sample(model, prompts, temperature=temperature, seed=seed, batch_size=batch_size)
    passk = sc = 0
    acc: float = 0
    wf: float = 0
    by_sc: dict[int, list[bool]] = defaultdict(list)
    for i, p in enumerate(problems):
        group = outs[i * k:(i + 1) * k]
        correct = [grade(o, p.answer) for o in group]
        passk += any(correct)
        acc += sum(correct) / k
        wf += sum(is_well_formed(o) for o in group) / k
        vote = majority([extract_answer(o) for o in group])
        hit = vote is not None and grade(f"#### {vote}", p.answer)
        sc += hit
        by_sc[p.difficulty].append(hit)
    n = max(1, len(problems))
    return {f"pass@{k}": passk / n, f"sc@{k}": sc / n, "sample_accuracy": acc / n,
            "well_formed": wf / n, "temperature": temperature, "k": k,
            "sc_by_difficulty": {str(d): sum(v) / len(v) for d, v in sorted(by_sc.items())}}
