"""Open actkit pages in Debian's headless Firefox (``firefox-esr``), driven over WebDriver
BiDi, the W3C protocol Firefox speaks itself on ``--remote-debugging-port`` (no geckodriver,
no downloaded browser). Used by tests/test_pages_firefox.py: issue 41 asks that a page opens
from ``file://`` offline in Chromium (tests/_browser.py, playwright) and in Firefox.

:class:`Firefox` starts one browser with a fresh profile and one BiDi session; ``open(path)``
loads a page (a preload script sets :data:`tests._browser.TRAP` first, so a hostile string
that ran would leave a mark) and returns a :class:`Loaded` page whose ``js(expression)``
evaluates in it, with the console errors and the requests the page made. Where Firefox or
the ``websockets`` package is missing or does not start, it raises RuntimeError saying why
(the test then fails: a page no browser opened is a guess).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests._browser import TRAP

CANDIDATES = ("firefox-esr", "firefox")


def firefox_path() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Loaded:
    """A page loaded in Firefox: ``js`` evaluates an expression in it; ``errors`` are its
    console errors, ``requests`` the URLs it asked for (``data:`` and the page's own
    ``file:`` URL included)."""

    firefox: "Firefox"
    context: str
    errors: list = field(default_factory=list)
    requests: list = field(default_factory=list)

    def js(self, expression: str):
        r = self.firefox._call("script.evaluate", {"expression": expression, "target": {"context": self.context},
                                                   "awaitPromise": True})
        result = r["result"]
        if result.get("type") == "exception":
            raise AssertionError(f"{expression!r} raised in Firefox: {result['exceptionDetails'].get('text')}")
        return _value(result["result"])

    def external_requests(self) -> list[str]:
        """Requests that leave the page: anything but ``data:`` URIs and the page file itself."""
        return [u for u in self.requests if not u.startswith(("data:", "file:", "about:"))]


def _value(remote):
    """A BiDi remote value as Python (primitives, arrays and objects of them)."""
    kind = remote["type"]
    if kind in ("undefined", "null"):
        return None
    if kind in ("string", "boolean"):
        return remote["value"]
    if kind == "number":
        v = remote["value"]
        return float(v) if isinstance(v, str) else v
    if kind == "array":
        return [_value(x) for x in remote.get("value", [])]
    if kind == "object":
        return {k if isinstance(k, str) else _value(k): _value(v) for k, v in remote.get("value", [])}
    return remote


class Firefox:
    """One headless Firefox and one BiDi session (``with Firefox() as ff: page = ff.open(p)``)."""

    def __init__(self, timeout: float = 90.0):
        exe = firefox_path()
        if exe is None:
            raise RuntimeError("no Firefox found (apt-get install firefox-esr): the pages are tested in a real browser")
        try:
            import websockets  # the BiDi transport (a WebSocket); declared in the test extra
        except ImportError as exc:
            raise RuntimeError("the websockets package is missing (pip install websockets)") from exc
        self._ws_lib = websockets
        self._loop = asyncio.new_event_loop()
        self._profile = tempfile.mkdtemp(prefix="actkit-firefox-")
        port = _free_port()
        self._proc = subprocess.Popen([exe, "--headless", "--no-remote", "--profile", self._profile,
                                       f"--remote-debugging-port={port}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._events, self._id = [], 0
        self._ws = self._loop.run_until_complete(self._connect(port, timeout))
        self._call("session.new", {"capabilities": {}})
        self._call("session.subscribe", {"events": ["log.entryAdded", "network.beforeRequestSent"]})
        self._call("script.addPreloadScript", {"functionDeclaration": f"() => {{ {TRAP} }}"})

    async def _connect(self, port, timeout):
        start = time.monotonic()
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace").strip().splitlines()
                raise RuntimeError(f"Firefox exited at start ({self._proc.returncode}): {(err or ['?'])[-1][:300]}")
            try:
                return await self._ws_lib.connect(f"ws://127.0.0.1:{port}/session", max_size=None)
            except OSError:
                if time.monotonic() - start > timeout:
                    raise RuntimeError(f"Firefox did not open its BiDi port within {timeout:.0f} s") from None
                await asyncio.sleep(0.2)

    def _call(self, method: str, params: dict) -> dict:
        self._id += 1
        return self._loop.run_until_complete(self._roundtrip(self._id, method, params))

    async def _roundtrip(self, my_id, method, params):
        await self._ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self._ws.recv(), 120))
            if msg.get("id") == my_id:
                if msg.get("type") == "error":
                    raise RuntimeError(f"BiDi {method}: {msg.get('error')}: {msg.get('message')}")
                return msg
            self._events.append(msg)

    def open(self, path) -> Loaded:
        """Load ``path`` (a file) in a new tab and wait for it (load event, then a settled frame)."""
        ctx = self._call("browsingContext.create", {"type": "tab"})["result"]["context"]
        self._events.clear()
        url = Path(path).resolve().as_uri()
        self._call("browsingContext.navigate", {"context": ctx, "url": url, "wait": "complete"})
        page = Loaded(self, ctx)
        page.js("new Promise(r => requestAnimationFrame(() => setTimeout(r, 200)))")
        for e in self._events:
            p = e.get("params", {})
            if e.get("method") == "log.entryAdded" and p.get("level") == "error":
                page.errors.append(p.get("text"))
            elif e.get("method") == "network.beforeRequestSent":
                page.requests.append(p.get("request", {}).get("url", ""))
        return page

    def close(self):
        with contextlib.suppress(RuntimeError, OSError, asyncio.TimeoutError,
                                 self._ws_lib.exceptions.WebSocketException):  # the browser is going away either way
            self._call("session.end", {})
            self._loop.run_until_complete(self._ws.close())
        self._proc.terminate()
        try:
            self._proc.wait(20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._loop.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
