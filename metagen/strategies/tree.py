"""The search tree shared by every step-level search (beam, DVTS, best-first, ToT, MCTS, REBASE).

A :class:`SearchNode` is one step of a partial solution: its text, its place in the tree, the
process-reward value of the path ending at it, MCTS statistics, and the tokens spent on it. A
:class:`SearchTree` owns the nodes of one prompt and hands out ids in creation order, so a trace
shows the order in which the search grew the tree. ``to_dict`` is JSON-serialisable (plain
numbers, strings, lists), for reports that draw the tree.

The tree is the one place that builds the prompt of a node's next step
(:meth:`SearchTree.prompt_for`): the root prompt extended by the steps so far, so a text prompt
is continued as text and a chat prompt as the assistant's partial answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from metagen.generators.base import Prompt, extend_prompt


@dataclass(slots=True, eq=False)
class SearchNode:
    """One step. The root has ``step == ''`` and depth 0.

    ``score`` is the aggregated step score of the whole path (``None`` until scored);
    ``step_scores`` the per-step scores the scorer gave for that path. ``visits`` and
    ``value_sum`` are MCTS statistics. ``tokens`` counts the tokens generated for this step,
    ``extra_tokens`` those spent on it without becoming tree text (lookahead, rollouts).
    ``group`` tags the DVTS subtree, ``tree`` the prompt's index in the batch. ``expanded_at``
    is the search step that expanded it.
    """

    id: int
    step: str = ""
    parent: SearchNode | None = None
    depth: int = 0
    score: float | None = None
    step_scores: list[float] | None = None
    prior: float = 1.0
    visits: int = 0
    value_sum: float = 0.0
    terminal: bool = False
    pruned: bool = False
    tokens: int = 0
    extra_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    logprob: float | None = None
    finish_reason: str | None = None
    group: int = 0
    tree: int = 0
    expanded_at: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    children: list[SearchNode] = field(default_factory=list)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def q(self) -> float:
        """Mean backed-up value (0 when unvisited)."""
        return self.value_sum / self.visits if self.visits else 0.0

    def path(self) -> list[SearchNode]:
        """Nodes from the root's first child down to this node (the root itself excluded)."""
        out: list[SearchNode] = []
        node: SearchNode | None = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def steps(self) -> list[str]:
        """The step texts of the path (empty for the root)."""
        return [n.step for n in self.path()]

    def text(self) -> str:
        """The partial solution: all steps of the path, concatenated."""
        return "".join(self.steps())

    def walk(self) -> Iterator[SearchNode]:
        """This node and its descendants, depth first, children in creation order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly nested dict of this subtree."""
        out: dict[str, Any] = {
            "id": self.id, "step": self.step, "depth": self.depth, "score": self.score,
            "step_scores": None if self.step_scores is None else list(self.step_scores),
            "visits": self.visits, "value": self.q if self.visits else None,
            "prior": self.prior, "terminal": self.terminal, "pruned": self.pruned,
            "tokens": self.tokens, "extra_tokens": self.extra_tokens,
            "finish_reason": self.finish_reason, "group": self.group,
            "expanded_at": self.expanded_at,
        }
        if self.info:
            out["info"] = dict(self.info)
        out["children"] = [c.to_dict() for c in self.children]
        return out


class SearchTree:
    """The nodes of one prompt's search. Ids are given in creation order (root = 0)."""

    __slots__ = ("prompt", "index", "root", "_next_id")

    def __init__(self, prompt: Prompt, index: int = 0) -> None:
        self.prompt = prompt
        self.index = index
        self.root = SearchNode(id=0, tree=index)
        self._next_id = 1

    def prompt_for(self, node: SearchNode, extra: Sequence[str] = ()) -> Prompt:
        """The prompt that continues ``node``'s partial solution (then the ``extra`` steps).

        A text prompt gets the steps appended; a chat prompt gets them as the assistant's partial
        answer (appended to a final assistant message, else as a new one), which generators
        continue without an end-of-turn: through the chat template locally, through
        ``continue_final_message`` on servers. The root with no ``extra`` is the prompt itself
        (a chat model starts a new assistant turn). The prompt is never mutated.
        """
        return extend_prompt(self.prompt, node.text() + "".join(extra))

    def add(self, parent: SearchNode, step: str, **fields: Any) -> SearchNode:
        """A new child of ``parent`` (appended last); ``fields`` set the node's attributes."""
        fields.setdefault("group", parent.group)
        fields["tree"] = self.index
        node = SearchNode(id=self._next_id, step=step, parent=parent, depth=parent.depth + 1,
                          **fields)
        self._next_id += 1
        parent.children.append(node)
        return node

    def __len__(self) -> int:
        return self._next_id

    def nodes(self) -> list[SearchNode]:
        return list(self.root.walk())

    def terminal_leaves(self) -> list[SearchNode]:
        """Terminal nodes in id order."""
        return sorted((n for n in self.root.walk() if n.terminal), key=lambda n: n.id)

    def generated_tokens(self) -> int:
        return sum(n.tokens + n.extra_tokens for n in self.root.walk())

    def to_dict(self) -> dict[str, Any]:
        return self.root.to_dict()
