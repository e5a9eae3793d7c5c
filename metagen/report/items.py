"""The per-item view of one run (pure): what each strategy scored on the item, its candidates
(text, correct, reward scores, how often each was chosen), the votes per answer when the task's
answer key extracts answers, and the search tree of each tree strategy at each N.

Labels: a strategy's ``accuracy`` is labelled by the strategy's name, any other metric as
``"strategy metric"`` (e.g. ``"samples pass@k"``), the same labels as the curves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from metagen.answers.key import AnswerKey, group_by_canonical
from metagen.report.curves import COST_METRICS
from metagen.report.limits import ReportLimits, clip
from metagen.report.trees import display_tree

ResultRow = tuple[str, int, str, float, Any]  # strategy, n, metric, value, trace


def label(strategy: str, metric: str) -> str:
    """The name a (strategy, metric) goes by on the page."""
    return strategy if metric == "accuracy" else f"{strategy} {metric}"


def outcomes(results: Sequence[ResultRow]) -> dict[str, dict[str, Any]]:
    """label -> {"n", "value"} at the largest N the item has for it (cost rows left out)."""
    out: dict[str, dict[str, Any]] = {}
    for strategy, n, metric, value, _ in results:
        if metric in COST_METRICS:
            continue
        key = label(strategy, metric)
        if key not in out or n > out[key]["n"]:
            out[key] = {"n": n, "value": value}
    return out


def chosen_counts(results: Sequence[ResultRow]) -> dict[int, list[dict[str, Any]]]:
    """sample index -> [{"by": "label N=n", "times", "of"}]: how many of the subsets each
    subsampled strategy evaluated at N picked that sample."""
    out: dict[int, list[dict[str, Any]]] = {}
    for strategy, n, metric, _, trace in results:
        if not isinstance(trace, Mapping) or not isinstance(trace.get("chosen"), list):
            continue
        counts: Counter[int] = Counter(int(j) for j in trace["chosen"])
        for index, times in sorted(counts.items()):
            out.setdefault(index, []).append({
                "by": f"{label(strategy, metric)} N={n}", "times": times,
                "of": trace.get("subsets", len(trace["chosen"]))})
    return out


def votes(samples: Sequence[Mapping[str, Any]], scores: Mapping[int, Mapping[str, float]],
          key: AnswerKey) -> tuple[list[str | None], list[dict[str, Any]]]:
    """(each sample's extracted answer as text, the answer classes): each class's answer (its
    first member's), vote count, correctness of its first member, summed scores per scorer and
    member sample indices; sorted by votes, then first appearance. Samples whose answer the key
    cannot extract abstain."""
    answers = [_extract(key, s["text"]) for s in samples]
    classes = group_by_canonical(answers, key.match, key.canonical)
    table: dict[int, dict[str, Any]] = {}
    for sample, answer, cls in zip(samples, answers, classes):
        if cls is None:
            continue
        row = table.setdefault(cls, {"answer": str(answer), "votes": 0,
                                     "correct": sample["correct"], "scores": {},
                                     "members": []})
        row["votes"] += 1
        row["members"].append(sample["index"])
        for scorer, value in scores.get(sample["index"], {}).items():
            row["scores"][scorer] = row["scores"].get(scorer, 0.0) + value
    ranked = sorted(table.items(), key=lambda kv: (-kv[1]["votes"], kv[0]))
    return [None if a is None else str(a) for a in answers], [row for _, row in ranked]


def _extract(key: AnswerKey, text: str) -> Any:
    try:
        return key.extract(text)
    except (ValueError, TypeError, ArithmeticError):  # an unparseable answer abstains
        return None


def searches(results: Sequence[ResultRow], limits: ReportLimits) -> list[dict[str, Any]]:
    """One entry per (strategy, N) whose trace holds a search tree: its final text (cut), value,
    compute and the display tree (:func:`~metagen.report.trees.display_tree`)."""
    out = []
    for strategy, n, metric, value, trace in results:
        inner = trace.get("trace") if isinstance(trace, Mapping) else None
        if not isinstance(inner, Mapping) or not isinstance(inner.get("tree"), Mapping):
            continue
        text, cut = clip(str(trace.get("text") or ""), limits.max_text_chars)
        tree, hidden = display_tree(inner["tree"], limits.max_tree_nodes, limits.max_step_chars)
        usage = trace.get("usage") if isinstance(trace.get("usage"), Mapping) else {}
        out.append({"label": label(strategy, metric), "n": n, "value": value, "text": text,
                    "text_cut": cut, "tokens": usage.get("generated_tokens"), "tree": tree,
                    "hidden_nodes": hidden})
    return out


def item_view(item_id: str, difficulty: str | None, samples: Sequence[Mapping[str, Any]],
              scores: Mapping[int, Mapping[str, float]], results: Sequence[ResultRow],
              key: AnswerKey | None, limits: ReportLimits, detail: bool) -> dict[str, Any]:
    """One item for the page. Without ``detail`` (past ``limits.max_items``) only its id,
    difficulty and outcomes; with it also ``candidates`` (the first ``max_candidates``, texts
    cut to ``max_text_chars``), ``candidates_total``, ``votes`` (None without an answer key or
    samples) and ``searches``."""
    view: dict[str, Any] = {"id": item_id, "difficulty": difficulty,
                            "outcomes": outcomes(results), "detail": detail}
    if not detail:
        return view
    answers, classes = (votes(samples, scores, key) if key is not None and samples
                        else ([None] * len(samples), None))
    chosen = chosen_counts(results)
    candidates = []
    for sample, answer in list(zip(samples, answers))[:limits.max_candidates]:
        text, cut = clip(sample["text"], limits.max_text_chars)
        candidates.append({"index": sample["index"], "text": text, "text_cut": cut,
                           "tokens": sample["tokens"], "finish_reason": sample["finish_reason"],
                           "correct": sample["correct"], "answer": answer,
                           "scores": dict(scores.get(sample["index"], {})),
                           "chosen": chosen.get(sample["index"], [])})
    view.update(candidates=candidates, candidates_total=len(samples), votes=classes,
                searches=searches(results, limits))
    return view
