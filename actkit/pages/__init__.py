"""Results people can look at: one self-contained HTML page per result.

``compare_page(results, path)``  the compare table (every measure, its interval and p-value,
                                 the notes), the ICA source correlations, a layer map
``evaluate_page(result, path)``  the four versions of ``actkit evaluate``: table and figure
``render_page``, ``write_page``  any kind's page from its data (``templates/<kind>.js``)
``check_page_path``              what ``--html`` accepts (``.html``/``.htm``, writable, no
                                 file there but an actkit page, and that only with overwrite)

Each page is one file: the CSS, the JavaScript and the data (as inert JSON) inline, figures as
inline SVG (drawn by the page's script) or PNG ``data:`` URIs; a Content-Security-Policy lets
nothing else load or run. The templates are package files (``actkit/pages/templates``), plain
JavaScript with no build step; every string of the data is shown as text.
"""

from __future__ import annotations

from pathlib import Path

from actkit.pages._render import MARK, SUFFIXES, check_page_path, is_actkit_page, page_json, render_page, write_page
from actkit.pages._views import compare_data, evaluate_data, figure_uri, layer_map_data

__all__ = ["MARK", "SUFFIXES", "check_page_path", "compare_data", "compare_page", "evaluate_data", "evaluate_page",
           "figure_uri", "is_actkit_page", "layer_map_data", "page_json", "render_page", "write_page"]


def compare_page(results, path, *, labels=None, layer_map=None, title="actkit compare", subtitle="",
                 overwrite: bool = False, figures: bool = True) -> Path:
    """Write the page of :func:`actkit.compare` results (a ``CompareResult`` or a list, one per
    layer pair, ``labels`` naming them) and/or a :func:`actkit.compare_layers` map.

    Parameters
    ----------
    results : CompareResult or list of CompareResult (may be empty with ``layer_map``)
    path : str or Path
        A ``.html``/``.htm`` file; an existing one is replaced only if actkit wrote it and
        ``overwrite`` is set.
    layer_map : LayerMap, optional
    title, subtitle : str
    figures : bool, default=True
        Also the errors-per-method figure (several pairs).

    Returns
    -------
    Path of the page.
    """
    check_page_path(path, overwrite=overwrite, flag="path")
    results = [results] if hasattr(results, "measure_rows") else list(results)
    data = compare_data(results, labels, layer_map=layer_map, title=title, subtitle=subtitle, figures=figures)
    return write_page(path, "compare", data, title, overwrite=overwrite)


def evaluate_page(result, path, *, title="actkit evaluate", subtitle="", overwrite: bool = False,
                  figures: bool = True) -> Path:
    """Write the page of :func:`actkit.evaluate_postprocessing`'s ``EvaluationResult``: the
    mean over tasks, every task (filterable, sortable), the figure, settings and definitions."""
    check_page_path(path, overwrite=overwrite, flag="path")
    data = evaluate_data(result, title=title, subtitle=subtitle, figures=figures)
    return write_page(path, "evaluate", data, title, overwrite=overwrite)
