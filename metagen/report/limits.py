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
    step; ``max_tree_nodes``: nodes per search tree (breadth first); ``max_detail_chars``: item
    detail (candidates, votes, trees) of the whole page, in characters of JSON: once spent, the
    remaining items of every run are listed without detail. Validated on construction:
    each a positive integer, else ``InvalidParameterError`` naming it."""

    max_items: int = 300
    max_candidates: int = 32
    max_text_chars: int = 1500
    max_step_chars: int = 300
    max_tree_nodes: int = 200
    max_detail_chars: int = 30_000_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(f.name, value, "must be a positive integer")


def clip(text: str, limit: int) -> tuple[str, bool]:
    """(``text`` cut to ``limit`` characters, whether it was cut)."""
    return (text, False) if len(text) <= limit else (text[:limit], True)
