"""Synthetic wrong solutions for reward-model training: one mistake, carried forward."""

import math
import random

from metagen.testbed import grade, make_problems
from metagen.testbed.corrupt import corrupt_solution
from metagen.testbed.paths import is_well_formed, step_is_correct
from metagen.testbed.rm_data import synthetic_samples, synthetic_step_samples


def test_golden_slip_is_carried_forward():
    sol = "15 + 17 = 32\n32 * 3 = 96\n96 - 2 = 94\n#### 94"
    for seed in range(200):
        out = corrupt_solution(sol, 94, random.Random(seed))
        if out is not None and out[1] == 0 and "15 + 17 = 32" not in out[0]:
            text, _ = out
            lines = text.split("\n")
            a = int(lines[0].split(" = ")[1])  # the changed first result ...
            assert lines[1].startswith(f"{a} * 3 = ")  # ... is what the next line uses
            return
    raise AssertionError("no first-line corruption drawn in 200 seeds")


def test_every_corruption_is_well_formed_wrong_and_right_from_the_mistake_on():
    rng = random.Random(0)
    made = 0
    for p in make_problems("train", 200, seed=3):
        sol = rng.choice(p.solutions)
        out = corrupt_solution(sol, p.answer, rng)
        if out is None:
            continue
        made += 1
        text, first = out
        assert is_well_formed(text) and not grade(text, p.answer)
        good, bad = sol.split("\n"), text.split("\n")
        assert bad[:first] == good[:first] and bad[first] != good[first]
        # every line after the mistake is computed correctly from the (changed) values
        assert all(step_is_correct(ln) for ln in bad[first + 1:-1])
    assert made >= 120  # most draws are feasible


def test_synthetic_prm_labels_mask_unknown_values():
    pairs = synthetic_samples(make_problems("train", 30, seed=4), random.Random(1))
    assert pairs and len(pairs) % 2 == 0
    for step in synthetic_step_samples(pairs):
        v = step.values
        if step.sample.correct:
            assert v[-1] == 1.0 and all(math.isnan(x) for x in v[:-1])
        else:
            known = [x for x in v if not math.isnan(x)]
            assert known and all(x == 0.0 for x in known) and v[-1] == 0.0
            first = next(i for i, x in enumerate(v) if not math.isnan(x))
            assert all(not math.isnan(x) for x in v[first:])  # 0 from the mistake on
