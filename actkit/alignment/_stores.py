"""Stores compared layer by layer: :func:`compare_stores` (two stores, :class:`StoreComparison`)
and :func:`compare_store_matrix` (several, a pairwise matrix per layer, :class:`StoreMatrices`).

``actkit compare A.h5 B.h5`` is the first call, ``actkit compare A.h5 B.h5 C.h5 --metric M`` the
second. ``compare_stores``: every (layer of A, layer of B) pair compared
(:func:`actkit.compare`, here or on a scheduler's workers through one task list), and, with
label ids, the softmax-model distances of the two stores. The result is the data of the
command's table, JSON and page, computed once: :meth:`StoreComparison.format` is the printed
table, :meth:`~StoreComparison.to_dict` the ``--json`` document and
:meth:`~StoreComparison.to_html` the ``--html`` page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from actkit._groups import check_same_rows
from actkit._json import json_ready
from actkit.alignment._compare import compare, compare_many
from actkit.alignment._layer_map import LayerMap
from actkit.alignment._table import format_matrix, format_table, ica_summary
from actkit.alignment._tasks import compare_pairs

__all__ = ["StoreComparison", "StoreMatrices", "compare_stores", "compare_store_matrix"]


@dataclass
class StoreComparison:
    """The comparisons of two stores' layer pairs (:func:`compare_stores`).

    Attributes
    ----------
    results : list of CompareResult
        One per layer pair, in order.
    labels : list of str
        Each pair's label: the layer (``"l3"``), or ``"l3 -> l4"`` where the two differ.
    pairs : list of (str, str)
        The layer pairs ``(layer of A, layer of B)``.
    store_a, store_b : str
        How the two stores are named (their paths, or the names given).
    softmax : dict, optional
        The softmax-model distances (:func:`actkit.metrics.softmax_distances_from_stores`)
        where label ids were given.
    """

    results: list
    labels: list
    pairs: list
    store_a: str
    store_b: str
    softmax: dict | None = field(default=None)

    def to_dict(self) -> dict:
        """The ``--json`` document: ``{label: CompareResult.to_dict() with store_a, store_b}`` for
        each pair and ``"softmax"`` (its numbers) where computed; one pair alone: its dict."""
        out = {}
        for label, res in zip(self.labels, self.results):
            out[label] = {**res.to_dict(), "store_a": str(self.store_a), "store_b": str(self.store_b)}
        if self.softmax is not None:
            out["softmax"] = {k: v for k, v in self.softmax.items() if isinstance(v, (float, int))}
        return out if len(out) > 1 else next(iter(out.values()))

    def format(self, *, compact: bool = False) -> str:
        """The printed table of the pairs (:func:`~actkit.alignment.format_table`), the ICA
        summary lines and the softmax distances' line."""
        lines = [format_table(self.results, self.labels, compact=compact,
                              title=f"{self.store_a} -> {self.store_b}  (held-out error / diam(B))")]
        lines += ica_summary(self.results, self.labels)
        if self.softmax is not None:
            lines.append("softmax distances (final_hidden, unembedding): " + "  ".join(
                f"{k}={v:.4g}" for k, v in self.softmax.items() if isinstance(v, float)))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_html(self, path, *, overwrite: bool = False):
        """Write the page of the pairs (:func:`actkit.pages.compare_page`); returns its path."""
        from actkit.pages import compare_page  # a hand-off to the pages (~1 s at import, measured): only a page needs them

        return compare_page(self.results, path, labels=self.labels, overwrite=overwrite,
                            title=f"actkit compare: {self.store_a} -> {self.store_b}",
                            subtitle="held-out error / diam(B); similarities on all rows")


def compare_stores(store_a, store_b, layer_pairs=None, *, names=None, softmax_labels=None, scheduler=None,
                   progress=None, **kwargs) -> StoreComparison:
    """Compare two stores of the same inputs, layer pair by layer pair.

    Parameters
    ----------
    store_a, store_b : Store
        Stores (or embedding files, :func:`actkit.matrix_files.open_source`) of the same inputs.
    layer_pairs : list of (str, str), optional
        ``(layer of A, layer of B)`` pairs; default: the layers the two have in common.
    names : (str, str), optional
        How the stores are named in messages and results (default: their paths).
    softmax_labels : array-like of int, optional
        Also the softmax-model distances over these label ids
        (:func:`actkit.metrics.softmax_distances_from_stores`), computed first.
    scheduler : None, str or distributed.Client, optional
        Run the pairs as tasks on Dask (``docs/dask.md``); None: here, in order.
    progress : bool, optional
    **kwargs
        Passed to :func:`actkit.compare`.

    Returns
    -------
    StoreComparison

    Raises
    ------
    ValidationError
        Stores of other inputs, or a layer pair whose rows differ, before any comparison
        (:func:`actkit._groups.check_same_rows`).
    """
    from actkit.store import common_layers  # actkit.store (h5py): ~0.1 s at import (measured); only stores need it

    names = [str(getattr(s, "path", f"store {i}")) for i, s in enumerate((store_a, store_b))] if names is None \
        else [str(x) for x in names]
    check_same_rows([store_a, store_b], names)
    pairs = list(layer_pairs) if layer_pairs is not None else common_layers(store_a, store_b)
    for la, lb in pairs:
        check_same_rows([store_a[la], store_b[lb]], [f"{names[0]}:{la}", f"{names[1]}:{lb}"])
    softmax = None
    if softmax_labels is not None:
        from actkit.metrics import softmax_distances_from_stores  # ~0.1 s at import (h5py, measured); only with labels

        softmax = softmax_distances_from_stores(store_a, store_b, softmax_labels,
                                                random_state=kwargs.get("random_state", 0))
    results = compare_pairs([(store_a[la], store_b[lb]) for la, lb in pairs], compare_fn=compare,
                            scheduler=scheduler, progress=progress, **kwargs)
    labels = [la if la == lb else f"{la} -> {lb}" for la, lb in pairs]
    return StoreComparison(results, labels, [tuple(p) for p in pairs], names[0], names[1], softmax)


@dataclass
class StoreMatrices:
    """The pairwise matrices of several stores, one per layer (:func:`compare_store_matrix`).

    Attributes
    ----------
    metric : str
    labels : list of str
        The stores' names (rows and columns of every matrix).
    matrices : dict of layer -> ndarray of shape (K, K)
        ``matrices[layer][i, j]``: ``metric`` of store ``i`` -> store ``j`` at that layer.
    results : dict of layer -> dict of (i, j) -> CompareResult
    """

    metric: str
    labels: list
    matrices: dict
    results: dict

    def to_dict(self) -> dict:
        """The ``--json`` document: ``{layer: {"metric", "labels", "matrix"}}`` (a cell that is
        not finite as None)."""
        return {layer: {"metric": self.metric, "labels": list(self.labels),
                        "matrix": json_ready(np.asarray(m, dtype=np.float64))} for layer, m in self.matrices.items()}

    def format(self) -> str:
        """Each layer's matrix as text (:func:`~actkit.alignment.format_matrix`), a blank line after each."""
        return "\n".join(f"{format_matrix(m, self.labels, metric=f'{self.metric} [{layer}]')}\n"
                         for layer, m in self.matrices.items())

    def layer_maps(self) -> list:
        """``[(LayerMap, caption)]``: each matrix as a heat map of the page."""
        return [(LayerMap(m, list(self.labels), list(self.labels), measure=f"{self.metric} [{layer}]"),
                 "stores (rows) x stores (columns)") for layer, m in self.matrices.items()]

    def to_html(self, path, *, overwrite: bool = False):
        """Write the page of the matrices (:func:`actkit.pages.compare_page`); returns its path."""
        from actkit.pages import compare_page  # a hand-off to the pages (~1 s at import, measured): only a page needs them

        return compare_page([], path, maps=self.layer_maps(), overwrite=overwrite,
                            title=f"actkit compare: {len(self.labels)} stores, {self.metric}")


def compare_store_matrix(stores, layers, *, metric="rigid", names=None, scheduler=None, progress=None,
                         **kwargs) -> StoreMatrices:
    """:func:`actkit.compare_many` of the same layer in several stores of the same inputs, per layer.

    Parameters
    ----------
    stores : list of Store
    layers : list of str
        The layers (each in every store).
    metric : str, default="rigid"
        As :func:`actkit.compare_many` (which fits only the alignments it needs).
    names : list of str, optional
        The stores' names (default: their paths).
    scheduler, progress, **kwargs
        As :func:`actkit.compare_many`.

    Returns
    -------
    StoreMatrices
    """
    names = [str(getattr(s, "path", f"store {i}")) for i, s in enumerate(stores)] if names is None \
        else [str(x) for x in names]
    check_same_rows(stores, names)
    matrices, results = {}, {}
    for layer in layers:
        matrices[layer], results[layer] = compare_many([s[layer] for s in stores], labels=[f"{p}:{layer}" for p in names],
                                                       metric=metric, scheduler=scheduler, progress=progress, **kwargs)
    return StoreMatrices(metric, names, matrices, results)
