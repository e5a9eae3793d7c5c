"""The primitive-value wire between the test process and the program's process: exact types
round-trip, everything else is refused both ways."""

from __future__ import annotations

import enum
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metagen.sandbox.grader import wire

_HASHABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
    | st.binary(), lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6)
PRIMITIVES = st.recursive(
    _HASHABLE, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner)
    | st.dictionaries(_HASHABLE, inner, max_size=3) | st.sets(_HASHABLE, max_size=3),
    max_leaves=12)


def shape(v):
    """The value's exact type tree, with floats by bit pattern (nan == nan, 0.0 != -0.0)."""
    if type(v) is float:
        return ("float", v.hex())
    if type(v) in (list, tuple):
        return (type(v).__name__, [shape(x) for x in v])
    if type(v) in (set, frozenset):
        return (type(v).__name__, sorted(repr(shape(x)) for x in v))
    if type(v) is dict:
        return ("dict", [(shape(k), shape(x)) for k, x in v.items()])
    return (type(v).__name__, v)


@given(PRIMITIVES)
def test_every_primitive_round_trips_with_its_exact_types(value):
    text = wire.dumps(value)
    assert "\n" not in text
    assert shape(wire.loads(text)) == shape(value)


@given(st.sets(st.integers(), max_size=6), st.dictionaries(st.text(), st.integers(), max_size=6))
def test_canonical_text_ignores_order(s, d):
    shuffled_set = set(sorted(s, reverse=True))
    reordered = dict(reversed(list(d.items())))
    assert wire.dumps(s) == wire.dumps(shuffled_set)
    assert wire.dumps(d, canonical=True) == wire.dumps(reordered, canonical=True)


def test_golden_encodings_keep_types_apart():
    assert wire.dumps((1, 2)) != wire.dumps([1, 2])
    assert wire.dumps(True) == '["b",true]' and wire.dumps(1) == '["i","1"]'
    assert wire.dumps(1.0) == '["f","0x1.0000000000000p+0"]'
    assert wire.dumps(-(10 ** 5000)).startswith('["i","-')  # no int-digits limit
    assert math.isnan(wire.loads(wire.dumps(float("nan"))))
    assert wire.loads(wire.dumps(-math.inf)) == -math.inf


class AlwaysEqual:
    def __eq__(self, other):
        return True


class Colour(enum.IntEnum):
    RED = 1


class Text(str):
    pass


@pytest.mark.parametrize("value", [
    AlwaysEqual(), Colour.RED, Text("x"), [AlwaysEqual()], {"k": object()}, 1j,
    range(3), iter([1]), bytearray(b"x"), {1: [Text("y")]}])
def test_non_primitives_and_subclasses_are_refused(value):
    with pytest.raises(wire.WireError):
        wire.dumps(value)


def test_too_deep_is_refused_both_ways():
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeper"):
        wire.dumps(deep)
    text = '["l",[' * 10000 + ']]' * 10000
    with pytest.raises(wire.WireError):
        wire.loads(text)


@pytest.mark.parametrize("text", [
    "", "garbage", "NaN", "1", '"x"', "[]", '["i"]', '["i","1f ", 1]', '["i","0x1f"]',
    '["i","1_0"]', '["f","1e5x"]', '["b",1]', '["s",1]', '["y","abc"]', '["n",1]',
    '["l",{}]', '["z",[]]', '["S",[["l",[]]]]', '["d",[[["l",[]],["n"]]]]',
    '["d",[[["i","1"],["n"]],[["i","1"],["n"]]]]', '["S",[["i","1"],["i","1"]]]',
    '["d",[["i","1"]]]', '["t",[["i","1"],"x"]]'])
def test_malformed_text_is_refused(text):
    with pytest.raises(wire.WireError):
        wire.loads(text)
