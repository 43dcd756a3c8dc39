"""What :func:`~actkit.compare` returns: :class:`CompareResult`, and the conventions it
records in every JSON report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actkit._frames import frame_html, pandas
from actkit.alignment._frame import COLUMNS, measure_rows
from actkit.alignment._ica_sources import ICASources
from actkit.alignment._table import format_table
from actkit.errors import InputError
from actkit.measures import format_param, get_measure


METHODS = ("permutation", "rigid", "linear", "ica")

# the measures a pairwise matrix can hold (``compare_many(metric=...)``)
MATRIX_METRICS = (*METHODS, "ica_efficiency", "linear_cka", "linear_cka_debiased", "mean_cca",
                  "linear_cka_chance", "mean_cca_chance",
                  "ica_matched_corr_mean", "ica_matched_corr_median", "ica_matched_corr_min",
                  "diameter")

CONVENTIONS = {
    "convention_spec": "docs/definitions.md section 1 (actkit 0.1)",
    "convention_error": "mean_i ||h(a_i) - b_i||_2 / diam(B_eval), on held-out rows only",
    "convention_split": "by input sample (groups): no sample straddles fit and eval; seeded",
    "convention_permutation": "signed permutation + translation; Hungarian on "
                              "|a_i|^2+|b_j|^2-2|a_i.b_j| of centred columns; narrower side "
                              "padded with zero columns",
    "convention_rigid": "orthogonal Procrustes R=UV^T of centred cross-covariance, no "
                        "scaling, + translation (semi-orthogonal if Da != Db)",
    "convention_linear": "affine least squares (normal equations in float64, eigen-directions "
                         "below rank_cut x the largest dropped), ridge alpha on weights only "
                         "(alpha='gcv': generalised cross-validation on the fit rows)",
    "convention_closed_form_rows": "rigid needs 5 max(Da, Db) fit rows, linear 10 Da; fewer: "
                                   "<method>_fit_rows_ok false, a note and a dagger",
    "convention_ica": "PCA whitening (ddof=1; eigenvalues < 1e-6 (float32) or 1e-10 (float64) x "
                      "the largest dropped; k = ica_n_components, else min(Da,Db) if the FastICA "
                      "rows n satisfy n >= max(50k, k^2/4), else the largest k' that does) + "
                      "FastICA(logcosh, Picard-O) fitted separately on each side's fit rows from "
                      "ica_restarts random starts (seeds ica_seed..); ica_method=best (default): "
                      "each side keeps its fit of largest FastICA contrast sum_i (E G(y_i) - "
                      "E G(nu))^2, all sources matched by signed permutation on fit rows; "
                      "consensus: only sources pairs of restarts share (|cos| >= 0.995), a pair "
                      "mapped through ICA only where that lowers the fit-row squared error, map = "
                      "mean of the restart-pair maps; everything else of A mapped by the "
                      "permutation alignment; ica_std over the R x R (best) or restart-pair "
                      "(consensus) maps; ica_classic = mean over the R same-start pairings "
                      "(docs/definitions.md, ICA alignment)",
    "convention_ica_identifiable": "best only: false when the best fits of the two halves of "
                                   "the starts share fewer than ceil(0.9 k) sources at |cos| >= "
                                   "0.95 on a side, or ica_self_floor (B onto itself through "
                                   "those two fits) > 0.5 x (err_permutation - err_rigid)",
    "convention_ica_efficiency": "(err_permutation - err_ica) / (err_permutation - err_rigid); "
                                 "NaN when err_permutation - err_rigid <= max(1e-5, 2 x its "
                                 "standard error over held-out input samples)",
    "convention_cka": "linear CKA on all rows, feature-space; debiased = unbiased HSIC "
                      "(Song et al. 2012)",
    "convention_cca": "mean of the top min(rank A, rank B) canonical correlations (directions "
                      "below rank_cut x the largest variance dropped), all rows, in-sample "
                      "(closed form of sklearn CCA)",
    "convention_chance": "linear_cka_chance, mean_cca_chance: the same statistic with B's input "
                         "samples re-paired against A's (whole samples, among samples of equal "
                         "length: the permutation p-values' scheme; with one row per sample, a "
                         "permutation of the rows), within windows of chance_window_rows rows, "
                         "window w by np.random.default_rng([random_state, w])",
    "convention_matched_corr": "Pearson correlation of matched ICA sources "
                               "(paired on fit rows), measured on eval rows",
}


RESAMPLING_CONVENTION = (
    "unit: the input sample (groups). <name>_p: permutation p-value (1 + #{null at least as "
    "similar}) / (1 + N), one-sided toward more similar; null: B's input samples shuffled "
    "against A's, whole samples, among samples of equal length (permutation_exchangeable: the "
    "share shuffled; a row-based measure's <name>_permutation_exchangeable: the share of its row "
    "sample's rows), rng np.random.default_rng([random_state, 1]); it holds the position within "
    "a sample fixed, so <name>_null_mean is the level of position and shared input structure, not "
    "of unrelated representations (permutation_null). <name>_ci_low/_ci_high: "
    "bootstrap of the input samples with replacement (rng [random_state, 2]; alignment errors: "
    "the held-out samples, rng [random_state, 3], fitted maps and diam(B_eval) fixed), basic "
    "(2t - q_hi, 2t - q_lo) or percentile interval at the given confidence (docs/compare.md, "
    "Uncertainty)")


@dataclass
class CompareResult:
    """Everything :func:`compare` measured. ``to_dict()`` is flat and JSON-ready.

    Attributes
    ----------
    errors : dict of method -> float
        Held-out mean l2 error / diam(B_eval) for each alignment.
    ica_efficiency : float
        (err_permutation - err_ica) / (err_permutation - err_rigid); NaN if undefined.
    linear_cka, linear_cka_debiased, mean_cca : float
    matched_correlations : ndarray of shape (k,)
        Held-out Pearson correlation of each pair of ICA-matched sources (sign-corrected);
        NaN for a pair with a source that does not vary (beyond rounding) on the held-out
        rows, counted in ``to_dict()["ica_matched_corr_undefined"]``.
    source_correlation : ndarray of shape (k, k)
        Held-out correlation matrix between A's and B's ICA sources, B's columns ordered
        by the matching (so the matched pairs lie on the diagonal).
    alignments : dict of method -> fitted alignment
    info : dict
        Sizes, diameter, split and timing details (flat scalars).
    notes : list of str
        The caveats of this result, one line each (FastICA did not converge, too few rows per
        ICA component, ...); ``compare`` also warns each once. The CLI and the demo print
        them as ``note:`` lines.
    measures : dict of str -> MeasureValue
        The measures asked for with ``compare(measures=...)`` (:mod:`actkit.measures`), in
        that order: ``value``, ``params``, ``rows`` (a sampled measure's rows, else None);
        with ``permutations`` or ``bootstrap`` also every resampled measure (the table's CKA
        and CCA, the alignment errors) with ``p``, ``null_mean``, ``null_sd``, ``ci_low``,
        ``ci_high`` (docs/compare.md, "Uncertainty").
    heldout_rows : ndarray of shape (n_eval_rows,) or None
        The held-out rows (sorted row numbers of A and B): the rows of ``matched_correlations``
        and ``source_correlation`` (``match_units(..., rows=result.heldout_rows)`` reads the
        same ones).
    """

    errors: dict
    ica_efficiency: float
    linear_cka: float
    linear_cka_debiased: float
    mean_cca: float
    matched_correlations: np.ndarray
    source_correlation: np.ndarray | None
    alignments: dict = field(repr=False)
    info: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    measures: dict = field(default_factory=dict)
    heldout_rows: np.ndarray | None = field(default=None, repr=False)

    @property
    def fit_rows(self) -> np.ndarray | None:
        """The rows the maps and the ICA pairing were fitted on (every row not held out;
        sorted row numbers), or None where the result keeps no split."""
        if self.heldout_rows is None:
            return None
        return np.setdiff1d(np.arange(int(self.info["n_rows"])), self.heldout_rows)

    def ica_basis(self, side):
        """The ICA sources fitted for ``side`` (``"a"`` or ``"b"``) as a fitted transformer
        (:class:`~actkit.alignment.ICASources`) that :func:`actkit.units` and
        :func:`actkit.match_units` take as ``basis=`` / ``basis_b=`` (docs/units.md, "From
        compare to match_units")."""
        h = self.alignments.get("ica")
        if h is None:
            raise InputError("ica_basis: this comparison fitted no ICA; run compare with methods "
                             "including \"ica\"")
        if side not in ("a", "b"):
            raise InputError(f"ica_basis: side must be 'a' or 'b', got {side!r}")
        return ICASources.fitted(side, getattr(h, f"unmixing_{side}_"), getattr(h, f"mixing_{side}_"),
                          getattr(h, f"mean_{side}_"))

    def ica_pairs(self) -> list:
        """The matched ICA sources as ``{"a", "b", "corr"}`` dicts (the sources' numbers in
        :meth:`ica_basis`; ``corr`` the held-out correlation, sign-corrected:
        ``matched_correlations``), in the order of ``matched_correlations``."""
        h = self.alignments.get("ica")
        if h is None:
            return []
        return [{"a": int(a), "b": int(b), "corr": float(c)}
                for (a, b), c in zip(h.pairs_, self.matched_correlations)]

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict: one key per method error, metrics, sizes and conventions."""
        out: dict[str, Any] = {}
        for name in METHODS:
            out[name] = _f(self.errors.get(name, float("nan")))
        out["ica_efficiency"] = _f(self.ica_efficiency)
        out["linear_cka"] = _f(self.linear_cka)
        out["linear_cka_debiased"] = _f(self.linear_cka_debiased)
        out["mean_cca"] = _f(self.mean_cca)
        mc = np.abs(self.matched_correlations)
        undefined = int(np.isnan(mc).sum())
        mc = mc[~np.isnan(mc)]          # sources constant on the held-out rows have none
        out["ica_matched_corr_mean"] = _f(mc.mean()) if mc.size else None
        out["ica_matched_corr_median"] = _f(np.median(mc)) if mc.size else None
        out["ica_matched_corr_min"] = _f(mc.min()) if mc.size else None
        out["ica_matched_corr_undefined"] = undefined
        out.update({k: (_f(v) if isinstance(v, float) else v) for k, v in self.info.items()})
        if self.measures:
            out["measures"] = [name for name, rec in self.measures.items() if rec.asked]
            # the parameters each asked-for measure ran with, where not its defaults
            out["measure_params"] = {name: _non_default(name, rec.params)
                                     for name, rec in self.measures.items() if rec.asked}
            for name, rec in self.measures.items():
                out[name] = _f(rec.value)
                if rec.rows is not None:
                    out[f"{name}_rows"] = int(rec.rows)
                out.update({k: (_f(v) if isinstance(v, float) else v)
                            for k, v in rec.keys().items()})
        out["notes"] = [str(x) for x in self.notes]   # every caveat the table prints
        out.update(CONVENTIONS)
        if self.measures:
            out["convention_resampling"] = RESAMPLING_CONVENTION
        return out

    def __str__(self):
        return format_table([self])

    def measure_rows(self) -> list[dict]:
        """The rows of :meth:`to_frame` as dicts (``measure`` and the frame's columns; None
        where not measured): what the notebook display and the page show."""
        return measure_rows(self.to_dict())

    def to_frame(self):
        """A pandas DataFrame, one row per measure (index ``measure``): ``kind`` (error,
        similarity, distance, efficiency, chance), ``value``, the bootstrap interval
        ``ci_low``/``ci_high``, the permutation ``p`` with the null's ``null_mean``/``null_sd``
        (NaN where not resampled) and ``note`` (what this number needs said, else "").
        The result's notes are in ``frame.attrs["notes"]``."""
        pd = pandas()
        frame = pd.DataFrame(self.measure_rows(), columns=["measure", *COLUMNS]).set_index("measure")
        num = [c for c in COLUMNS if c not in ("kind", "note")]
        frame[num] = frame[num].astype(float)
        frame.attrs["notes"] = [str(x) for x in self.notes]
        return frame

    def _repr_html_(self):
        frame = self.to_frame()
        return frame_html(frame.dropna(axis=1, how="all"), notes=frame.attrs["notes"],
                          caption=f"CompareResult: {self.info.get('n_rows', '?')} rows, "
                                  f"{self.info.get('n_features_a', '?')} x {self.info.get('n_features_b', '?')} features")


def _non_default(name, params):
    """``params`` less those at the measure's defaults (a variant keeps the ones in its key)."""
    base, _, spec = name.partition(":")
    keyed = {part.partition("=")[0] for part in spec.split(":") if part}
    defaults = get_measure(base).defaults()
    return {k: format_param(v) for k, v in params.items() if k in keyed or v != defaults.get(k)}


def _f(x):
    x = float(x)
    return None if math.isnan(x) else x

