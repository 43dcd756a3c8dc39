"""``BasisComparison``: the data of :func:`actkit.compare_bases`, computed once, and its views
(``to_frame``, ``to_dict``, ``to_json``, ``to_html``, the notebook's and the terminal's)."""

from __future__ import annotations

import numpy as np

from actkit._json import json_ready
from actkit._units._summary import (SCORES, STATISTICS, THRESHOLDS, TOP_FACTOR, difference, purity_resampled,
                                    summarize)

__all__ = ["SCHEMA", "BasisComparison", "assemble"]

SCHEMA = "actkit-bases/1"
#: the columns of :meth:`BasisComparison.to_frame`, in order
COLUMNS = ("basis", "score", "statistic", "value", "ci_low", "ci_high", "n_units", "control")
#: the scores a verdict compares (their medians)
VERDICT_SCORES = ("token_purity", "token_r2", "context_r2")


def _per_unit(scoring):
    """``{score: (n_units,) float}`` of every unit of a basis."""
    n = scoring.token_r2.size
    none = np.full(n, np.nan)
    return {"token_purity": scoring.token_purity, "token_r2": scoring.token_r2,
            "context_r2": none if scoring.context_r2 is None else scoring.context_r2,
            "label_auroc": none if scoring.label_auroc is None else scoring.label_auroc}


def _resampled_purity(scoring, plan, draws, k):
    """(B, units) token purity of every resample (the unit's top ``K`` rows, as oriented)."""
    rows = scoring.oriented_top()[1][:TOP_FACTOR * k]
    ok = rows >= 0
    keys = np.where(ok, plan.token[np.maximum(rows, 0)], -2)
    samples = np.where(ok, plan.sample[np.maximum(rows, 0)], -1)
    return purity_resampled(keys, samples, draws, k)


def _entry(name, report, scoring, plan, draws, k, confidence, control):
    """One basis's part of the comparison and its resampled statistics ``{score: {stat: (B,)}}``."""
    data = report._data
    values = _per_unit(scoring)
    boots = {"token_purity": None if draws is None else _resampled_purity(scoring, plan, draws, k),
             "token_r2": scoring.boot_token_r2, "context_r2": scoring.boot_context_r2, "label_auroc": None}
    labels = scoring.labels
    scores, stats = {}, {}
    for s in SCORES:
        if s == "context_r2" and scoring.context_r2 is None or s == "label_auroc" and labels is None:
            continue
        scores[s], stats[s] = summarize(s, values[s], boots[s], THRESHOLDS[s], confidence)
    shown = {int(u["unit"]): u for u in data["units"]}
    best, worst = ([shown[j] for j in ids] for ids in scoring.shown)
    entry = {"name": name, "kind": data["basis"]["kind"], "source": data["basis"]["source"],
             "n_units": int(data["basis"]["n_units"]), "control": bool(control), "scores": scores,
             "labels": None if labels is None else {k_: labels[k_] for k_ in ("with_own_unit", "count", "threshold")},
             "probing": None if scoring.probes is None else scoring.probes.results(draws, confidence),
             "flipped": list(data.get("flipped") or []),
             "units": {"unit": list(range(values["token_r2"].size)), **values, "description": scoring.description},
             "best": best, "worst": worst}
    return entry, stats


def _pairs(names, controls):
    """``(a, b)`` for every pair: a later basis against an earlier one ("ica vs neurons"), a
    basis against a control ("ica vs random_rotation")."""
    out = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            out.append((names[i], names[j]) if names[j] in controls else (names[j], names[i]))
    return out


def _verdicts(entries, stats, confidence, controls):
    """One verdict per pair of bases and score: the medians and their difference's interval."""
    out = []
    for a, b in _pairs([e["name"] for e in entries], controls):
        ea, eb = (next(e for e in entries if e["name"] == n) for n in (a, b))
        for s in VERDICT_SCORES:
            if s not in ea["scores"] or s not in eb["scores"]:
                continue
            va, vb = ea["scores"][s]["median"]["value"], eb["scores"][s]["median"]["value"]
            ra, rb = stats[a].get(s), stats[b].get(s)
            diff = difference(va, None if ra is None else ra["median"], vb, None if rb is None else rb["median"],
                              confidence)
            v = {"a": a, "b": b, "score": s, "statistic": "median", "a_value": va, "b_value": vb, **diff}
            out.append(dict(v, text=verdict_text(v)))
    return out


def _fmt(x, digits=2):
    return "n/a" if x is None else f"{x:.{digits}f}"


def verdict_text(v) -> str:
    """``"token_purity median 0.85 vs 0.25 (difference 0.60 [0.55, 0.65])"``; an interval
    that holds 0: ``..., not resolved)``; no interval: ``(difference 0.60, no interval)``."""
    head = f"{v['score']} median {_fmt(v['a_value'])} vs {_fmt(v['b_value'])} (difference {_fmt(v['difference'])}"
    if v["ci_low"] is None:
        return head + ", no interval)"
    tail = "" if v["resolved"] else ", not resolved"
    return head + f" [{_fmt(v['ci_low'])}, {_fmt(v['ci_high'])}]{tail})"


def verdict_lines(verdicts) -> list:
    """One line per pair of bases: ``"ica vs neurons: token_purity median ...; token_r2 ..."``."""
    lines, seen = [], {}
    for v in verdicts:
        seen.setdefault((v["a"], v["b"]), []).append(v["text"])
    for (a, b), parts in seen.items():
        lines.append(f"{a} vs {b}: " + "; ".join(parts))
    return lines


def _samples_shown(units):
    out = set()
    for u in units:
        for e in list(u.get("top") or []) + list(u.get("bottom") or []) + [x for b in u.get("bands") or []
                                                                             for x in b.get("examples") or []]:
            out.add(str(e.get("sample")))
    return out


def _inputs(reports, entries):
    """The reports' inputs, with the pictures of the shown units' examples (images) only."""
    first = dict(next(iter(reports.values()))._data.get("inputs") or {})
    if first.get("kind") == "image":
        shown = set().union(*(_samples_shown(e["best"] + e["worst"]) for e in entries))
        images = {}
        for r in reports.values():
            images.update({s: uri for s, uri in ((r._data.get("inputs") or {}).get("images") or {}).items()
                           if s in shown})
        first["images"] = dict(sorted(images.items()))
    return first


def assemble(store, layer, runs, plan, draws, *, k, confidence, bootstrap, controls, notes):
    """The :class:`BasisComparison` of ``runs`` (``[(name, UnitReport, Scoring)]``)."""
    entries, stats, reports = [], {}, {}
    for name, report, scoring in runs:
        entry, stats[name] = _entry(name, report, scoring, plan, draws, k, confidence, name in controls)
        entries.append(entry)
        reports[name] = report
    first = runs[0][1]._data
    data = {"schema": SCHEMA, "store": str(getattr(store, "path", "")), "layer": layer, "n_rows": first["n_rows"],
            "n_samples": first["n_samples"], "k": int(k), "top_rows": TOP_FACTOR * int(k), "bootstrap": int(bootstrap),
            "confidence": float(confidence), "interval": "centred percentile", "thresholds": dict(THRESHOLDS),
            "controls": list(controls), "split": plan.info(), "inputs": _inputs(reports, entries),
            "labels": None if first.get("labels") is None else first["labels"]["names"],
            "bases": entries, "verdicts": _verdicts(entries, stats, confidence, controls), "notes": list(notes)}
    return BasisComparison(data, reports)


class BasisComparison:
    """Bases of one layer scored side by side (:func:`actkit.compare_bases`).

    Every view reads the one dictionary :meth:`to_dict` returns (``"schema": "actkit-bases/1"``):

    * ``store``, ``layer``, ``n_rows``, ``n_samples``, ``k``, ``top_rows`` (rows per unit kept
      for resampling the purity), ``bootstrap``, ``confidence``, ``interval`` ("centred percentile":
      :func:`actkit._units._summary.centred_interval`),
      ``thresholds``, ``controls``, ``labels`` (names or None), ``notes``;
    * ``split``: ``eval_fraction``, ``max_rows``, ``random_state``, ``key`` ("token" or "patch
      cell"), ``fit_rows``, ``heldout_rows``, ``scored_samples``, ``heldout_samples`` (ids);
    * ``bases``: per basis ``name``, ``kind``, ``source``, ``n_units``, ``control``;
      ``scores``: per score (``token_purity``, ``token_r2``, ``context_r2``, ``label_auroc``)
      ``n_units`` (units with the score), ``threshold`` and ``median`` / ``mean`` / ``p90`` /
      ``share`` (at or above the threshold), each ``{"value", "ci_low", "ci_high"}``
      (``label_auroc`` without intervals); ``labels``: ``{"with_own_unit", "count",
      "threshold"}``; ``probing``: ``{k: {"accuracy", "ci_low", "ci_high", "per_label",
      "units"}}`` (k = 1, 2, 5); ``units``: every unit's scores and ``description``;
      ``best`` / ``worst``: the unit dicts (:class:`~actkit.UnitReport`'s schema) of the
      five units of the highest and of the lowest token R^2 (worst first); ``flipped``;
    * ``verdicts``: per pair of bases and score ``{"a", "b", "score", "statistic", "a_value",
      "b_value", "difference", "ci_low", "ci_high", "resolved", "text"}`` (``text``: the
      verdict in words, :func:`verdict_text`).

    ``reports`` holds each basis's :class:`~actkit.UnitReport` of the units it shows (the
    best and the worst: a comparison renders no other unit's examples; run :func:`actkit.units`
    for every unit's card).
    """

    def __init__(self, data: dict, reports: dict | None = None):
        self._data = data
        self.reports = dict(reports or {})

    def to_dict(self) -> dict:
        """The comparison's data (JSON-safe: plain Python types, NaN as None)."""
        return json_ready(self._data)

    @property
    def bases(self) -> list:
        """The bases' names, in order (the neurons first, the controls last)."""
        return [b["name"] for b in self._data["bases"]]

    def verdicts(self) -> list:
        """One plain line per pair of bases (:func:`verdict_lines`)."""
        return verdict_lines(self._data["verdicts"])

    def to_frame(self):
        """A pandas DataFrame, one row per basis, score and statistic (columns :data:`COLUMNS`);
        k-sparse probing as score ``probing_k1`` (``_k2``, ``_k5``), statistic ``accuracy``."""
        import pandas as pd  # pandas: ~0.3 s at import; only for a DataFrame

        rows = []
        for b in self._data["bases"]:
            for s, summ in b["scores"].items():
                for stat in STATISTICS:
                    rows.append({"basis": b["name"], "score": s, "statistic": stat, **summ[stat],
                                 "n_units": summ["n_units"], "control": b["control"]})
            for kk, pr in (b.get("probing") or {}).items():
                rows.append({"basis": b["name"], "score": f"probing_k{kk}", "statistic": "accuracy",
                             "value": pr["accuracy"], "ci_low": pr["ci_low"], "ci_high": pr["ci_high"],
                             "n_units": int(kk), "control": b["control"]})
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def to_json(self, path) -> None:
        """Write :meth:`to_dict` as JSON (atomically)."""
        from actkit._atomic import write_json_atomic  # numpy-only helper; only for writing

        write_json_atomic(path, self.to_dict(), indent=1, allow_nan=False)

    def to_html(self, path, *, overwrite: bool = False):
        """Write the comparison's page (:func:`actkit.pages.bases_page`): the table, each
        basis's score distributions, the best and worst units' cards; returns its path."""
        from actkit.pages import bases_page  # the page: a late hand-off to the pages

        return bases_page(self, path, overwrite=overwrite)

    def _repr_html_(self) -> str:
        """A notebook's view: the medians with their intervals, then the verdicts."""
        from actkit._frames import frame_html  # pandas: only for a notebook's table

        f = self.to_frame()
        f = f[f["statistic"].isin(["median", "accuracy"])].set_index(["basis", "score"])
        return frame_html(f.drop(columns=["statistic"]), caption=repr(self).splitlines()[0], notes=self.verdicts())

    def __repr__(self) -> str:
        d = self._data
        lines = [f"BasisComparison: {len(d['bases'])} bases of layer {d['layer']} ({d['n_rows']:,} rows), "
                 f"k={d['k']}, {d['bootstrap']} resamples of input samples, {100 * d['confidence']:g}% intervals"]
        for b in d["bases"]:
            cells = []
            for s in ("token_purity", "token_r2", "context_r2"):
                m = (b["scores"].get(s) or {}).get("median")
                if m:
                    ci = "" if m["ci_low"] is None else f" [{_fmt(m['ci_low'])}, {_fmt(m['ci_high'])}]"
                    cells.append(f"{s} {_fmt(m['value'])}{ci}")
            if b.get("labels"):
                cells.append(f"own unit {b['labels']['count']} of {len(d['labels'] or [])} labels")
            for kk, pr in (b.get("probing") or {}).items():
                cells.append(f"probe k={kk} {_fmt(pr['accuracy'])}")
            lines.append(f"  {b['name']:<16s} {b['n_units']:>6d} units  " + "; ".join(cells))
        lines += [f"  {line}" for line in self.verdicts()]
        lines += [f"  note: {n}" for n in d["notes"]]
        return "\n".join(lines)
