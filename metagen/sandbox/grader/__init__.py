"""The code that runs *inside* the sandbox to grade a program with unit tests (stdlib only).

These modules are shipped into each run's work directory as the package ``metagen_grader``
(they import each other relatively, so the same files are importable here for tests):

- :mod:`.wire` — the strict typed encoding of primitive values both processes speak.
- :mod:`.channel` — the test process's end of the pipes to the program's process.
- :mod:`.testproc` — the test process: trusted test code, the verdict, the nonce.
- :mod:`.child` — the program's process: loads the program, answers calls.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = "metagen_grader"
MODULES = ("__init__", "wire", "channel", "testproc", "child")


def shipped_files() -> dict[str, str]:
    """``{work-dir relative name: source}`` of this package, as the sandbox receives it."""
    here = Path(__file__).parent
    return {f"{PACKAGE}/{m}.py": (here / f"{m}.py").read_text(encoding="utf-8")
            for m in MODULES}
