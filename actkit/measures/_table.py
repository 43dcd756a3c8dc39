"""The table of measures ``actkit compare --list-measures`` prints."""

from __future__ import annotations

from actkit.measures._protocol import all_measures

__all__ = ["measure_table", "format_measure_table"]

_COLUMNS = ("name", "kind", "invariances", "computed", "params", "reference")


def measure_table() -> list:
    """One dict per measure: name, kind, invariances, computed (out of core, sampled or
    held-out fit), params (defaults), paper, reference, cost."""
    return [m.describe() for m in all_measures()]


def format_measure_table() -> str:
    """The measures as a text table (name, kind, invariances, out of core or sampled,
    parameters, reference)."""
    rows = measure_table()
    head = {c: c for c in _COLUMNS}
    widths = {c: max(len(str(r[c])) for r in [head, *rows]) for c in _COLUMNS[:-1]}
    lines = []
    for r in [head, *rows]:
        cells = [str(r[c]).ljust(widths[c]) for c in _COLUMNS[:-1]] + [str(r["reference"])]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "-" * min(len(lines[0]), 120))
    return "\n".join(lines)
