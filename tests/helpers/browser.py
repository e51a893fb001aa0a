"""A real browser for the console's tests: Debian's Chromium (``apt-get install chromium``; ``.ci/run`` installs it)
driven by Playwright, never a browser Playwright downloads, with axe-core (vendored from npm, tests/helpers/vendor)
as the accessibility linter.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from helpers.paths import ROOT

#: Debian's Chromium (``GUARDRAIL_TEST_CHROMIUM`` to point at another build).
CHROMIUM = os.environ.get("GUARDRAIL_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]
AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
#: The rules the console is held to: WCAG 2.0 and 2.1, levels A and AA.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
#: Where the docs' screenshots go when ``GUARDRAIL_CONSOLE_SCREENSHOTS=1`` asks for them (docs/console.md).
SCREENSHOTS = ROOT / "docs" / "console"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1200, "height": 860}


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}: apt-get install -y chromium (as .ci/run does)"
    return None


def axe_violations(page) -> list[dict]:
    """axe-core's WCAG A/AA violations on ``page`` (axe is injected by the context's init script: see
    :func:`new_context`), as ``{"id", "impact", "help", "targets"}``."""
    result = page.evaluate("tags => axe.run(document, {runOnly: {type: 'tag', values: tags}})", AXE_TAGS)
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"],
             "targets": [n["target"] for n in v["nodes"]][:5]} for v in result["violations"]]


def new_context(browser, viewport: dict | None = None):
    """A fresh browser context (its own cookies) whose pages get axe-core. An init script is injected by the
    DevTools protocol, outside the page's Content-Security-Policy, which the console's pages keep as they are."""
    context = browser.new_context(viewport=viewport or DESKTOP)
    context.add_init_script(path=str(AXE))
    return context


def screenshot(page, name: str) -> None:
    """Save ``page`` as ``docs/console/<name>.png`` when ``GUARDRAIL_CONSOLE_SCREENSHOTS=1`` (so a test run does not
    change the tree otherwise)."""
    if os.environ.get("GUARDRAIL_CONSOLE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
