"""The candidates of the compute-optimal frontier: every (model, strategy, N) of finished
``metagen eval`` runs of several models on the same task and items, with its per-item accuracy
and per-item FLOPs (Snell et al. 2024; Wu et al. 2024, "Inference Scaling Laws").

Each run folder is labelled by its model: the last path component of the run config's
``model.path`` (a server's ``model`` name when it has no path), or a label given as
``LABEL=DIR``. Runs must share the task, its data, its prompt template and the done items
(:func:`~metagen.eval.runset.load_matching`); two runs of one model may hold different
strategies (the parallel run and the step-search run), the same (model, strategy) twice is
refused naming ``runs``. FLOPs rows are each run's own (computed with its own model's shape), so
they compare across model sizes. A (model, strategy, N) lacking an accuracy or a FLOPs value for
some item (a remote policy has no FLOP count) is no candidate; it is listed in ``skipped``.

The candidates are pooled into ONE :class:`~metagen.eval.runrows.RunRows` whose strategies are
the candidates' names ``model/strategy@N``, all at the one budget slot :data:`SLOT`, and whose
cost map (``tokens``) holds FLOPs: so the per-strategy helpers of :mod:`metagen.eval.breakdown`
and :mod:`metagen.compute_optimal` (the winner, the stderr guard, the bins) apply to them as they
are. Its pass@1 and mean reward score per item (for ``oracle`` / ``predicted`` bins) are the mean
over the models of each model's own (averaged over its runs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from metagen.errors import InvalidParameterError
from metagen.eval.cost import FLOPS
from metagen.eval.metrics import ACCURACY
from metagen.eval.runrows import RunRows
from metagen.eval.runset import (load_matching, mean_over, merge_rows, refuse_repeats,
                                 run_config)

SLOT = 0  # the "N" of every pooled candidate: the budget axis is FLOPs, not N
Entry = Union[str, Path, tuple[Union[str, None], Union[str, Path]]]  # DIR or (LABEL|None, DIR)


@dataclass(slots=True, frozen=True)
class Candidates:
    """``pooled``: the candidates as strategies at :data:`SLOT` (``tokens`` = FLOPs per item);
    ``parts``: name -> (model, strategy, N); ``runs``: (folder, model label) as loaded;
    ``skipped``: names of (model, strategy, N) without a value for every item."""

    pooled: RunRows
    parts: Mapping[str, tuple[str, str, int]]
    runs: tuple[tuple[str, str], ...]
    skipped: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """The candidates' names, sorted."""
        return sorted(self.parts)

    def mean_flops(self, name: str, items: Sequence[str]) -> float:
        """Mean FLOPs per item of candidate ``name`` over ``items`` (every item has one)."""
        return math.fsum(self.pooled.tokens[(i, name, SLOT)] for i in items) / len(items)


def candidate_name(model: str, strategy: str, n: int) -> str:
    """``model/strategy@N``."""
    return f"{model}/{strategy}@{n}"


def parse_labelled(text: str) -> tuple[str | None, str]:
    """``DIR`` -> (None, DIR); ``LABEL=DIR`` -> (LABEL, DIR), unless the whole text is an
    existing folder. An empty label or folder raises ``InvalidParameterError`` naming
    ``label``."""
    if Path(text).is_dir() or "=" not in text:
        return None, text
    label, _, folder = text.partition("=")
    if not label.strip() or not folder.strip() or "/" in label:
        raise InvalidParameterError("label", text, "must be DIR or LABEL=DIR with a non-empty "
                                    "LABEL (no '/') and DIR")
    return label.strip(), folder


def model_label(config: Mapping[str, Any], folder: str) -> str:
    """The default label of a run: the last path component of its ``model.path``, else its
    server ``model`` name; ``InvalidParameterError`` naming ``label`` when it has neither."""
    model = config.get("model")
    model = model if isinstance(model, Mapping) else {}
    found = Path(str(model["path"])).name if model.get("path") else model.get("model")
    if not found:
        raise InvalidParameterError("label", folder, "its run config names no model; give "
                                    "LABEL=DIR")
    return str(found)


def model_labels(entries: Sequence[Entry]) -> list[str]:
    """Each entry's model label (given, else :func:`model_label` of its run config)."""
    pairs = [e if isinstance(e, tuple) else (None, e) for e in entries]
    return [label or model_label(run_config(folder), str(folder)) for label, folder in pairs]


def load_candidates(entries: Sequence[Entry]) -> Candidates:
    """The :class:`Candidates` of ``entries`` (each a run folder or a (label or None, folder)
    pair; see the module docstring for what is refused)."""
    pairs = [e if isinstance(e, tuple) else (None, e) for e in entries]
    loaded = load_matching([folder for _, folder in pairs])
    labelled = [(folder, label or model_label(config, folder), run)
                for (label, _), (folder, config, run) in zip(pairs, loaded)]
    refuse_repeats(labelled)
    by_model: dict[str, list[RunRows]] = {}
    for _, label, run in labelled:
        by_model.setdefault(label, []).append(run)
    models = {label: merge_rows(runs, (ACCURACY, FLOPS)) for label, runs in by_model.items()}
    return pool_candidates(models, tuple((folder, label) for folder, label, _ in labelled))


def pool_candidates(models: Mapping[str, RunRows], runs: tuple[tuple[str, str], ...] = ()
                    ) -> Candidates:
    """The :class:`Candidates` of ``models`` (model label -> its runs merged, with their
    accuracy and FLOPs rows); ``runs``: the (folder, label) pairs they came from."""
    first = next(iter(models.values()))
    items = set(first.labels)
    values: dict[tuple[str, str], dict[str, float]] = {}  # (name, metric) -> item -> value
    parts: dict[str, tuple[str, str, int]] = {}
    for label, run in models.items():
        for item, strategy, n, metric, value in run.rows:
            name = candidate_name(label, strategy, n)
            parts[name] = (label, strategy, n)
            values.setdefault((name, metric), {})[item] = value
    complete = sorted(name for name in parts if all(
        set(values.get((name, m), {})) >= items for m in (ACCURACY, FLOPS)))
    if not complete:
        raise InvalidParameterError("runs", [f for f, _ in runs], "no (model, strategy, N) "
                                    "has an accuracy and a FLOP count for every item")
    rows = tuple((i, name, SLOT, ACCURACY, v) for name in complete
                 for i, v in sorted(values[(name, ACCURACY)].items()) if i in items)
    flops = {(i, name, SLOT): v for name in complete
             for i, v in values[(name, FLOPS)].items() if i in items}
    pooled = RunRows(rows, dict(first.labels), mean_over(list(models.values()), "pass1"),
                     mean_over(list(models.values()), "mean_score"), flops)
    return Candidates(pooled, {n: parts[n] for n in complete}, runs,
                      tuple(sorted(set(parts) - set(complete))))
