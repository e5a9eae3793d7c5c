"""README's Layout section shows the package as it is: every top-level module and package of
``metagen`` has its line (and only those that exist)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layout_lists_every_top_level_module_and_package_once():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    listed = re.findall(r"^  (\S+?)/?\s", block, flags=re.MULTILINE)
    package = ROOT / "metagen"
    present = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(listed) == sorted(set(listed)), "a line listed twice"
    assert set(listed) == present
