"""The result of one reproduction experiment: table, paper numbers, claims, files.

An :class:`ExperimentResult` is what every experiment's ``run`` returns. It prints
as a plain-text table with our numbers beside the paper's, lists the qualitative claims
it tested (each passed or failed, with the measured evidence), and writes itself as
``NAME.json`` plus the figures ``NAME*.png`` into an output folder, atomically.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actkit._atomic import save_figure_atomic, write_text_atomic
from actkit._json import json_ready


@dataclass
class Claim:
    """A qualitative claim of a paper and whether our numbers support it."""

    name: str
    passed: bool
    detail: str

    def to_dict(self):
        return {"name": self.name, "passed": bool(self.passed), "detail": self.detail}


@dataclass
class ExperimentResult:
    """Everything one experiment measured.

    Attributes
    ----------
    name : str
        Experiment name (``bilipschitz``, ``kl``, ...).
    title : str
        What it reproduces (paper, figure or table).
    columns : list of str
        Column order of ``rows``.
    rows : list of dict
        Our measurements, one dict per table row; columns prefixed ``paper`` hold the
        paper's numbers where it reports comparable ones.
    claims : list of Claim
    settings : dict
        Sizes, seeds, quick/full, device.
    conventions : dict
        **[actkit]** choices where the papers are silent (docs/definitions.md tags).
    extra : dict
        Further measurements (curves, matrices) kept in the JSON, not in the table.
    runtime_s : float
    figures : list of str
        Paths of the figures written by :meth:`write`.
    """

    name: str
    title: str
    columns: list
    rows: list
    claims: list
    settings: dict = field(default_factory=dict)
    conventions: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    runtime_s: float = 0.0
    figures: list = field(default_factory=list)
    plot: object = None  # callable(result, out_dir) -> list of Path (not serialised)

    @property
    def passed(self) -> bool:
        """True when every claim held."""
        return all(c.passed for c in self.claims)

    def to_dict(self) -> dict:
        return json_ready({
            "name": self.name, "title": self.title, "passed": self.passed,
            "columns": self.columns, "rows": self.rows,
            "claims": [c.to_dict() for c in self.claims], "settings": self.settings,
            "conventions": self.conventions, "extra": self.extra,
            "runtime_s": round(self.runtime_s, 2), "figures": self.figures,
        })

    def format(self) -> str:
        """The table, then the claims, as plain text."""
        lines = [f"== {self.name}: {self.title}"]
        lines.append(format_table(self.columns, self.rows))
        for c in self.claims:
            lines.append(f"[{'PASS' if c.passed else 'FAIL'}] {c.name}: {c.detail}")
        mode = "quick" if self.settings.get("quick") else "full"
        lines.append(f"({self.runtime_s:.1f} s, {mode} mode)")
        return "\n".join(lines)

    def write(self, out_dir) -> list:
        """Write ``NAME.json`` and the figures into ``out_dir`` (created); return the paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        if self.plot is not None:
            paths = [str(p) for p in self.plot(self, out)]
            self.figures = paths
        json_path = out / f"{self.name}.json"
        write_text_atomic(json_path, json.dumps(self.to_dict(), indent=2, allow_nan=True) + "\n")
        return [str(json_path), *paths]


def _cell(v):
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return "nan"
        a = abs(v)
        return f"{v:.3g}" if (a >= 1000 or (a < 1e-3 and a > 0)) else f"{v:.3f}"
    return str(v)


def format_table(columns, rows) -> str:
    """Fixed-width plain-text table of ``rows`` (dicts) in ``columns`` order."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    head = "  ".join(c.rjust(w) for c, w in zip(columns, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join([head, sep, *body])


def save_figure(fig, path) -> str:
    """Save a matplotlib figure atomically (PNG) and close it."""
    return save_figure_atomic(fig, path, dpi=110)

