"""A draft tree's layout in its row's verification step (pure functions).

The tree is a caterpillar: a chain of drafts ``c_1 .. c_k`` and leaves hanging off it, leaf
``j`` a child of node ``parents[j]`` (0: the row's last token, the root; ``d``: chain draft
``c_d``). The row's verification step runs its nodes in this order: the root, the chain, the
leaves (ascending parent; :func:`~metagen.decoding.tree_speculative.tree_accept` numbers them
the same way), so node ``i`` is new token ``i`` and its logits are row ``i`` of the step's. The
chain is the row's ordinary causal run; leaf ``j``, new token ``1 + k + j``, stands at its
parent's position + 1 (:func:`leaf_gaps`), and an accepted leaf's K/V moves to that position
(:func:`leaf_move`).
"""

from __future__ import annotations

from collections.abc import Sequence


def leaf_gaps(num_draft: int, parents: Sequence[int]) -> list[int]:
    """Each new token's gap of a verification row (``ExtendRequest.leaf_gaps``): 0 for the root
    and the ``num_draft - len(parents)`` chain drafts; a leaf's new-token index minus the index
    it stands at (its parent's + 1)."""
    k = num_draft - len(parents)
    return [0] * (1 + k) + [k + j - p for j, p in enumerate(parents)]


def node_paths(drafts: Sequence[int], parents: Sequence[int]) -> list[list[int]]:
    """Per node, the drafted tokens from the root to it (the root's: none): the output a
    position's processors see. ``drafts``: the row's drafts, chain then leaves."""
    k = len(drafts) - len(parents)
    chain = list(drafts[:k])
    return ([chain[:i] for i in range(k + 1)]
            + [chain[:p] + [drafts[k + j]] for j, p in enumerate(parents)])


def leaf_move(num_draft: int, parents: Sequence[int], nodes: Sequence[int]
              ) -> tuple[int, int] | None:
    """Where the accepted path's last node's K/V must move, as offsets from the root's
    position: ``(from, to)`` when ``nodes`` (accepted, in walk order) end in a leaf, stored at
    its new-token index but standing at its depth; None for a path of chain drafts (their K/V
    already sit at their positions)."""
    if not nodes or nodes[-1] <= num_draft - len(parents):
        return None
    return nodes[-1], len(nodes)
