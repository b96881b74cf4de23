"""Headless Chromium for the web view's tests (Debian's chromium, driven by Playwright): skipped
where it is not installed, except in CI (COORM_REQUIRE_BROWSER=1), where .ci/run installs it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

#: Chromium as the probe of this machine kind starts it: no sandbox as root, and nothing that
#: reaches for the network on its own (a closed network refuses it, many times a second).
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _missing() -> str | None:
    if chromium_path() is None:
        return "no Chromium (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401, PLC0415
    except ImportError:
        return "no Playwright (pip install playwright; its own browser download is not needed)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("COORM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"a browser is required here: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=chromium_path(), args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def pages(browser) -> Iterator[Any]:
    """``pages()``: a new page in a context of its own (its own storage: its own token)."""
    contexts = []

    def new(width: int = 1300, height: int = 900) -> Any:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        return page

    yield new
    for context in contexts:
        context.close()
