"""Representation similarity measures: one protocol, the field's measures.

Every measure is one public module of this package that lists its :class:`Measure` records
in ``MEASURES``; the registry finds them (:func:`available`, :func:`get_measure`). Adding a
measure is one new module, its test and its row in ``docs/measures.md``: nothing else
changes (``compare``, its table, ``--measures`` and ``--list-measures`` read the registry).

The protocol
------------
A :class:`Measure` states ``name``, ``kind`` (``"similarity"`` grows, ``"distance"``
shrinks as A and B agree more), ``invariances`` (in words), ``params`` (each a
:class:`Param` with its default and check; :meth:`Measure.validate` fills and checks them),
``paper``, ``reference`` (the code its test runs side by side), ``cost``, an optional
``check(params, widths, n_rows)`` for the data (``k`` below the rows used, equal widths),
and how it computes, ``source``:

``"moments"`` (``Measure.moment_based``): ``compute(m, **params) -> float`` (the module's
    ``<name>_from_moments``), with ``m`` a :class:`Moments`: ``n`` (rows, float: a weighted
    count is fine), ``mean_a`` (p,), ``mean_b`` (q,), the centred scatter matrices ``Saa``
    (p, p), ``Sbb`` (q, q) and the centred cross scatter ``Sab`` (p, q), all float64 sums
    (not divided by n), ``dtype`` (of the rows: sets the CCA family's rank cut), ``norms``
    (the debiased CKA's three row-norm sums about the means) and ``parts`` (``(fit, test)``
    Moments, only for ``Measure.needs_split``, i.e. ``linear_r2``). Such a measure is exact
    over any number of rows, out of core, in memory independent of the rows, and its inputs
    merge over blocks, workers and Dask. **Inference** builds ``m`` itself and calls the
    same ``compute``: a bootstrap reweights per-input-sample uncentred sums about one shift
    (additive) and calls :meth:`Moments.from_sums`; a permutation of B's input samples keeps
    ``Saa``, ``Sbb`` and the means and swaps only ``Sab`` (and ``norms["dxdy"]``):
    ``dataclasses.replace(m, Sab=S)``.

``"rows"`` (``Measure.sampled``): ``compute(A, B, **params) -> float`` (the module's
    ``<name>_from_rows``), with ``A`` (n, p) and ``B`` (n, q) torch float64 tensors on the
    measure's device: a seeded sample of whole input samples (``groups``) of at most
    ``max_rows`` rows (:func:`sample_by_groups`); the result reports the rows it used
    (``<name>_rows``). Inference permutes and resamples these rows by input sample: from the
    measure's pairwise structure computed once (:func:`structure_for`: RDMs, neighbour
    lists, distance or kernel matrices), else by calling the same ``compute``.

``"alignment"``: ``compute(d) -> float`` reads ``d = compare(...).to_dict()``: the four
    held-out alignment errors and the ICA efficiency, fitted by :func:`actkit.compare`.

Running measures: :func:`actkit.measure` (one, on two row sources), ``actkit.compare(A, B,
measures=[...])`` (each under its name in ``to_dict()``), :func:`evaluate` (a set, one pass
for every moment-based one, one sample for every row-based one), :func:`moments_of` (the
:class:`Moments` of two row sources in one streaming pass).

=========================  =========================================================
``available()``            every measure's name, in the documented order
``get_measure(name)``      its :class:`Measure` (a one-line error naming the choices)
``parse_measures(spec)``   ``"procrustes,mutual_knn:k=5"`` -> [(Measure, params)]
``measure_table()``        the ``--list-measures`` rows
``reuse_sides()``          a context in which a side's decompositions are computed once
                           per scatter array (the permutation null keeps the sides)
=========================  =========================================================

Formulas, invariances, costs, references and when to prefer each: ``docs/measures.md``.
"""

from __future__ import annotations

from actkit._lazy import lazy_attributes

_LAZY = {
    "Measure": "actkit.measures._protocol",
    "Param": "actkit.measures._protocol",
    "Moments": "actkit.measures._protocol",
    "available": "actkit.measures._registry",
    "get_measure": "actkit.measures._registry",
    "all_measures": "actkit.measures._registry",
    "parse_measures": "actkit.measures._registry",
    "variant_key": "actkit.measures._registry",
    "format_param": "actkit.measures._registry",
    "measure_table": "actkit.measures._table",
    "format_measure_table": "actkit.measures._table",
    "moments_of": "actkit.measures._compute",
    "rows_of": "actkit.measures._compute",
    "evaluate": "actkit.measures._compute",
    "held_out_mask": "actkit.measures._compute",
    "constant_side": "actkit.measures._compute",
    "refuse_constant": "actkit.measures._compute",
    "sample_by_groups": "actkit.measures._rowtools",
    "check_max_rows": "actkit.measures._rowtools",
    "structure_for": "actkit.measures._structures",
    "rank_cut": "actkit.measures._linalg",
    "canonical_correlations": "actkit.measures._linalg",
    "cca": "actkit.measures._linalg",
    "reuse_sides": "actkit.measures._linalg",
    "whitener": "actkit.measures._linalg",
    "CHOLESKY_MARGIN": "actkit.measures._linalg",
}

__getattr__, __dir__, __all__ = lazy_attributes(__name__, _LAZY)
