"""One self-contained HTML page from a template, a kind's script and its data.

The page is ``templates/page.html`` with the shared CSS and JavaScript, the kind's own
(``<kind>.js``, ``<kind>.css`` where there is one) and the data as JSON, all inline: no other
file, no other host. The Content-Security-Policy allows only that one script and that one
style (by their SHA-256), images as ``data:`` URIs, and nothing else: no request leaves the
page, and markup that slipped into the data could run nothing. The JSON is made inert inside
its ``<script type="application/json">`` element (``<``, ``>``, ``&``, U+2028 and U+2029
written as JSON escapes such as ``\\u003c``), and the scripts put every string on the page as text
(``textContent``), never as markup.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from importlib import resources
from pathlib import Path

from actkit import __version__
from actkit._atomic import write_text_atomic
from actkit._json import json_ready
from actkit.errors import InputError

__all__ = ["MARK", "SUFFIXES", "check_page_path", "is_actkit_page", "page_json", "render_page", "write_page"]

#: the ``<meta name=...>`` every actkit page carries (``--overwrite`` replaces only such files)
MARK = "actkit-page"
#: what a page's file name may end with
SUFFIXES = (".html", ".htm")

_INERT = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
_SLOT = re.compile(r"\{\{(\w+)\}\}")


def _template(name: str) -> str:
    return resources.files("actkit.pages").joinpath("templates", name).read_text(encoding="utf-8")


def page_json(data) -> str:
    """``data`` as JSON that is inert inside ``<script type="application/json">``: no ``<``,
    ``>`` or ``&`` (so no ``</script>`` or ``<!--``) and no U+2028/U+2029 appear as such."""
    try:   # plain data already (a report's to_dict()): no walk through it
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):   # numpy values, NaN: made plain first (anything else as its str)
        text = json.dumps(json_ready(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                          default=str)
    for char, escaped in _INERT:   # str.replace: hundreds of times faster than translate on megabytes
        text = text.replace(char, escaped)
    return text


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _optional(name: str) -> str:
    return _template(name) if resources.files("actkit.pages").joinpath("templates", name).is_file() else ""


def render_page(kind: str, data: dict, title: str, *, uses=()) -> str:
    """The page of one result: ``kind`` names its script (``compare``, ``evaluate``, ``units``),
    ``data`` is what the script shows, ``title`` the window's title; ``uses``: other kinds
    whose script and style the page includes after its own (the bases page draws the units
    page's cards)."""
    script = "\n".join([_template("common.js"), _template(f"{kind}.js"), *(_template(f"{u}.js") for u in uses)])
    style = "\n".join([_template("page.css"), *(_optional(f"{u}.css") for u in uses), _optional(f"{kind}.css")])
    csp = (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    slots = {"csp": csp, "mark": MARK, "kind": kind, "version": html.escape(__version__),
             "title": html.escape(title), "style": style, "script": script, "data": page_json(data)}
    # one pass: what a slot brings in (the data above all) is never read for slots again
    return _SLOT.sub(lambda m: slots[m.group(1)], _template("page.html"))


def is_actkit_page(path) -> bool:
    """Whether the file at ``path`` is a page actkit wrote (its head carries the mark)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip().lower().startswith("<!doctype html") and f'<meta name="{MARK}"' in head


def check_page_path(path, *, overwrite: bool = False, flag: str = "--html") -> Path:
    """``path`` may receive a page: a ``.html``/``.htm`` name in a writable folder, and no file
    there unless it is an actkit page and ``overwrite`` is set. One-line :class:`InputError`
    otherwise; nothing is written."""
    from actkit.store import check_writable_file  # actkit.store (h5py): ~0.1 s at import (measured); only an output path needs it

    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise InputError(f"{flag} {path}: a page's name must end with .html or .htm, got {path.suffix or 'none'}")
    return check_writable_file(path, flag, looks_ours=is_actkit_page, overwrite=bool(overwrite),
                               ours="a page actkit wrote", theirs="pages", folder="give a file name ending with .html",
                               other="name", named="an actkit page")


def write_page(path, kind: str, data: dict, title: str, *, overwrite: bool = False, uses=()) -> Path:
    """Check ``path`` (:func:`check_page_path`), render the page and write it atomically."""
    path = check_page_path(path, overwrite=overwrite, flag="path")
    write_text_atomic(path, render_page(kind, data, title, uses=uses))
    return path
