"""The report model -> one self-contained HTML page: the page template, its stylesheet and
script (package data files in ``assets/``: the script's parts, :data:`SCRIPT_PARTS`, joined
inside one function) and the model as inline JSON. Nothing is fetched at
view time; the script draws the charts as SVG and builds every element from the data with
``textContent``, never as markup.

Escaping contract: the model is embedded as ASCII JSON inside ``<script type=
"application/json">`` with ``<``, ``>`` and ``&`` written as ``\\u003c``/``\\u003e``/``\\u0026``
(so no model text can close the script element or open a comment), ``\\u2028``/``\\u2029`` and
lone surrogates as ``\\u`` escapes, and NaN / infinities as null (JSON has none). The title is
HTML-escaped."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from importlib import resources
from typing import Any

_MARKERS = ("/*@CSS@*/", "/*@JS@*/", "@DATA@", "@TITLE@")
#: the script's parts, in order: the data and run details, helpers, the chart, the results
#: (tables and charts per task), the difficulty tables, the items, the search trees
SCRIPT_PARTS = ("report.js", "dom.js", "chart.js", "results.js", "tables.js", "items.js",
                "trees.js")


def embed_json(obj: Any) -> str:
    """``obj`` as JSON safe to place verbatim inside a ``<script>`` element (see module)."""
    text = json.dumps(finite(obj), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (recursively; tuples as lists)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def asset(name: str) -> str:
    """The text of package data file ``assets/NAME``."""
    return (resources.files("metagen.report") / "assets" / name).read_text(encoding="utf-8")


def script() -> str:
    """The page's script: :data:`SCRIPT_PARTS` joined in one strict-mode function that draws
    the page once they are all defined."""
    body = "\n".join(asset(name) for name in SCRIPT_PARTS)
    return f'(function () {{\n"use strict";\n{body}\nrenderAll();\n}}());'


def render_html(model: Mapping[str, Any], title: str = "metagen report") -> str:
    """The page for ``model`` (:func:`~metagen.report.model.build_report`'s output)."""
    page = asset("report.html")
    parts = {"/*@CSS@*/": asset("report.css"), "/*@JS@*/": script(),
             "@DATA@": embed_json(model), "@TITLE@": html.escape(title)}
    # one pass over the template, so a marker inside an inserted part is never replaced
    out, rest = [], page
    while True:
        hits = [(rest.find(m), m) for m in _MARKERS if m in rest]
        if not hits:
            out.append(rest)
            return "".join(out)
        at, marker = min(hits)
        out.append(rest[:at] + parts[marker])
        rest = rest[at + len(marker):]
