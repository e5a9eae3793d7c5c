"""Greedy accuracy of the policy family (:data:`~metagen.testbed.modeling.FAMILY`), one row per
size, on the same problems: how accuracy by difficulty grows with parameters."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.testbed.evaluate import greedy_eval
from metagen.testbed.modeling import FAMILY, MODELS_DIR, load_model, require_model
from metagen.testbed.problems import make_problems


def check_family_names(names: tuple[str, ...], root: Path) -> None:
    """Before any work: every name is a family member (``InvalidParameterError`` naming
    ``model``) and its folder under ``root`` holds a model (``ModelLoadError`` naming the model
    and the command that trains it)."""
    for name in names:
        if name not in FAMILY:
            raise InvalidParameterError("model", name, f"must be one of {tuple(FAMILY)}")
        require_model(name, root / name)


def family_greedy(names: tuple[str, ...] = tuple(FAMILY), split: str = "test", limit: int = 500,
                  seed: int = 0, root: str | Path = MODELS_DIR) -> list[dict[str, Any]]:
    """One row per name, in the family's order (small to large), each over the same ``limit``
    problems of ``split``: ``model``, ``params`` (counted on the loaded model),
    ``greedy_accuracy``, ``by_difficulty`` (str(d) -> accuracy), ``n``, ``seconds`` (the greedy
    pass). Every folder is checked (:func:`check_family_names`) before any model runs."""
    root = Path(root)
    ordered = tuple(name for name in FAMILY if name in names)
    check_family_names(tuple(names), root)
    problems = make_problems(split, limit, seed=seed)  # type: ignore[arg-type]
    rows = []
    for name in ordered:
        model = load_model(name, root / name)  # type: ignore[arg-type]
        start = time.perf_counter()
        result = greedy_eval(model, problems)
        rows.append({"model": name, "params": sum(p.numel() for p in model.parameters()),
                     "greedy_accuracy": result["greedy_accuracy"],
                     "by_difficulty": result["by_difficulty"], "n": result["n"],
                     "seconds": time.perf_counter() - start})
    return rows


def family_text(rows: list[dict[str, Any]]) -> str:
    """The rows as a table: model, parameters, greedy accuracy, accuracy by difficulty."""
    levels = sorted({d for r in rows for d in r["by_difficulty"]}, key=int)
    lines = [f"{'model':<10} {'params':>10} {'greedy':>7}  "
             + " ".join(f"{'d' + d:>5}" for d in levels)]
    for r in rows:
        lines.append(f"{r['model']:<10} {r['params']:>10,} {r['greedy_accuracy']:>7.3f}  "
                     + " ".join(f"{r['by_difficulty'].get(d, float('nan')):>5.2f}"
                                for d in levels))
    return "\n".join(lines)
