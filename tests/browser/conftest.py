"""Session fixtures for the browser tests: one headless Chromium, one JupyterLab server.

Chromium comes from the system (Debian's `chromium` package): Playwright's own browser download
needs the internet. Without it a local run skips with the install command; under CI it fails.
"""
from __future__ import annotations

import os

import pytest

from lab_driver import CHROMIUM_ARGS, find_chromium, start_lab

INSTALL_HINT = ("headless Chromium is needed for the browser test: install it with "
                "`sudo apt-get install chromium` (Debian/Ubuntu), or set CHROMIUM=/path/to/chromium")


def skip_or_fail(reason: str):
    """Skip on a learner's machine; under CI a missing browser is a failure, not a skip."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI must run the browser test)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """A headless Chromium context shared by every browser test."""
    chromium = find_chromium()
    if chromium is None:
        skip_or_fail(INSTALL_HINT)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is missing: `pip install -e '.[dev]'` (make test does it)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 1800})
        context.set_default_timeout(30_000)
        yield context
        context.close()


@pytest.fixture(scope="session")
def lab(browser, tmp_path_factory):
    """One JupyterLab server for all notebooks, with the widget manager as installed."""
    server = start_lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()
