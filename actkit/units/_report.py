"""``UnitReport``: the data of a unit report, computed once, and its views."""

from __future__ import annotations

import json
import math

import numpy as np

from actkit._frames import frame_html
from actkit.errors import InputError
from actkit.pages import units_page, units_preview

__all__ = ["SCHEMA", "UnitReport"]

SCHEMA = "actkit-units/1"

#: the columns of :meth:`UnitReport.to_frame`, in order
COLUMNS = ("unit", "rank", "mean", "sd", "variance", "skewness", "kurtosis", "active_share", "dead", "flipped",
           "top_value", "label", "label_auroc", "label_mi", "match", "match_corr", "match_p", "shared",
           "token_purity", "token_r2", "context_r2", "description")


def _clean(x):
    """JSON-safe: numpy scalars and arrays as Python, NaN as None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


class UnitReport:
    """What each unit of a layer responds to (:func:`actkit.units`).

    Every view (:meth:`to_frame`, :meth:`to_json`, the text ``repr``, the page) reads the one
    dictionary :meth:`to_dict` returns; its schema (``"schema": "actkit-units/1"``):

    * ``store``, ``layer``, ``n_rows``, ``n_samples``, ``k``, ``context``, ``order`` (str),
      ``random_state``;
    * ``basis``: ``{"kind": "neuron"|"pca"|"ica"|"dictionary"|"sae", "source": str,
      "n_units": int}``;
    * ``flipped``: ICA units whose sign was flipped to make their skewness non-negative;
      ``dead``: units never active (non-zero) on any row (listed apart, at the end);
    * ``inputs``: ``{"kind": "text"|"image"|None, "images": {sample: PNG data URI} (images),
      "tokenizer": {...} (text)}``;
    * ``logit_lens``: whether units carry logit tables; ``labels``: None or ``{"names": [...],
      "with_own_unit": [label names], "count": int, "threshold": AUROC}``;
    * ``matches``: None, or what :func:`actkit.match_units` found (``other``, ``pairs``,
      ``shared``, ``null_max``, ``permutations``);
    * ``units``: one dict per shown unit, in the report's order:
      ``unit`` (index in the basis), ``rank``, ``mean``, ``sd``, ``variance``, ``skewness``,
      ``kurtosis`` (excess), ``active_share`` (share of rows with a non-zero activation),
      ``dead``, ``flipped``; ``hist``: ``{"counts": [m], "edges": [m+1]}`` over all rows;
      ``top`` and ``bottom`` (``bottom`` empty for SAE / dictionary codes): examples, highest
      (lowest) first; ``bands``: ``[{"lo", "hi", "examples": [...]}]`` quantile bands of the
      active rows below the top, highest band first; ``logits``: None or ``{"promoted":
      [[token id, token, logit]], "suppressed": [...]}``; ``label``: None or ``{"name",
      "auroc", "mutual_information"}`` (bits); ``match``: None or ``{"unit", "corr",
      "p_value", "shared"}``; with recorded inputs ``token_purity``, ``token_r2``,
      ``context_r2`` (None for images) and ``description`` (docs/definitions.md, section 7),
      and the report's ``scores``: the split they were computed on (``heldout_samples``...).

    An example: ``{"row", "value", "sample", "position"}`` (position -1: a pooled row) and,
    with recorded inputs, ``"text": {"tokens": [str], "highlight": int|None, "start": int,
    "special": [bool]}`` (the token at ``highlight`` is the row's; None: the whole input) or
    ``"image": {"sample", "box": [y0, x0, y1, x1] in pixels or None, "cell": [row, col]}``.
    Strings from the inputs and labels are data: no view turns them into markup.
    """

    def __init__(self, data: dict):
        self._data = data
        self._by_unit = {u["unit"]: u for u in data["units"]}

    def to_dict(self) -> dict:
        """The report's data (JSON-safe: plain Python types, NaN as None)."""
        return _clean(self._data)

    @property
    def units(self) -> list:
        """The shown units' indices, in the report's order."""
        return [u["unit"] for u in self._data["units"]]

    def unit(self, i) -> dict:
        """The dict of unit ``i`` (its index in the basis)."""
        try:
            return _clean(self._by_unit[int(i)])
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
                         "active_share": u["active_share"], "dead": u["dead"], "flipped": u["flipped"],
                         "top_value": u["top"][0]["value"] if u["top"] else float("nan"),
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
        return units_page(self, path, overwrite=overwrite)

    def _repr_html_(self) -> str:
        """A notebook's view: the first rows of :meth:`to_frame`, then the page of the first
        cards (escaped as the page is)."""
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
                # repr shows whitespace; a partial byte-level token is recorded as its escaped bytes
                # (r"\xe2\x80"), shown once escaped, not twice
                what = (repr(t["tokens"][t["highlight"]]).replace("\\\\", "\\")
                        if t["highlight"] is not None else "(whole input)")
            elif top is not None and top.get("image", {}).get("cell") is not None:
                what = f"image {top['sample']} patch {tuple(top['image']['cell'])}"
            elif top is not None:
                what = f"sample {top['sample']} pos {top['position']}"
            lab = f"  label {u['label']['name']!r} AUROC {u['label']['auroc']:.2f}" if u.get("label") else ""
            lines.append(f"  unit {u['unit']:>5d}  skew {u['skewness']:+7.2f}  active {u['active_share']:6.1%}"
                         f"  top {top['value'] if top else float('nan'):+.3g} {what}{lab}")
        if len(d["units"]) > 10:
            lines.append(f"  ... {len(d['units']) - 10} more")
        return "\n".join(lines)
