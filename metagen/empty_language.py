"""Is a constraint's language empty? Productivity over Lark rules and JSON schemas.

llguidance refuses a malformed grammar and, at the first mask, a language whose first byte is
impossible (``[^\\s\\S]``), but a grammar that can never finish -- ``start: "a" start``, a JSON
schema whose required property is the schema itself -- passes both and would only show mid-
generation, as output that runs to ``max_tokens`` without ever being a string of the language.
These checks find such languages when the request is made: a rule (a schema) is *productive* when
it derives at least one finite string, computed as the least fixpoint of "some alternative needs
only productive parts" (Hopcroft & Ullman's emptiness test for context-free grammars).

Both are conservative: what they cannot read (a construct they do not parse, a ``%json`` block,
an imported terminal, a schema keyword they do not model) counts as productive, so they never
refuse a grammar whose language has a string; a syntax error is left to llguidance's own check.
Regex terminals count as productive here: whether one matches any string is llguidance's to say,
so the backend that compiles the grammar asks it for each of :func:`lark_regexes`
(:mod:`metagen.decoding.grammar`). Pure functions of the text; the caller caches them by grammar.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

# -- Lark (llguidance's dialect) ---------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+) | (?P<comment>(//|\#)[^\n]*)
  | (?P<string>"(\\.|[^"\\])*"i?) | (?P<regex>/(\\.|[^/\\\n])+/[imslux]*)
  | (?P<special><[^<>\s]+>)
  | (?P<block>%(json|regex|llguidance)\b) | (?P<directive>%[a-z]+)
  | (?P<name>[?!]?[A-Za-z_][A-Za-z0-9_\-]*) | (?P<number>\d+)
  | (?P<op>\.\.|->|[:|()\[\]?*+{},~.=])
""", re.VERBOSE)


class _Unreadable(Exception):
    """The text uses something this reader does not parse: assume productive."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text.startswith("%", pos) and (pos == 0 or text[pos - 1] == "\n") and \
                re.match(r"%(ignore|import|declare|override|extend)\b", text[pos:]):
            end = text.find("\n", pos)  # a directive line defines nothing the start needs
            pos = len(text) if end < 0 else end
            continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Unreadable(text[pos:pos + 20])
        kind = m.lastgroup or ""
        if kind == "block":  # %json { ... }: skip the balanced block (JSON strings honoured)
            pos = _skip_block(text, m.end())
            out.append(("atom", m.group()))
            continue
        if kind not in ("ws", "comment"):
            out.append((kind, m.group()))
        pos = m.end()
    return out


def _skip_block(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    if not text.startswith("{", pos):
        raise _Unreadable(text[pos:pos + 20])
    depth, in_string, escaped = 0, False, False
    for i in range(pos, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise _Unreadable("unbalanced block")


def _rules(tokens: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Definition name -> its body tokens. A definition starts at ``name:`` (with optional
    ``[attributes]`` or ``.priority`` between)."""
    starts: list[tuple[int, int, str]] = []  # (index of name, index after ':', name)
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind == "name":
            j = i + 1
            if j < len(tokens) and tokens[j][1] == "[":
                while j < len(tokens) and tokens[j][1] != "]":
                    j += 1
                j += 1
            elif j + 1 < len(tokens) and tokens[j][1] == "." and tokens[j + 1][0] == "number":
                j += 2
            if j < len(tokens) and tokens[j][1] == ":":
                starts.append((i, j + 1, value.lstrip("?!")))
                i = j + 1
                continue
        i += 1
    rules: dict[str, list[tuple[str, str]]] = {}
    for n, (_, body, name) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(tokens)
        if name in rules:
            raise _Unreadable(f"{name} defined twice")
        rules[name] = tokens[body:end]
    return rules


class _Graph:
    """The rules as an AND/OR graph: node ``i`` is ``("and", children)`` (a sequence: all
    needed), ``("or", children)`` (alternatives: one needed), ``("true", ())`` (derives a string
    by itself: a literal, a regex, an optional part) or ``("rule", name)``."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.nodes: list[tuple[str, Any]] = []

    def add(self, kind: str, arg: Any) -> int:
        self.nodes.append((kind, arg))
        return len(self.nodes) - 1

    def productive(self, bodies: dict[str, int]) -> set[str]:
        """The rule names whose body derives a finite string: the least fixpoint, in time
        linear in the graph (each node counts its children still unproven)."""
        parents: list[list[int]] = [[] for _ in self.nodes]
        need = [0] * len(self.nodes)
        ready: list[int] = []
        for i, (kind, arg) in enumerate(self.nodes):
            if kind == "rule":
                parents[bodies[arg]].append(i)
                need[i] = 1
            elif kind == "true" or (kind == "and" and not arg):
                ready.append(i)
            else:
                for c in arg:
                    parents[c].append(i)
                need[i] = len(arg) if kind == "and" else 1
        proven = [False] * len(self.nodes)
        while ready:
            i = ready.pop()
            if proven[i]:
                continue
            proven[i] = True
            for p in parents[i]:
                need[p] -= 1
                if need[p] == 0:
                    ready.append(p)
        return {name for name, body in bodies.items() if proven[body]}


class _Reader:
    """Recursive descent over one rule body, adding its nodes to a :class:`_Graph`."""

    def __init__(self, tokens: list[tuple[str, str]], graph: _Graph) -> None:
        self.toks, self.i, self.g = tokens, 0, graph

    def peek(self) -> str:
        return self.toks[self.i][1] if self.i < len(self.toks) else ""

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise _Unreadable("unexpected end")
        self.i += 1
        return self.toks[self.i - 1]

    def body(self) -> int:
        node = self.alternatives()
        if self.i != len(self.toks):
            raise _Unreadable(self.peek())
        return node

    def alternatives(self) -> int:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.take()
            alts.append(self.sequence())
        return alts[0] if len(alts) == 1 else self.g.add("or", alts)

    def sequence(self) -> int:
        items: list[int] = []
        while self.peek() not in ("", "|", ")", "]"):
            if self.peek() == "->":  # an alias names the alternative; nothing to derive
                self.take()
                self.take()
                continue
            items.append(self.repeated())
        return items[0] if len(items) == 1 else self.g.add("and", items)

    def repeated(self) -> int:
        node = self.atom()
        while self.peek() in ("?", "*", "+", "{", "~"):
            op = self.take()[1]
            if op in ("?", "*"):
                node = self.g.add("true", ())
            elif op == "{":  # {n} {m,} {,n} {m,n}: optional iff the minimum is 0
                low = self.take()
                if low[1] == "," or (low[0] == "number" and int(low[1]) == 0):
                    node = self.g.add("true", ())
                elif low[0] != "number":
                    raise _Unreadable("{" + low[1])
                while self.take()[1] != "}":
                    pass
            elif op == "~":  # ~ n or ~ m..n
                low = self.take()
                if low[0] != "number":
                    raise _Unreadable("~" + low[1])
                if int(low[1]) == 0:
                    node = self.g.add("true", ())
                if self.peek() == "..":
                    self.take()
                    self.take()
        return node

    def atom(self) -> int:
        kind, value = self.take()
        if value in ("(", "["):
            node = self.alternatives()
            if self.take()[1] != (")" if value == "(" else "]"):
                raise _Unreadable("unclosed group")
            return self.g.add("true", ()) if value == "[" else node
        if kind == "string" and self.peek() == "..":  # "a".."z"
            self.take()
            self.take()
            return self.g.add("true", ())
        if kind in ("string", "regex", "special", "atom"):
            return self.g.add("true", ())
        if kind == "name":
            name = value.lstrip("?!")
            if name in self.g.known:
                return self.g.add("rule", name)
            return self.g.add("true", ())  # imported (%import): assumed productive
        raise _Unreadable(value)


def lark_unproductive(grammar: str) -> list[str] | None:
    """The rules of Lark ``grammar`` that derive no finite string, when ``start`` is one of them
    (its language is empty), ``start`` first; ``None`` when the language has a string or the
    text cannot be read here (see the module docstring). Linear in the grammar's size."""
    try:
        rules = _rules(_tokens(grammar))
        if "start" not in rules:
            return None
        graph = _Graph(set(rules))
        bodies = {name: _Reader(body, graph).body() for name, body in rules.items()}
    except (_Unreadable, ValueError, IndexError, RecursionError):
        return None
    productive = graph.productive(bodies)
    if "start" in productive:
        return None
    return ["start"] + sorted(n for n in _reachable("start", rules) if n not in productive
                              and n != "start")


def lark_regexes(grammar: str) -> list[str]:
    """The distinct regex terminals (``/.../flags``) of Lark ``grammar``, in order of first use;
    ``[]`` when the text cannot be read here."""
    try:
        return list(dict.fromkeys(v for k, v in _tokens(grammar) if k == "regex"))
    except _Unreadable:
        return []


def _reachable(start: str, rules: dict[str, list[tuple[str, str]]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for kind, value in rules[todo.pop()]:
            name = value.lstrip("?!")
            if kind == "name" and name in rules and name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


# -- JSON schema --------------------------------------------------------------------------------

_MAX_PASSES = 32  # bounds the schema check's work at 32 passes over the subschemas


def schema_unproductive(schema: Any) -> bool:
    """True when JSON ``schema`` (parsed) admits no finite document: it is ``false``, or it
    needs -- through required properties, non-empty arrays, ``$ref``, ``allOf``, or every branch
    of ``anyOf`` / ``oneOf`` -- a subschema that admits none (a schema that requires itself).
    Conservative: whatever is not modelled here admits a document."""
    nodes = dict(reversed(list(_subschemas(schema))))  # subschemas before their parents
    productive: set[str] = set()
    for _ in range(_MAX_PASSES):  # one pass settles a tree; each more, one level of $ref
        before = len(productive)
        for ptr, node in nodes.items():
            if ptr not in productive and _node_productive(node, ptr, nodes, productive):
                productive.add(ptr)
        if len(productive) == before:
            return "#" not in productive
    return False  # $refs nested deeper than the passes: not decided here, so not refused


def _subschemas(node: Any, ptr: str = "#") -> Iterator[tuple[str, Any]]:
    """Every (JSON pointer, subschema) in ``node``, depth first."""
    yield ptr, node
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        esc = key.replace("~", "~0").replace("/", "~1")
        if isinstance(value, dict) and key not in ("const", "enum", "default", "examples"):
            if key in ("properties", "$defs", "definitions", "patternProperties"):
                for name, sub in value.items():
                    sub_esc = name.replace("~", "~0").replace("/", "~1")
                    yield from _subschemas(sub, f"{ptr}/{esc}/{sub_esc}")
            else:
                yield from _subschemas(value, f"{ptr}/{esc}")
        elif isinstance(value, list) and key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for i, sub in enumerate(value):
                yield from _subschemas(sub, f"{ptr}/{esc}/{i}")


def _node_productive(node: Any, ptr: str, nodes: dict[str, Any], productive: set[str]) -> bool:
    if node is False:
        return False
    if not isinstance(node, dict):
        return True

    def ok(key: str) -> bool:  # the subschema at ptr/key (absent: no requirement)
        sub = f"{ptr}/{key}"
        return sub not in nodes or sub in productive

    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and ref in nodes and ref not in productive:
        return False
    if isinstance(node.get("allOf"), list) and \
            not all(ok(f"allOf/{i}") for i in range(len(node["allOf"]))):
        return False
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and node[key] and \
                not any(ok(f"{key}/{i}") for i in range(len(node[key]))):
            return False
    types = node.get("type")
    kinds = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else None
    if kinds is None or kinds - {"object", "array"}:
        return True  # a scalar type (or any type) is possible: a document exists
    return ("object" in kinds and _object_ok(node, ok)) or \
        ("array" in kinds and _array_ok(node, ok))


def _object_ok(node: dict[str, Any], ok: Any) -> bool:
    props = node.get("properties")
    for name in node.get("required") or ():
        if isinstance(props, dict) and name in props:
            if not ok("properties/" + str(name).replace("~", "~0").replace("/", "~1")):
                return False
    return True


def _array_ok(node: dict[str, Any], ok: Any) -> bool:
    low = node.get("minItems", 0)
    if not isinstance(low, int) or low <= 0:
        return True
    prefix = node.get("prefixItems")
    n_prefix = len(prefix) if isinstance(prefix, list) else 0
    if not all(ok(f"prefixItems/{i}") for i in range(min(low, n_prefix))):
        return False
    return low <= n_prefix or ok("items")


def json_schema_unproductive(schema_text: str) -> bool:
    """:func:`schema_unproductive` of a schema's JSON text (False when it does not parse)."""
    try:
        return schema_unproductive(json.loads(schema_text))
    except (ValueError, RecursionError):
        return False
