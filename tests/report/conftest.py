"""A headless Chromium for the report's browser tests: Debian's ``chromium`` driven by
Playwright (never a browser Playwright downloads). The tests skip, naming the install command,
when either is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

INSTALL = ("needs Debian's chromium and Playwright: apt-get install -y chromium && "
           "pip install playwright (never `playwright install`)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module: Playwright's sync API keeps an asyncio loop running on the
    main thread while it is open, so a session-wide browser made every later test that calls
    ``asyncio.run`` (tests/server, tests/generators) fail with "cannot be called from a running
    event loop"."""
    executable = shutil.which("chromium")
    if executable is None or importlib.util.find_spec("playwright") is None:
        pytest.skip(INSTALL)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # Chromium's own sandbox cannot start as root (our CI); the page is a local file
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = pw.chromium.launch(executable_path=executable, args=args)
        yield browser
        browser.close()


class Page:
    """A page with every console error / warning and uncaught page error recorded."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page()
        self.page.set_default_timeout(10_000)  # a missing element fails fast
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def open(self, path: Any) -> Any:
        self.page.goto(path.resolve().as_uri())
        return self.page


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    yield p
    p.page.close()
