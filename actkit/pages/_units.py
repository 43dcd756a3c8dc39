"""The units page: a unit report's data (``UnitReport.to_dict()``, schema ``actkit-units/1``)
in the compact form the page embeds, and the page itself.

A report of 1,000 units x 20 examples holds about a million context tokens; written as they
are, they would be most of the page. The page's form keeps every number and string of the
report but writes each distinct token string once (``strings``) and each example's tokens as
indices into it, numbers to 6 significant digits, and an example as a small dict:

``{"v": value, "s": sample, "p": position, "r": row}`` and, for text, ``"t": [string
indices], "h": highlight (index into "t", or null: the whole input), "o": start (tokens left
out before "t"), "x": [indices of special tokens]``, ``"c"``: the context's characters,
``"k": [length, ...]`` and ``"q": [token, ...]``, the context cut at the tokens' spans
(:func:`pieces`): piece j is the next ``length`` UTF-16 code units of ``c`` (as JavaScript
counts them) and holds the characters of tokens ``q[j]`` up to the next piece's first token
(several where tokens share a character; an empty piece for a token without characters, a
special token), or of no token where ``q[j] = -1`` (text between tokens); ``q`` is left out
where piece j is token j for every j (a byte-level BPE's usual case); and ``"a"``: the unit's
activation at each token in thousandths of the unit's ``acts_scale`` (the largest |value| of
its windows), rounded (null where none); for images ``"img":
{"sample", "box", "cell"}`` (the picture is ``inputs.images[sample]``, a PNG data URI, once
per sample).

Logit tables are ``[[token id, string index or null, logit]]``; top tokens ``[[string index,
count, mean]]`` (the first :data:`TOP_TOKENS`, with ``"rows"``, ``"share"`` and ``"more"``:
how many are left out). Everything else keeps the report's own names (docs in
:class:`actkit.UnitReport`).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from actkit.pages._render import check_page_path, render_page, write_page

__all__ = ["units_data", "units_page", "units_preview"]

#: the page's data schema (its script reads this form)
PAGE_SCHEMA = "actkit-units-page/2"
#: top tokens per unit the page lists
TOP_TOKENS = 8


def _num(x):
    if isinstance(x, float):
        return float(f"{x:.6g}") if math.isfinite(x) else None
    return x


class _Strings:
    """Each distinct string once: ``index(s)`` -> its position in ``table``."""

    def __init__(self):
        self.table, self._at = [], {}

    def index(self, s):
        if s is None:
            return None
        s = str(s)
        at = self._at.get(s)
        if at is None:
            at = self._at[s] = len(self.table)
            self.table.append(s)
        return at


def _acts_scale(u) -> float:
    """The largest |activation| in a unit's example windows (the unit of its page ``"a"``)."""
    exs = [*(u.get("top") or ()), *(u.get("bottom") or ()),
           *(x for b in u.get("bands") or () for x in b.get("examples") or ())]
    acts = [abs(a) for e in exs for a in ((e.get("text") or {}).get("acts") or ())
            if a is not None and math.isfinite(a)]
    return max(acts, default=0.0)


def _example(e, strings, scale=0.0):
    out = {"v": _num(e.get("value")), "s": e.get("sample"), "p": e.get("position"), "r": e.get("row")}
    text = e.get("text")
    if text is not None:
        out["t"] = [strings.index(t) for t in text.get("tokens", ())]
        out["h"] = text.get("highlight")
        out["o"] = text.get("start", 0)
        special = [i for i, s in enumerate(text.get("special") or ()) if s]
        if special:
            out["x"] = special
        if text.get("context") is not None and text.get("token_spans") is not None:
            out["c"] = text["context"]
            out.update(_cuts(pieces(text["context"], text["token_spans"])))
        if text.get("acts") is not None and scale:
            out["a"] = [None if a is None else int(round(1000 * a / scale)) for a in text["acts"]]
    if e.get("image") is not None:
        out["img"] = e["image"]
    return out


def pieces(context, spans):
    """The context cut at its tokens' spans, in order: ``[text, token, ...]`` for the
    characters of one or more tokens (tokens whose spans overlap, such as the bytes of one
    emoji, share one piece; a token without characters has an empty piece) and ``[text]`` for
    characters between tokens (WordPiece's spaces)."""
    out, group, cursor, lo, hi = [], [], 0, 0, 0

    def flush():
        nonlocal cursor, group
        if group:
            out.append([context[lo:hi], *group])
            cursor, group = hi, []

    for i, (a, b) in enumerate(spans):
        if group and b > a and a < hi:
            group.append(i)
            hi = max(hi, b)
            continue
        flush()
        if a > cursor:
            out.append([context[cursor:a]])
            cursor = a
        if b <= a:
            out.append(["", i])
            continue
        group, lo, hi = [i], max(a, cursor), b
    flush()
    if cursor < len(context):
        out.append([context[cursor:]])
    return out


def _cuts(parts) -> dict:
    """:func:`pieces` as the page holds them: ``{"k": lengths in UTF-16 code units (a character
    beyond U+FFFF counts two, as in a JavaScript string), "q": first token of each piece or
    -1}``, ``q`` left out where piece j is token j throughout."""
    k = [len(p[0].encode("utf-16-le")) // 2 for p in parts]
    q = [p[1] if len(p) > 1 else -1 for p in parts]
    return {"k": k} if q == list(range(len(q))) and all(len(p) == 2 for p in parts) else {"k": k, "q": q}


def _top_tokens(tops, strings):
    if not tops:
        return None
    listed = tops["tokens"][:TOP_TOKENS]
    return {"rows": tops["rows"], "share": _num(tops["share"]), "more": len(tops["tokens"]) - len(listed),
            "tokens": [[strings.index(t.get("token")), t["count"], _num(t["mean"])] for t in listed]}


def _logits(table, strings):
    if not table:
        return None
    return {side: [[t[0], strings.index(t[1]), _num(t[2])] for t in table.get(side) or ()]
            for side in ("promoted", "suppressed")}


def _unit(u, strings):
    skip = {"top", "bottom", "bands", "hist", "logits", "top_tokens"}
    out = {k: _num(v) if not isinstance(v, dict) else {a: _num(b) for a, b in v.items()}
           for k, v in u.items() if k not in skip}
    scale = out["acts_scale"] = _num(_acts_scale(u))
    out["top"] = [_example(e, strings, scale) for e in u.get("top") or ()]
    out["bottom"] = [_example(e, strings, scale) for e in u.get("bottom") or ()]
    out["bands"] = [{"quantiles": b.get("quantiles"), "lo": _num(b.get("lo")), "hi": _num(b.get("hi")),
                     "examples": [_example(e, strings, scale) for e in b.get("examples") or ()]}
                    for b in u.get("bands") or ()]
    hist = u.get("hist") or {}
    out["hist"] = {"counts": list(hist.get("counts") or ()), "edges": [_num(float(x)) for x in hist.get("edges") or ()]}
    out["logits"] = _logits(u.get("logits"), strings)
    out["top_tokens"] = _top_tokens(u.get("top_tokens"), strings)
    return out


def units_data(report: dict, *, title: str = "", subtitle: str = "") -> dict:
    """The page's form of a unit report's ``to_dict()`` (see the module's docstring)."""
    strings = _Strings()
    units = [_unit(u, strings) for u in report.get("units", ())]
    head = {k: v for k, v in report.items() if k not in ("units", "inputs", "matches")}
    inputs = dict(report.get("inputs") or {})
    matches = report.get("matches")
    if matches:
        matches = {k: v for k, v in matches.items() if k not in ("pairs", "null_max")}
    return {"schema": PAGE_SCHEMA, "title": title, "subtitle": subtitle, "report": head, "inputs": inputs,
            "matches": matches, "units": units, "strings": strings.table}


def _title(report: dict) -> tuple[str, str]:
    b = report.get("basis") or {}
    title = f"actkit units: {b.get('kind', '')} units of {report.get('layer')} ({Path(str(report.get('store'))).name})"
    n = len(report.get("units") or ())
    sub = (f"{n} of {b.get('n_units')} units, {report.get('n_rows'):,} rows, ordered by {report.get('order')}; "
           f"{len(report.get('dead') or ())} dead, {len(report.get('flipped') or ())} flipped")
    return title, sub


def units_page(report, path, *, title: str | None = None, overwrite: bool = False) -> Path:
    """Write the page of a :class:`~actkit.UnitReport` (or its ``to_dict()``): an index
    of every unit (sortable by each score, searchable by the text of its examples and its logit
    tokens, filters for dead, shared and label-selective units) and one card per unit, drawn
    when it comes into view."""
    check_page_path(path, overwrite=overwrite, flag="path")
    d = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    t, sub = _title(d)
    return write_page(path, "units", units_data(d, title=title or t, subtitle=sub), title or t, overwrite=overwrite)


def units_preview(report, *, cards: int = 6, height: int = 640) -> str:
    """A notebook's view of a unit report: the page of its first ``cards`` units in an
    ``<iframe srcdoc>`` (the page's own CSP and escaping hold inside it)."""
    d = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    t, sub = _title(d)
    shown = dict(d, units=list(d.get("units") or ())[:cards])
    page = render_page("units", units_data(shown, title=t, subtitle=sub + f" (the first {cards} shown here)"), t)
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
            f'style="width:100%;height:{int(height)}px;border:1px solid #ccc"></iframe>')
