"""The page as text: the inline data cannot close its script element or open a comment, whatever
the model wrote; it parses back to the model (NaN as null); the page fetches nothing; the CLI
writes it, and refuses a folder that is not a run in one line with exit 2."""

from __future__ import annotations

import json
import math
import re

from metagen.cli import main
from metagen.report import build_report, render_html
from metagen.report.html import embed_json
from tests.report.runs import HOSTILE, make_sc_run, make_tree_run


def _data(page: str) -> str:
    return re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page,
                     re.S).group(1)


def test_embedded_json_has_no_markup_characters_and_parses_back_to_the_value():
    value = {"text": HOSTILE, "sep": "\u2028\u2029\x85\x00", "nan": math.nan, "inf": -math.inf,
             "nested": [("</SCRIPT >", 1.5)]}
    text = embed_json(value)
    assert not set(text) & set("<>&\u2028\u2029") and text.isascii()
    assert json.loads(text) == {"text": HOSTILE, "sep": "\u2028\u2029\x85\x00", "nan": None,
                                "inf": None, "nested": [["</SCRIPT >", 1.5]]}


def test_the_page_holds_exactly_its_own_two_scripts_and_the_model(tmp_path):
    model = build_report([make_sc_run(tmp_path / "sc"), make_tree_run(tmp_path / "t")])
    page = render_html(model, title="<b>x</b>")
    assert page.lower().count("</script") == 2 and page.lower().count("<script") == 2
    assert "<!--" not in page and "<title>&lt;b&gt;x&lt;/b&gt;</title>" in page
    assert json.loads(_data(page)) == json.loads(json.dumps(model))  # NaN-free model


def test_the_page_fetches_nothing(tmp_path):
    page = render_html(build_report([make_sc_run(tmp_path / "sc")]))
    assert "default-src 'none'" in page  # the browser refuses any fetch
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert not re.search(r"@import|url\(|fetch\(|XMLHttpRequest|innerHTML", page)


def test_cli_writes_the_page_for_several_runs(tmp_path, capsys):
    out = tmp_path / "r.html"
    code = main(["report", str(make_sc_run(tmp_path / "sc")), str(make_tree_run(tmp_path / "t")),
                 "--out", str(out)])
    assert code == 0 and "2 runs" in capsys.readouterr().out
    model = json.loads(_data(out.read_text()))
    assert [r["name"] for r in model["runs"]] == ["sc", "t"]


def test_cli_refuses_a_folder_without_results_json_in_one_line_before_writing(tmp_path, capsys):
    out = tmp_path / "r.html"
    (tmp_path / "empty").mkdir()
    code = main(["report", str(make_sc_run(tmp_path / "sc")), str(tmp_path / "empty"),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "empty") in err
    assert "results.json" in err and not out.exists()


def test_cli_refuses_a_bad_limit_naming_it(tmp_path, capsys):
    code = main(["report", str(make_sc_run(tmp_path / "sc")), "--max-items", "0",
                 "--out", str(tmp_path / "r.html")])
    assert code == 2 and "max_items" in capsys.readouterr().err
