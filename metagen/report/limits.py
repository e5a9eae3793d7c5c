"""How much of a run the report page carries: per-item detail is capped so that a run of
thousands of items and megabyte outputs still gives a page a browser opens. Every cap that cut
something is counted in the model and said on the page."""

from __future__ import annotations

from dataclasses import dataclass, fields

from metagen.errors import InvalidParameterError


@dataclass(slots=True, frozen=True)
class ReportLimits:
    """``max_items``: items per run with their candidates and trees (the others are listed
    without them); ``max_candidates``: candidates shown per item; ``max_text_chars``: characters
    of a candidate's or a search's final text; ``max_step_chars``: characters of one tree node's
    step; ``max_tree_nodes``: nodes per search tree (breadth first). Validated on construction:
    each a positive integer, else ``InvalidParameterError`` naming it."""

    max_items: int = 300
    max_candidates: int = 64
    max_text_chars: int = 2000
    max_step_chars: int = 400
    max_tree_nodes: int = 400

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(f.name, value, "must be a positive integer")


def clip(text: str, limit: int) -> tuple[str, bool]:
    """(``text`` cut to ``limit`` characters, whether it was cut)."""
    return (text, False) if len(text) <= limit else (text[:limit], True)
