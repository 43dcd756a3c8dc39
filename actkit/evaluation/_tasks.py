"""Labels -> binary classification tasks of the downstream protocol (Nelson et al., Table 3).

A *task* is one label against the control label (``control=NAME``, as the paper classifies
every perturbation against the shared controls) or against every other row (one-vs-rest).
With ``groups`` (the paper's CRISPR guides: replicates of one label) each group of a label
is its own sub-task against the same negatives, and the label's numbers are the mean over
its groups. The cross-validation folds are stratified on the group (or the label), so every
group has rows in every training and test fold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from actkit.errors import ValidationError

__all__ = ["Task", "as_labels", "build_tasks"]


@dataclass
class Task:
    """One label's task: its sub-tasks' positive rows (one per group) and the negative rows.

    ``positives`` : list of int64 arrays, one per group (one array without groups);
    ``negatives`` : int64 array (the control rows, or every row of another label).
    """

    name: str
    positives: list
    negatives: np.ndarray
    groups: list = field(default_factory=list)

    @property
    def n_positive(self) -> int:
        return int(sum(len(p) for p in self.positives))


def as_labels(values, n_rows: int, what: str = "labels") -> np.ndarray:
    """One label per row as strings, shape (n_rows,); one-line errors for a wrong count or a
    missing value."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values, dtype=object)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValidationError(f"{what} must hold one label per row (1-D), got shape {arr.shape}")
    if len(arr) != n_rows:
        raise ValidationError(f"{len(arr)} {what} for {n_rows} embedding rows; give exactly one per row")
    missing = [i for i, v in enumerate(arr) if v is None or (isinstance(v, float) and np.isnan(v))]
    if missing:
        raise ValidationError(f"{what} of row {missing[0]} is missing ({len(missing)} rows without one)")
    return np.array([_name(v) for v in arr], dtype=object)


def _name(v) -> str:
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def build_tasks(y: np.ndarray, *, control=None, groups=None, n_splits: int = 5):
    """The tasks and the stratification key of the folds.

    Parameters
    ----------
    y : ndarray of str, shape (n_rows,)
    control : str, optional
        The control label; None: one-vs-rest (with two labels, one task: the second label
        against the first).
    groups : ndarray of str, shape (n_rows,), optional
    n_splits : int
        Folds; every stratum (label, or label and group) needs at least this many rows.

    Returns
    -------
    tasks : list of Task
    strata : ndarray of int64, shape (n_rows,)
        The stratification key of ``StratifiedKFold``.
    """
    labels, _counts = np.unique(y, return_counts=True)
    if len(labels) < 2:
        raise ValidationError(f"the labels hold a single class ({labels[0]!r}); a task needs two")
    if control is not None:
        control = _name(control)
        if control not in set(labels):
            shown = ", ".join(map(repr, labels[:10])) + (" ..." if len(labels) > 10 else "")
            raise ValidationError(f"control label {control!r} does not occur in the labels ({shown})")
    key = y if groups is None else np.array([f"{a}\x00{b}" for a, b in zip(y, groups)], dtype=object)
    strata_names, strata, sizes = np.unique(key, return_inverse=True, return_counts=True)
    small = np.flatnonzero(sizes < n_splits)
    if small.size:
        name = strata_names[small[0]]
        what = (f"class {name!r}" if groups is None else
                "group {1!r} of class {0!r}".format(*name.split("\x00", 1)))
        raise ValidationError(f"{what} has {sizes[small[0]]} rows, fewer than the {n_splits} folds; drop it "
                              f"or use fewer folds (--n-splits)")
    if control is not None:
        positives = [lab for lab in labels if lab != control]
    elif len(labels) == 2:
        positives = [labels[1]]
    else:
        positives = list(labels)
    tasks = []
    controls = np.flatnonzero(y == control) if control is not None else None  # one array, shared by the tasks
    for lab in positives:
        rows = np.flatnonzero(y == lab)
        negatives = controls if control is not None else np.flatnonzero(y != lab)
        if groups is None:
            tasks.append(Task(str(lab), [rows], negatives))
        else:
            names = np.unique(groups[rows])
            tasks.append(Task(str(lab), [rows[groups[rows] == g] for g in names], negatives,
                              [str(g) for g in names]))
    return tasks, strata.astype(np.int64)
