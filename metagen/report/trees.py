"""A search tree (:meth:`~metagen.strategies.tree.SearchTree.to_dict`) cut for display (pure):
at most ``max_nodes`` nodes kept breadth first (a node whose children were dropped says how
many), each node's step cut to ``max_step_chars``, only the fields the page shows."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from metagen.report.limits import clip

_FIELDS = ("id", "depth", "score", "value", "visits", "terminal", "pruned", "tokens")


def display_tree(tree: Mapping[str, Any], max_nodes: int, max_step_chars: int
                 ) -> tuple[dict[str, Any], int]:
    """(the cut tree, number of nodes dropped). Each node: the fields above, ``step``,
    ``step_cut`` (bool), ``children`` and ``hidden_children`` (count dropped)."""
    root = _node(tree, max_step_chars)
    kept, dropped = 1, 0
    queue: deque[tuple[Mapping[str, Any], dict[str, Any]]] = deque([(tree, root)])
    while queue:
        source, target = queue.popleft()
        for child in source.get("children") or []:
            if kept >= max_nodes:
                target["hidden_children"] += 1
                dropped += _size(child)
                continue
            node = _node(child, max_step_chars)
            target["children"].append(node)
            kept += 1
            queue.append((child, node))
    return root, dropped


def _node(source: Mapping[str, Any], max_step_chars: int) -> dict[str, Any]:
    step, cut = clip(str(source.get("step") or ""), max_step_chars)
    out: dict[str, Any] = {k: source.get(k) for k in _FIELDS}
    out.update(step=step, step_cut=cut, children=[], hidden_children=0)
    return out


def _size(tree: Mapping[str, Any]) -> int:
    size, stack = 0, [tree]
    while stack:
        node = stack.pop()
        size += 1
        stack.extend(node.get("children") or [])
    return size
