"""SearchTree / SearchNode: ids in creation order, paths, JSON round trip."""

from __future__ import annotations

import json

from metagen.strategies.tree import SearchTree


def test_ids_paths_and_json():
    tree = SearchTree("Q\n", index=3)
    a = tree.add(tree.root, "a\n", score=0.5, tokens=2)
    b = tree.add(tree.root, "b\n", tokens=2)
    c = tree.add(a, "c", terminal=True, tokens=1, group=2)
    assert [n.id for n in (tree.root, a, b, c)] == [0, 1, 2, 3]
    assert c.steps() == ["a\n", "c"] and c.text() == "a\nc" and c.depth == 2
    assert c.tree == 3 and b.group == 0 and c.group == 2
    assert [n.id for n in tree.root.walk()] == [0, 1, 3, 2]
    assert tree.terminal_leaves() == [c] and tree.generated_tokens() == 5 and len(tree) == 4
    d = json.loads(json.dumps(tree.to_dict()))
    assert d["children"][0]["children"][0]["step"] == "c"
    assert d["children"][0]["score"] == 0.5 and d["children"][1]["score"] is None


def test_q_value():
    tree = SearchTree("Q")
    n = tree.add(tree.root, "x")
    assert n.q == 0.0
    n.visits, n.value_sum = 4, 2.0
    assert n.q == 0.5
