"""What :func:`~actkit.evaluate_postprocessing` returns: :class:`EvaluationResult` (JSON and
the paper's Table 3 as text)."""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass

import numpy as np

from actkit._frames import frame_html, pandas

__all__ = ["DEFINITIONS", "LABELS", "METRICS", "VERSIONS", "EvaluationResult"]

VERSIONS = ("base", "pca", "pca+ica", "pca+rand")
LABELS = {"base": "Base", "pca": "PCA", "pca+ica": "PCA+ICA", "pca+rand": "PCA+Rand"}
METRICS = ("auroc", "sparsity", "concentration")
TITLES = {"auroc": "Mean AUROC (up)", "sparsity": "Sparsity (up)", "concentration": "Concentration (up)"}

DEFINITIONS = {
    "auroc": "ROC AUC of the classifier's probability on the fold's test rows of the task (classifier fitted "
             "on its training rows); mean over groups, folds (and rotations); sd over folds",
    "sparsity": "mean Hoyer sparsity (sqrt(n) - |x|_1/|x|_2)/(sqrt(n) - 1) of x = a positive test row minus the "
                "mean of the negative training rows, n = the version's features",
    "concentration": "share of the test rows' between-class variance sum_j p1 p0 (m1_j - m0_j)^2 carried by the "
                     "ceil(n/4) features of largest between-class variance on the training rows",
    "leakage": "whitening and FastICA fitted on each fold's training rows only; rotations are data-free",
    "reference": "Nelson et al., Tables 3, 4 and 6; docs/definitions.md, 'Downstream protocol'",
}


def _num(x):
    x = float(x)
    return None if math.isnan(x) else x


def _sd(a, axis):
    a = np.asarray(a, float)
    if a.shape[axis] < 2:
        return np.full(np.delete(a.shape, axis), np.nan)
    with _quiet():
        return np.nanstd(a, axis=axis, ddof=1)


@contextlib.contextmanager
def _quiet():
    """No 'mean of empty slice' warnings: an all-NaN entry becomes None in the JSON."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _summary(values):
    """values: (draws, folds, 3) -> dict metric -> mean, sd over folds, sd over draws."""
    with _quiet():
        over_draws = np.nanmean(values, axis=0)   # (folds, 3)
        over_folds = np.nanmean(values, axis=1)   # (draws, 3)
        out = {}
        for m, name in enumerate(METRICS):
            out[name] = _num(np.nanmean(values[..., m]))
            out[f"{name}_sd"] = _num(_sd(over_draws[:, m], 0))
            if values.shape[0] > 1:
                out[f"{name}_sd_rotations"] = _num(_sd(over_folds[:, m], 0))
    return out


@dataclass
class EvaluationResult:
    """Scores of the four versions.

    Attributes
    ----------
    tasks : list of Task
    scores : dict version -> list (per task) of ndarray (n_groups, n_draws, n_splits, 3)
        AUROC, sparsity, concentration of every group, rotation (``pca+rand``) and fold.
    settings : dict
    n_rows, n_features : int
    ica : list of dict
        Per fold: components kept, FastICA convergence and iterations, fit rows.
    """

    tasks: list
    scores: dict
    settings: dict
    n_rows: int
    n_features: int
    ica: list

    def task_values(self, version, t) -> np.ndarray:
        """(n_draws, n_splits, 3): task ``t``'s scores, averaged over its groups."""
        with _quiet():
            return np.nanmean(self.scores[version][t], axis=0)

    def overall_values(self, version) -> np.ndarray:
        """(n_draws, n_splits, 3): the mean over tasks."""
        with _quiet():
            return np.nanmean(np.stack([self.task_values(version, t) for t in range(len(self.tasks))]), axis=0)

    def to_dict(self) -> dict:
        """JSON-ready: one entry per version (``base``, ``pca``, ``pca+ica``, ``pca+rand``) with
        ``auroc``, ``sparsity``, ``concentration``, their ``*_sd`` (over folds; ``pca+rand``
        also ``*_sd_rotations``) and ``tasks`` (the same per task), plus ``settings``,
        ``definitions``, ``tasks`` and ``ica``."""
        out = {}
        for v in VERSIONS:
            entry = _summary(self.overall_values(v))
            entry["tasks"] = {task.name: _summary(self.task_values(v, t)) for t, task in enumerate(self.tasks)}
            out[v] = entry
        out["tasks"] = [{"name": t.name, "positive_rows": t.n_positive, "negative_rows": len(t.negatives),
                         "groups": t.groups} for t in self.tasks]
        out["settings"] = dict(self.settings)
        out["n_rows"], out["n_features"] = self.n_rows, self.n_features
        out["definitions"] = dict(DEFINITIONS)
        out["ica"] = list(self.ica)
        return out

    def to_frame(self):
        """A pandas DataFrame, one row per task and version, then the mean over tasks (task
        ``"(mean)"``): columns ``task``, ``version`` (``base``, ``pca``, ``pca+ica``,
        ``pca+rand``), and per metric (``auroc``, ``sparsity``, ``concentration``) its value, its
        ``_sd`` over folds and its ``_sd_rotations`` (``pca+rand`` only; NaN elsewhere)."""
        pd = pandas()
        d = self.to_dict()
        keys = [k for m in METRICS for k in (m, f"{m}_sd", f"{m}_sd_rotations")]
        rows = []
        parts = [(t.name, lambda v, name=t.name: d[v]["tasks"][name]) for t in self.tasks]
        for task, entry_of in [*parts, ("(mean)", lambda v: d[v])]:
            for v in VERSIONS:
                entry = entry_of(v)
                rows.append({"task": str(task), "version": v, **{k: entry.get(k) for k in keys}})
        frame = pd.DataFrame(rows, columns=["task", "version", *keys])
        frame[keys] = frame[keys].astype(float)
        return frame

    def _repr_html_(self):
        frame = self.to_frame()
        mean = frame.tail(len(VERSIONS)).set_index("version")[list(METRICS)]  # the "(mean)" rows
        return frame_html(mean, caption=f"EvaluationResult: {len(self.tasks)} task(s), mean over tasks "
                                        f"(to_frame() has every task and the sds)", notes=[self.verdict()])

    def format_table(self, max_tasks: int = 40) -> str:
        """The paper's Table 3 (AUROC, sparsity) with Table 4 (concentration) beside it: one
        row per task, then the mean and its sd over folds."""
        d = self.to_dict()
        s = self.settings
        against = f"against control {s['control']!r}" if s["control"] is not None else "one-vs-rest"
        head = (f"{s['classifier']}, {s['n_splits']}-fold stratified CV, {len(self.tasks)} task(s) {against}; "
                f"{self.n_rows} rows x {self.n_features} features, whitened to {self.ica[0]['n_components']}")
        count = "groups" if s["groups"] else "positive rows"
        names = [f"{t.name} ({len(t.groups) if s['groups'] else t.n_positive})" for t in self.tasks][:max_tasks]
        w = max([len(x) for x in names] + [len(f"task (# {count})"), 8])
        cell = 8
        blocks = [TITLES[m].center(4 * cell + 3) for m in METRICS]
        lines = [head, " " * w + " | " + " | ".join(blocks)]
        sub = " ".join(LABELS[v].rjust(cell) for v in VERSIONS)
        lines.append(f"task (# {count})".ljust(w) + " | " + " | ".join([sub] * 3))
        lines.append("-" * len(lines[-1]))

        def row(label, get):
            cells = [" ".join(get(v, m) for v in VERSIONS) for m in METRICS]
            return label.ljust(w) + " | " + " | ".join(cells)

        def fmt(x):
            return "-".rjust(cell) if x is None else f"{x:.3f}".rjust(cell)

        for task, name in zip(self.tasks, names):
            lines.append(row(name, lambda v, m, key=task.name: fmt(d[v]["tasks"][key][m])))
        if len(self.tasks) > max_tasks:
            lines.append(f"... {len(self.tasks) - max_tasks} more tasks in the JSON")
        lines.append("-" * len(lines[2]))
        lines.append(row("mean", lambda v, m: fmt(d[v][m])))
        lines.append(row("sd over folds", lambda v, m: fmt(d[v][f"{m}_sd"])))
        if s["n_rotations"] > 1:
            lines.append(row("sd over rotations", lambda v, m: fmt(d[v].get(f"{m}_sd_rotations"))))
        lines.append(f"PCA+Rand: mean over {s['n_rotations']} Haar-random rotation(s) per fold; whitening and "
                     "FastICA fitted on training folds only")
        lines.append("concentration: share of the between-class variance in the top 25% of features "
                     "(docs/definitions.md)")
        bad = [i["fold"] for i in self.ica if not i["converged"]]
        if bad:
            lines.append(f"note: FastICA did not converge in fold(s) {', '.join(map(str, bad))} "
                         f"(raise --ica-max-iter)")
        lines.append(self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        """One line: does PCA+ICA beat PCA+Rand on each metric (mean over tasks)? Two values
        that print the same (3 decimals) are "equal", whatever their last bits."""
        d = self.to_dict()
        parts = []
        for m in METRICS:
            a, b = d["pca+ica"][m], d["pca+rand"][m]
            if a is None or b is None:
                continue
            word = "equal" if f"{a:.3f}" == f"{b:.3f}" else ("higher" if a > b else "not higher")
            parts.append(f"{m} {a:.3f} vs {b:.3f} ({word})")
        return "PCA+ICA vs PCA+Rand: " + "; ".join(parts)
