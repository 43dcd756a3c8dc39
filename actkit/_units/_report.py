"""``UnitReport``: the data of a unit report, computed once, and its views."""

from __future__ import annotations

import json

from actkit._frames import frame_html
from actkit._json import json_ready
from actkit.errors import InputError

__all__ = ["SCHEMA", "UnitReport"]

SCHEMA = "actkit-units/1"

#: the columns of :meth:`UnitReport.to_frame`, in order
COLUMNS = ("unit", "rank", "mean", "sd", "variance", "skewness", "kurtosis", "active_share", "beyond_3sd",
           "share_shown", "dead", "flipped",
           "top_value", "top_token", "top_token_share", "label", "label_auroc", "label_mi", "match", "match_corr", "match_p", "shared",
           "token_purity", "token_r2", "context_r2", "description")


def _top_token(tops) -> dict:
    """The ``to_frame`` columns of a unit's ``top_tokens``: its first token and that token's share."""
    if not tops:
        return {"top_token": None, "top_token_share": float("nan")}
    return {"top_token": tops["tokens"][0].get("token"), "top_token_share": tops["share"]}


_SHOWN = {"\n": "\u21b5", "\r": "\u21b5", "\u2028": "\u21b5", "\u2029": "\u21b5", "\t": "\u2192"}


def _visible(text: str) -> str:
    """Text for one terminal line: line breaks as ``↵``, tabs as ``→``, other control
    characters escaped (``\\x1b``); every other character as it is."""
    return "".join(_SHOWN.get(c) or (c if c.isprintable() else repr(c)[1:-1]) for c in text)


def context_line(text: dict, width: int = 60) -> str:
    """A text example as one line: its context's characters with the example's token in
    brackets (``said [“hi”] to``), cut to about ``width`` characters around the token."""
    ctx, span = text.get("context"), text.get("span")
    if ctx is None:
        return "(no text)"
    if span is None:
        return _visible(ctx[:width] + ("\u2026" if len(ctx) > width else ""))
    a, b = span
    left, mid, right = ctx[:a], ctx[a:b], ctx[b:]
    room = max(0, (width - len(mid)) // 2)
    left = ("\u2026" + left[-room:]) if len(left) > room else left
    right = (right[:room] + "\u2026") if len(right) > room else right
    if not mid:  # a token without characters of its own (a special token): its piece
        mid = text["tokens"][text["highlight"]]
    return _visible(left) + "[" + _visible(mid) + "]" + _visible(right)


def _share(u) -> str:
    """The share a unit's line shows: rows beyond 3 SD of its mean (a dense unit) or active rows."""
    if u.get("dead"):
        return "never active  "
    if u.get("share_shown") == "beyond_3sd":
        return f">3sd {u['beyond_3sd']:6.1%}"
    return f"active {u['active_share']:6.1%}"


class UnitReport:
    """What each unit of a layer responds to (:func:`actkit.units`).

    Every view (:meth:`to_frame`, :meth:`to_json`, the text ``repr``, the page) reads the one
    dictionary :meth:`to_dict` returns; its schema (``"schema": "actkit-units/1"``):

    * ``store``, ``layer``, ``n_rows``, ``n_samples``, ``k``, ``k_tokens``, ``context``,
      ``order`` (str), ``random_state``;
    * ``basis``: ``{"kind": "neuron"|"pca"|"ica"|"dictionary"|"sae", "source": str,
      "n_units": int}``;
    * ``flipped``: ICA units whose sign was flipped to make their skewness non-negative;
      ``dead``: units never active (non-zero) on any row (listed apart, at the end);
    * ``inputs``: ``{"kind": "text"|"image"|None, "images": {sample: PNG data URI} (images),
      "tokenizer": {...}, "text": "recorded"|"decoded"|"pieces" (text: the input's own
      characters, an older store's decoded from its ids, or token pieces joined by spaces)}``;
    * ``logit_lens``: whether units carry logit tables; ``lens``: None or ``{"folded": bool,
      "norm": module, "kind": "layernorm"|"rmsnorm"}`` (:mod:`actkit._units._lens`); ``labels``:
      None or ``{"names": [...], "with_own_unit": [label names], "count": int, "threshold":
      AUROC, "note": labels per input sample spread over their rows}``;
    * ``matches``: None, or what :func:`actkit.match_units` found (``other``, ``pairs``,
      ``shared``, ``null_max``, ``permutations``);
    * ``units``: one dict per shown unit, in the report's order:
      ``unit`` (index in the basis), ``rank``, ``mean``, ``sd``, ``variance``, ``skewness``,
      ``kurtosis`` (excess), ``active_share`` (share of rows with a non-zero activation),
      ``beyond_3sd`` (share of rows beyond 3 SD of the mean), ``share_shown`` (which of the two
      the views show: ``"beyond_3sd"`` for dense units, ``"active"`` for sparse ones),
      ``dead``, ``flipped``; ``hist``: ``{"counts": [m], "edges": [m+1]}`` over all rows;
      ``top`` and ``bottom`` (``bottom`` empty for SAE / dictionary codes): examples, highest
      (lowest) first; ``bands``: ``[{"lo", "hi", "examples": [...]}]`` quantile bands of the
      active rows below the top, highest band first; ``top_tokens``: None (no inputs) or
      ``{"rows", "share", "tokens": [{"id", "token", "count", "mean"}]}`` over the unit's
      ``k_tokens`` highest rows (:func:`actkit._units._tokens.top_tokens`; images: the patch
      cells); ``logits``: None or ``{"promoted":
      [[token id, token, logit]], "suppressed": [...]}``; ``label``: None or ``{"name",
      "auroc", "mutual_information"}`` (bits); ``match``: None or ``{"unit", "corr",
      "p_value", "shared"}``; with recorded inputs ``token_purity``, ``token_r2``,
      ``context_r2`` (None for images) and ``description`` (docs/definitions.md, section 7),
      and the report's ``scores``: the split they were computed on (``heldout_samples``...).

    An example: ``{"row", "value", "sample", "position"}`` (position -1: a pooled row) and,
    with recorded inputs, ``"text": {"context": str, "span": [start, end], "token_spans":
    [[start, end]], "acts": [float|None], "tokens": [str], "highlight": int|None, "start": int,
    "special": [bool]}``: the window's original characters, the row's token's characters in
    it, every window token's, the unit's activation at every window token (oriented as the
    report; None where a token has no row), the tokenizer's pieces of the window (the token
    at ``highlight`` is the row's; None: the whole input), the window's first position; or
    ``"image": {"sample", "box": [y0, x0, y1, x1] in pixels or None, "cell": [row, col]}``.
    Strings from the inputs and labels are data: no view turns them into markup.
    """

    def __init__(self, data: dict):
        self._data = data
        self._by_unit = {u["unit"]: u for u in data["units"]}

    def to_dict(self) -> dict:
        """The report's data (JSON-safe: plain Python types, NaN as None)."""
        return json_ready(self._data)

    @property
    def units(self) -> list:
        """The shown units' indices, in the report's order."""
        return [u["unit"] for u in self._data["units"]]

    def unit(self, i) -> dict:
        """The dict of unit ``i`` (its index in the basis)."""
        try:
            return json_ready(self._by_unit[int(i)])
        except KeyError:
            raise InputError(f"unit {i} is not in this report (units 0..{self._data['basis']['n_units'] - 1}; "
                             f"shown: {len(self._by_unit)})") from None

    def to_frame(self):
        """A pandas DataFrame, one row per shown unit (columns :data:`COLUMNS`)."""
        import pandas as pd  # pandas: ~0.3 s at import; only for a DataFrame

        rows = []
        for u in self._data["units"]:
            lab, match = u.get("label") or {}, u.get("match") or {}
            rows.append({"unit": u["unit"], "rank": u["rank"], "mean": u["mean"], "sd": u["sd"],
                         "variance": u["variance"], "skewness": u["skewness"], "kurtosis": u["kurtosis"],
                         "active_share": u["active_share"], "beyond_3sd": u.get("beyond_3sd", float("nan")),
                         "share_shown": u.get("share_shown"), "dead": u["dead"], "flipped": u["flipped"],
                         "top_value": u["top"][0]["value"] if u["top"] else float("nan"),
                         **_top_token(u.get("top_tokens")),
                         "label": lab.get("name"), "label_auroc": lab.get("auroc", float("nan")),
                         "label_mi": lab.get("mutual_information", float("nan")),
                         "match": match.get("unit"), "match_corr": match.get("corr", float("nan")),
                         "match_p": match.get("p_value", float("nan")), "shared": match.get("shared"),
                         **{k: u.get(k, float("nan")) for k in ("token_purity", "token_r2", "context_r2")},
                         "description": u.get("description")})
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def to_html(self, path, *, overwrite: bool = False):
        """Write the report's page (:func:`actkit.pages.units_page`): one self-contained HTML
        file, an index of every unit and one card per unit; returns its path."""
        from actkit.pages import units_page  # hand-off: the page is drawn by the room above

        return units_page(self, path, overwrite=overwrite)

    def _repr_html_(self) -> str:
        """A notebook's view: the first rows of :meth:`to_frame`, then the page of the first
        cards (escaped as the page is)."""
        from actkit.pages import units_preview  # hand-off: the cards are drawn by the room above

        frame = self.to_frame().head(20).set_index("unit")
        return frame_html(frame.dropna(axis=1, how="all"), caption=repr(self).splitlines()[0]) + units_preview(self)

    def to_json(self, path) -> None:
        """Write :meth:`to_dict` as JSON (atomically)."""
        from actkit._atomic import write_json_atomic  # numpy-only helper; only for writing

        write_json_atomic(path, self.to_dict(), indent=1, allow_nan=False)

    def __len__(self):
        return len(self._data["units"])

    def __repr__(self) -> str:
        d = self._data
        b = d["basis"]
        lines = [f"UnitReport: {b['n_units']} {b['kind']} units of layer {d['layer']} ({d['n_rows']:,} rows), "
                 f"ordered by {d['order']}; {len(d['dead'])} dead, {len(d['flipped'])} flipped"]
        for u in d["units"][:10]:
            top = u["top"][0] if u["top"] else None
            what = ""
            if top is not None and "text" in top:
                t = top["text"]
                what = context_line(t) if t["highlight"] is not None else "(whole input) " + context_line(t)
            elif top is not None and top.get("image", {}).get("cell") is not None:
                what = f"image {top['sample']} patch {tuple(top['image']['cell'])}"
            elif top is not None:
                what = f"sample {top['sample']} pos {top['position']}"
            lab = f"  label {u['label']['name']!r} AUROC {u['label']['auroc']:.2f}" if u.get("label") else ""
            tops = u.get("top_tokens")
            if tops:
                first = tops["tokens"][0]
                # a partial byte-level token is recorded as its escaped bytes (r"\xe2\x80"): shown
                # once escaped, not twice
                lab = (f"  tokens {repr(first.get('token')).replace(chr(92) * 2, chr(92))} "
                       f"{first['count']}/{tops['rows']}") + lab
            lines.append(f"  unit {u['unit']:>5d}  skew {u['skewness']:+7.2f}  {_share(u)}"
                         f"  top {top['value'] if top else float('nan'):+.3g} {what}{lab}")
        if len(d["units"]) > 10:
            lines.append(f"  ... {len(d['units']) - 10} more")
        return "\n".join(lines)
