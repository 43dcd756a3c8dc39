"""The pages of the results: check the path, gather the data (:mod:`._views`), write."""

from __future__ import annotations

from pathlib import Path

from actkit.pages._render import check_page_path, write_page
from actkit.pages._views import compare_data, evaluate_data

__all__ = ["compare_page", "evaluate_page"]


def compare_page(results, path, *, labels=None, layer_map=None, maps=(), title="actkit compare", subtitle="",
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
    maps : list of LayerMap or of (LayerMap, caption), optional
        More heat maps (``actkit compare`` of several stores: the pairwise matrix of each layer).
    title, subtitle : str
    figures : bool, default=True
        Also the errors-per-method figure (several pairs).

    Returns
    -------
    Path of the page.
    """
    check_page_path(path, overwrite=overwrite, flag="path")
    results = [results] if hasattr(results, "measure_rows") else list(results)
    maps = ([] if layer_map is None else [layer_map]) + list(maps)
    data = compare_data(results, labels, maps=maps, title=title, subtitle=subtitle, figures=figures)
    return write_page(path, "compare", data, title, overwrite=overwrite)


def evaluate_page(result, path, *, title="actkit evaluate", subtitle="", overwrite: bool = False,
                  figures: bool = True) -> Path:
    """Write the page of :func:`actkit.evaluate_postprocessing`'s ``EvaluationResult``: the
    mean over tasks, every task (filterable, sortable), the figure, settings and definitions."""
    check_page_path(path, overwrite=overwrite, flag="path")
    data = evaluate_data(result, title=title, subtitle=subtitle, figures=figures)
    return write_page(path, "evaluate", data, title, overwrite=overwrite)
