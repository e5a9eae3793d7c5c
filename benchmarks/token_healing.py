"""Token healing on the testbed policy: does a prompt cut inside the model's own answer continue
to the same answer?

``python -m benchmarks.token_healing [--problems N] [--json PATH]``

For each of N test problems the policy's greedy answer ``T`` is computed; then the prompt is
extended with ``T[:j]`` for every cut ``j`` of two kinds: after a space (``"10 - 7 "``: the
tokenizer writes the space into the next word's token, so a prompt ending in one is an unnatural
boundary) and inside one of ``T``'s own tokens (``"Ton"`` of ``"Tony"``).
Each cut prompt is decoded greedily without healing (``plain``), with ``token_healing=True``
(``healed``: one token backed up over) and with ``token_healing=2`` (``healed2``); the healed
tokens count in ``max_tokens``, so the healed sides get that many more. Reported per kind: the fraction of
cuts whose ``T[:j] + continuation`` starts with ``T`` (the model's answer is reproduced), and the
fraction whose final answer grades correct (``uncut_accuracy``: the uncut answers' accuracy over
the same cuts, what a reproduced answer scores; a continuation may run past ``T``'s own
``max_tokens`` cut, so it can grade a little higher).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import metagen
from metagen.generators.local import LocalGenerator
from metagen.generators.tokenize import continuation_text, encode_prompt
from metagen.testbed.problems import format_prompt, grade, make_problems
from metagen.types import SamplingParams

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"


def cuts(text: str, boundaries: set[int]) -> dict[str, list[int]]:
    """Cut positions in ``text`` by kind (see the module docstring); ``boundaries`` are the
    character offsets between its tokens."""
    return {"after_space": [j for j in range(1, len(text)) if text[j - 1] == " "],
            "mid_token": [j for j in range(1, len(text)) if j not in boundaries]}


def token_boundaries(tokenizer: Any, prompt_ids: list[int], ids: tuple[int, ...]) -> set[int]:
    """Character offsets in the continuation text where one of ``ids`` ends."""
    return {len(continuation_text(tokenizer, prompt_ids, ids[:m])) for m in range(len(ids) + 1)}


def run(n: int, max_tokens: int = 48) -> dict[str, Any]:
    problems = make_problems("test", n, seed=0)
    prompts = [format_prompt(p) for p in problems]
    with LocalGenerator.from_pretrained(POLICY) as gen:
        whole = [c[0] for c in gen.generate(prompts, SamplingParams(
            temperature=0.0, max_tokens=max_tokens))]
        answers = [c.text for c in whole]
        kinds = [cuts(c.text, token_boundaries(gen.tokenizer, encode_prompt(gen.tokenizer, p),
                                               c.token_ids)) for c, p in zip(whole, prompts)]
        out: dict[str, Any] = {"problems": n, "accuracy": sum(
            grade(a, p.answer) for a, p in zip(answers, problems)) / n}
        for kind in ("after_space", "mid_token"):
            items = [(i, j) for i, k in enumerate(kinds) for j in k[kind]]
            row: dict[str, Any] = {"cuts": len(items), "uncut_accuracy": sum(
                grade(answers[i], problems[i].answer) for i, _ in items) / max(len(items), 1)}
            for name, heal in (("plain", 0), ("healed", 1), ("healed2", 2)):
                params = SamplingParams(temperature=0.0, max_tokens=max_tokens + heal,
                                        token_healing=heal)
                conts = gen.generate([prompts[i] + answers[i][:j] for i, j in items], params)
                texts = [answers[i][:j] + c[0].text for (i, j), c in zip(items, conts)]
                row[f"{name}_reproduced"] = sum(
                    t.startswith(answers[i]) for (i, _), t in zip(items, texts)) / max(len(items), 1)
                row[f"{name}_accuracy"] = sum(
                    grade(t, problems[i].answer) for (i, _), t in zip(items, texts)) / max(
                        len(items), 1)
            out[kind] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = run(args.problems)
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
