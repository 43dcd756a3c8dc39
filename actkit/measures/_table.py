"""The table of measures ``actkit compare --list-measures`` prints."""

from __future__ import annotations

import shutil
import textwrap

from actkit.measures._registry import all_measures

__all__ = ["measure_table", "format_measure_table"]


def measure_table() -> list:
    """One dict per measure: name, kind, invariances, computed (out of core, sampled or
    held-out fit), params (defaults), paper, reference, cost, convention."""
    return [m.describe() for m in all_measures()]


def format_measure_table(width: int | None = None) -> str:
    """The measures as text: one line each (name, kind, how it is computed, parameters and
    their defaults), then what it is invariant to and its reference, wrapped to ``width``
    columns (default: the terminal's, else 100)."""
    rows = measure_table()
    width = max(60, width or shutil.get_terminal_size((100, 24)).columns)
    w = max(len(r["name"]) for r in rows)
    k = max(len(r["kind"]) for r in rows)
    c = max(len(r["computed"]) for r in rows)
    head = f"{'name':<{w}}  {'kind':<{k}}  {'computed':<{c}}  parameters (defaults)"
    lines = [head, "-" * min(width, len(head))]
    for r in rows:
        lead = f"{r['name']:<{w}}  {r['kind']:<{k}}  {r['computed']:<{c}}  "
        lines += textwrap.wrap(r["params"] or "-", width, initial_indent=lead,
                               subsequent_indent=" " * len(lead), break_on_hyphens=False)
        for label, text in (("invariant to", r["invariances"]), ("reference", r["reference"]),
                            ("convention", r.get("convention", ""))):
            if text:
                lines += textwrap.wrap(f"{label}: {text}", width, initial_indent="    ",
                                       subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)
