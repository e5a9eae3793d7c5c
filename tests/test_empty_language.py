"""The emptiness checks of constraint languages: grammars and schemas that can never finish are
found (the rules to blame named, ``start`` first), ordinary ones -- recursive but terminating,
with llguidance's extensions, or beyond what the reader parses -- are never refused; and the
request-time check refuses the empty ones naming the field, for sampling and beam search."""

from __future__ import annotations

import json

import pytest

from metagen.beam_params import BeamSearchParams
from metagen.empty_language import json_schema_unproductive, lark_regexes, lark_unproductive
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

EMPTY_LARK = [
    ('start: "a" start', ["start"]),
    ('start: x\nx: "b" y\ny: "c" x', ["start", "x", "y"]),
    ('start: x+\nx: "a" x', ["start", "x"]),
    ('start: "a" x{1,3}\nx: "b" x', ["start", "x"]),
    ('start: x~2\nx: "a" x', ["start", "x"]),
    ('start: ("a" | "b") (x | y)\nx: "c" x\ny: x "d"', ["start", "x", "y"]),
]
OK_LARK = [
    'start: "a" start | "b"',
    'start: "a" | x\nx: "b" x',  # an unproductive rule the start can do without
    'start: x*\nx: "a" x', 'start: "a" [x]\nx: "b" x', 'start: "a" x{0,3}\nx: "b" x',
    'start: x? "b"\nx: "a" x', 'start: x~0..2 "b"\nx: "a" x',
    r'''
start: value
value: object | array | string | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: string ":" value   # recursive through value, which has finite alternatives
array: "[" [value ("," value)*] "]"
string: /"[^"]*"/
NUMBER: /-?[0-9]+/
''',
    '''
?start: sum
?sum: product
    | sum "+" product   -> add
?product: atom
    | product "*" atom  -> mul
atom: NUMBER -> number
    | "(" sum ")"
%import common.NUMBER
%ignore " "
''',
    'start: "x" %json {"type": "object", "properties": {"a|b": {"type": "string"}}}',
    'start: foo\nfoo[capture, max_tokens=5]: "a" | <[2]>',
    'start: ("a".."z"){3}',
    'root ::= "a" root',  # not Lark (GBNF): not read, so not refused here
]

TREE = {"$defs": {"node": {"type": "object", "required": ["kids"], "properties": {
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}
EMPTY_SCHEMAS = [
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"type": "array", "items": {"$ref": "#"}, "minItems": 1},
    {"type": "object", "properties": {"x": {"anyOf": [{"$ref": "#"}, False]}}, "required": ["x"]},
    {"type": "object", "properties": {"x": False}, "required": ["x"]},
    {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}},
                     "required": ["b"]},
               "b": {"type": "array", "prefixItems": [{"$ref": "#/$defs/a"}], "minItems": 1}},
     "$ref": "#/$defs/a"},
]
OK_SCHEMAS = [
    TREE,
    {"type": "object", "properties": {"a": {"$ref": "#"}}},  # not required: {} ends it
    {"type": "array", "items": {"$ref": "#"}},  # [] ends it
    {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
    {"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}},
     "required": ["a"]},  # a remote reference is not followed: assumed satisfiable
]


@pytest.mark.parametrize("grammar, rules", EMPTY_LARK)
def test_lark_grammars_that_never_finish_name_their_rules(grammar, rules):
    assert lark_unproductive(grammar) == rules


@pytest.mark.parametrize("grammar", OK_LARK)
def test_ordinary_lark_grammars_pass(grammar):
    assert lark_unproductive(grammar) is None


def test_regex_terminals_are_listed_once_for_the_compiler_to_probe():
    grammar = 'start: A B "/no/"  // /comment/\nA: /a+/\nB: /b/i | /a+/'
    assert lark_regexes(grammar) == ["/a+/", "/b/i"]
    assert lark_regexes('start: /a/ @') == []  # not read here: nothing to probe


@pytest.mark.parametrize("schema", EMPTY_SCHEMAS)
def test_schemas_no_finite_document_satisfies(schema):
    assert json_schema_unproductive(json.dumps(schema))


@pytest.mark.parametrize("schema", OK_SCHEMAS)
def test_recursive_but_satisfiable_schemas_pass(schema):
    assert not json_schema_unproductive(json.dumps(schema))


@pytest.mark.parametrize("field, value", [
    ("grammar", EMPTY_LARK[0][0]), ("grammar", EMPTY_LARK[1][0]),
    ("json_schema", EMPTY_SCHEMAS[0]),
])
def test_params_with_an_empty_language_are_refused_naming_the_field(field, value):
    for make in (SamplingParams, lambda **kw: BeamSearchParams(num_beams=2, **kw)):
        with pytest.raises(InvalidParameterError, match="empty language") as err:
            make(**{field: value})
        assert err.value.param == field
