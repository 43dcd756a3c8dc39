"""Open actkit pages in a real browser: Debian's headless ``chromium`` driven by playwright
(``executable_path``: the system browser, never a downloaded one). Used by tests/test_pages.py
and benchmarks/bench_pages.py.

Where chromium or playwright is missing or does not start, :func:`browser` fails the test and
says why (``.ci/run`` installs chromium with apt-get): a page no browser opened is a guess.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

#: where to look for the browser (ACTKIT_CHROMIUM first)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# set before any script of the page: a hostile string that ran would call one of these
TRAP = """
window.__actkit_ran = [];
window.alert = function (x) { window.__actkit_ran.push('alert:' + x); };
window.confirm = window.prompt = window.alert;
"""


def chromium_path() -> str | None:
    """The system chromium's executable, or None."""
    env = os.environ.get("ACTKIT_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def launch(pw):
    """A headless chromium of playwright ``pw``; raises RuntimeError saying why it cannot."""
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("no chromium found (apt-get install chromium, or set ACTKIT_CHROMIUM to its path): "
                           "the pages are tested in a real browser")
    try:
        return pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
    except Exception as exc:  # the browser's own reason (missing libraries, no sandbox, ...)
        raise RuntimeError(f"chromium at {exe} did not start: {str(exc).splitlines()[0][:300]}") from exc


@contextlib.contextmanager
def browser():
    """``with browser() as b``: a started chromium (playwright's ``Browser``)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise RuntimeError("playwright is not installed (pip install playwright; the browser itself is "
                           "Debian's chromium, nothing is downloaded)") from exc
    with sync_playwright() as pw:
        b = launch(pw)
        try:
            yield b
        finally:
            b.close()


class Visit:
    """One page opened from ``file://``: ``page`` (playwright's), ``console`` (type, text) of
    every console message and page error, ``requests`` (every URL the page asked for)."""

    def __init__(self, b, path, *, bypass_csp=False, viewport=(1200, 900)):
        self.context = b.new_context(bypass_csp=bypass_csp, viewport={"width": viewport[0], "height": viewport[1]})
        self.page = self.context.new_page()
        self.console, self.requests = [], []
        self.page.add_init_script(TRAP)
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = Path(path).resolve().as_uri()
        self.page.goto(self.url)
        try:
            self.page.wait_for_selector("body[data-ready='1']", timeout=20000)
        except Exception as exc:
            raise AssertionError(f"the page did not finish drawing: {self.console}") from exc

    def wait(self, expression, arg=None, timeout=20.0):
        """Poll ``expression`` (a JavaScript function of ``arg``) until it is true. (playwright's
        own ``wait_for_function`` polls with ``eval`` inside the page, which the page's CSP
        forbids; ``evaluate`` runs outside it.)"""
        import time

        stop = time.monotonic() + timeout
        while not self.page.evaluate(expression, arg):
            if time.monotonic() > stop:
                raise AssertionError(f"still false after {timeout} s: {expression}")
            time.sleep(0.02)

    def errors(self):
        """Console errors and warnings, page errors (a CSP violation is a console error)."""
        return [c for c in self.console if c[0] in ("error", "warning", "pageerror")]

    def foreign_requests(self):
        """Requests for anything but the page itself and its ``data:`` images."""
        return [u for u in self.requests if u != self.url and not u.startswith("data:")]

    def ran(self):
        """What hostile strings ran (``alert`` calls, the flags they set)."""
        return self.page.evaluate("[].concat(window.__actkit_ran || [], window.__pwned ? ['__pwned'] : [])")

    def close(self):
        self.context.close()


def chromium_fixture():
    """The body of the ``chromium`` fixture of the page tests: a started browser for a module,
    or the test fails saying why (no skip)."""
    import pytest

    try:
        with browser() as b:
            yield b
    except RuntimeError as exc:
        pytest.fail(f"the pages are tested in a real browser, and none could be used: {exc}")
