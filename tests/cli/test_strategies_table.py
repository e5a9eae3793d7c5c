"""``metagen strategies``: README's strategy x surface table is the one the registry gives, and a
strategy's parameters are printed from its config."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from metagen.cli.strategies import BEGIN, END, block, strategies
from metagen.strategies.registry import specs

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_table_is_the_registrys():
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == block(), "regenerate it: metagen strategies --write README.md"


def test_every_strategy_has_a_row_and_every_cell_is_filled():
    rows = [line for line in block().splitlines() if line.startswith("| `")]
    assert len(rows) == len(specs())
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert all(c == "✓" or c.startswith("— ") and len(c) > 10 for c in cells[3:]), row


def test_parameters_of_one_strategy():
    out = CliRunner().invoke(strategies, ["dvts"])
    assert out.exit_code == 0
    assert "subtrees: int in [1, inf], default derived from N" in out.output
    assert "select: score|vote|weighted_vote, default 'score'" in out.output
