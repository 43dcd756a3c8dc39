"""The measure protocol (actkit.measures, issue 31): the registry, the records, actkit.measure,
compare(measures=...), compare_many(metric=...), moments out of core (the same digits on a
store as in memory, memory independent of the rows), the row sample and the one-line
errors. Each measure against its reference: tests/test_measures_reference.py."""

from __future__ import annotations

import tracemalloc
import warnings
from dataclasses import replace

import numpy as np
import pytest

import actkit
from actkit.errors import ValidationError
from actkit.measures import (Moments, available, evaluate, get_measure, moments_of,
                             parse_measures, sample_by_groups)
from _stores import write_store

ISSUE_NAMES = ("linear_cka", "linear_cka_debiased", "rbf_cka", "mean_cca", "svcca", "pwcca",
               "procrustes", "shape_metric", "bures", "rsa", "mutual_knn", "cknna", "jaccard_knn",
               "dcor", "linear_r2")
COLUMNS = ("permutation", "rigid", "linear", "ica", "ica_efficiency")


def _pair(seed=0, n=600, p=8, q=6):
    rng = np.random.default_rng(seed)
    Z = rng.laplace(size=(n, 4))
    A = Z @ rng.normal(size=(4, p)) + 0.3 * rng.normal(size=(n, p))
    B = np.tanh(Z @ rng.normal(size=(4, q))) + 0.3 * rng.normal(size=(n, q))
    return A, B


def test_every_issue_name_and_column_is_a_measure_with_its_record():
    names = available()
    assert set(ISSUE_NAMES) | set(COLUMNS) <= set(names)
    for name in names:
        m = get_measure(name)
        assert m.kind in ("similarity", "distance") and m.invariances and m.reference and m.paper
        assert m.source in ("moments", "rows", "alignment")
        row = m.describe()
        assert row["computed"] in ("out of core", "sampled", "held-out fit")
    moment_based = {"linear_cka", "linear_cka_debiased", "mean_cca", "svcca", "pwcca", "procrustes",
                    "shape_metric", "bures", "linear_r2"}
    assert {n for n in ISSUE_NAMES if get_measure(n).moment_based} == moment_based


def test_moments_protocol_for_inference_from_sums_and_swapping_sab():
    """What issue 32 builds on: per-sample uncentred sums reweighted give Moments.from_sums;
    a permutation swaps only Sab (and norms["dxdy"])."""
    A, B = _pair(1)
    m = moments_of(A, B)
    groups = np.repeat(np.arange(100), 6)
    shift_a, shift_b = A[0], B[0]
    blocks = []
    for g in range(100):
        a, b = A[groups == g] - shift_a, B[groups == g] - shift_b
        blocks.append((len(a), a.sum(0), b.sum(0), a.T @ a, b.T @ b, a.T @ b))
    w = np.ones(100)
    sums = [sum(wi * blk[j] for wi, blk in zip(w, blocks)) for j in range(6)]
    m2 = Moments.from_sums(*sums, shift_a=shift_a, shift_b=shift_b)
    for name in ("linear_cka", "mean_cca", "procrustes", "shape_metric", "svcca", "pwcca"):
        f = get_measure(name).compute
        assert f(m2) == pytest.approx(f(m), abs=1e-10), name
    perm = np.random.default_rng(0).permutation(600)
    Ap, Bp = A - A.mean(0), B[perm] - B.mean(0)
    swapped = replace(m, Sab=Ap.T @ Bp)
    assert get_measure("linear_cka").compute(swapped) == pytest.approx(
        actkit.metrics.linear_cka(A, B[perm]), rel=1e-10)


def test_debiased_norms_rebased_to_the_means_are_exact():
    A, B = _pair(2)
    A = A + 100.0         # far from the origin: the shift and the means differ
    m = moments_of(A, B)
    dx = ((A - A.mean(0)) ** 2).sum(1)
    dy = ((B - B.mean(0)) ** 2).sum(1)
    assert m.norms["dx2"] == pytest.approx(dx @ dx, rel=1e-9)
    assert m.norms["dy2"] == pytest.approx(dy @ dy, rel=1e-9)
    assert m.norms["dxdy"] == pytest.approx(dx @ dy, rel=1e-9)


def _store(path, X, index):
    return actkit.open_store(write_store(path, {"h": X}, index))["h"]


def test_moment_measures_same_digits_on_a_store_as_in_memory(tmp_path):
    A, B = _pair(3, n=5000)
    A, B = A.astype(np.float32), B.astype(np.float32)
    index = np.stack([np.repeat(np.arange(1000), 5), np.tile(np.arange(5), 1000)], 1)
    la, lb = _store(tmp_path / "a.h5", A, index), _store(tmp_path / "b.h5", B, index)
    chosen = parse_measures([n for n in ISSUE_NAMES if get_measure(n).moment_based])
    on_store = evaluate(la, lb, chosen, groups=la.groups)
    in_memory = evaluate(A, B, chosen, groups=la.groups)
    assert on_store == in_memory                          # the same digits
    assert actkit.measure(la, lb, "procrustes") == actkit.measure(A, B, "procrustes")


def test_moments_memory_does_not_grow_with_the_rows(tmp_path):
    import h5py

    rng = np.random.default_rng(4)
    peaks = []
    for n in (20_000, 80_000):
        with h5py.File(tmp_path / f"x{n}.h5", "w") as f:
            f["a"] = rng.normal(size=(n, 16))
            f["b"] = rng.normal(size=(n, 12))
        with h5py.File(tmp_path / f"x{n}.h5", "r") as f:
            tracemalloc.start()
            moments_of(f["a"], f["b"], block_rows=2000)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    assert peaks[1] < 1.3 * peaks[0]


def test_row_sample_takes_equal_rows_of_input_samples_seeded():
    groups = np.repeat(np.arange(50), np.arange(1, 51) % 7 + 1)
    n = groups.size
    rows = sample_by_groups(n, groups, 60, random_state=0)
    assert rows.size <= 60
    per = np.bincount(groups[rows])
    assert np.unique(per[per > 0]).size == 1        # as many rows of each sampled input sample
    assert np.array_equal(rows, sample_by_groups(n, groups, 60, random_state=0))
    assert not np.array_equal(rows, sample_by_groups(n, groups, 60, random_state=1))
    assert sample_by_groups(n, groups, None, 0).size == n


def test_compare_puts_each_measure_under_its_name_and_rows():
    A, B = _pair(5, n=800)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, methods=("permutation", "rigid", "linear"),
                             measures=["procrustes", "mutual_knn:k=5", "rsa", "linear_r2", "rigid"],
                             max_rows=300)
    d = res.to_dict()
    assert d["measures"] == ["procrustes", "mutual_knn", "rsa", "linear_r2", "rigid"]
    assert d["procrustes"] == pytest.approx(actkit.measure(A, B, "procrustes"), abs=1e-12)
    assert d["mutual_knn_rows"] == 300 and d["rsa_rows"] == 300 and "procrustes_rows" not in d
    assert d["mutual_knn"] == pytest.approx(actkit.measure(A, B, "mutual_knn", k=5, max_rows=300))
    assert res.measures["mutual_knn"].params == {"k": 5}
    assert d["rigid"] == res.errors["rigid"]
    assert "procrustes" in str(res)          # a column of the table


def test_compare_many_accepts_every_measure_name():
    reps = list(_pair(6, n=300)) + [_pair(7, n=300)[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for metric in ("procrustes", "jaccard_knn", "linear_cka"):
            mat, _ = actkit.compare_many(reps, metric=metric, methods=["rigid"])
            assert mat[1, 0] == pytest.approx(actkit.measure(reps[1], reps[0], metric), rel=1e-9)
    with pytest.raises(ValidationError, match="unknown metric 'bogus'.*procrustes"):
        actkit.compare_many(reps, metric="bogus")


@pytest.mark.parametrize("call,message", [
    (lambda A, B: actkit.measure(A, B, "procrustez"), r"unknown measure 'procrustez'; choose from .*procrustes"),
    (lambda A, B: actkit.measure(A, B, "mutual_knn", k=50, max_rows=40),
     r"k=50 must be below the rows used \(40\)"),
    (lambda A, B: actkit.measure(A, B, "shape_metric", alpha=1.5), r"alpha must be a number in \[0, 1\]"),
    (lambda A, B: actkit.measure(A, B, "shape_metric", zero_pad=False), r"needs equal widths, got 8 and 6"),
    (lambda A, B: actkit.measure(A, B, "rsa", method="kendall"), r"method must be one of spearman, pearson"),
    (lambda A, B: actkit.measure(A, B, "rsa", k=3), r"has no parameter 'k'"),
    (lambda A, B: actkit.compare(A, B, measures=["cknna:k=1"]), r"cknna: k must be an integer >= 2"),
])
def test_user_mistakes_are_one_line_errors(call, message):
    A, B = _pair(8, n=200)
    with pytest.raises(ValidationError, match=message) as e:
        call(A, B)
    assert "\n" not in str(e.value)


def test_parse_measures_spec_strings():
    got = parse_measures("procrustes,mutual_knn:k=5,shape_metric:alpha=0.5:zero_pad=false")
    assert [(m.name, p) for m, p in got] == [("procrustes", {}), ("mutual_knn", {"k": 5}),
                                              ("shape_metric", {"alpha": 0.5, "zero_pad": False})]
    with pytest.raises(ValidationError, match="asked for twice with the same parameters"):
        parse_measures("rsa,rsa")
    with pytest.raises(ValidationError, match="asked for twice with the same parameters"):
        parse_measures("shape_metric:alpha=1,shape_metric")      # alpha=1 is the default


def test_variants_of_one_measure_are_named_by_the_parameters_they_differ_in():
    """Issue 39: two variants of one measure in one run, each under a key of its own."""
    got = parse_measures("shape_metric:alpha=0.5,shape_metric:alpha=1,mutual_knn:k=5,"
                         "rsa,rsa:method=pearson")
    assert [m.name for m, _ in got] == ["shape_metric:alpha=0.5", "shape_metric:alpha=1", "mutual_knn",
                                        "rsa:method=spearman", "rsa:method=pearson"]
    assert got[0][1] == {"alpha": 0.5, "zero_pad": True} and got[1][1]["alpha"] == 1.0
    assert got[0][0].compute is get_measure("shape_metric").compute


def test_adding_a_measure_is_one_module(tmp_path, monkeypatch):
    """A new public module of actkit.measures with MEASURES is found by the registry."""
    import actkit.measures as package
    from actkit.measures import _registry

    (tmp_path / "toy_measure.py").write_text(
        "from actkit.measures._protocol import Measure\n"
        "def trace_ratio(m):\n    return float(m.Saa.trace() / m.Sbb.trace())\n"
        "MEASURES = (Measure('trace_ratio', 'similarity', 'orthogonal transforms', 'moments',\n"
        "            trace_ratio, paper='-', reference='-'),)\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setattr(_registry, "_REGISTRY", None)
    import sys
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    monkeypatch.setitem(sys.modules, "actkit.measures.toy_measure", importlib.import_module("toy_measure"))
    A, B = _pair(9)
    assert "trace_ratio" in available()
    assert actkit.measure(A, B, "trace_ratio") == pytest.approx(
        np.trace(np.cov(A.T)) / np.trace(np.cov(B.T)))
    monkeypatch.setattr(_registry, "_REGISTRY", None)


def test_rsa_ranks_ties_as_scipy_rankdata():
    import torch
    from scipy.stats import rankdata

    from actkit.measures.rsa import _average_ranks

    v = np.random.default_rng(0).integers(0, 20, size=500).astype(np.float64)   # many ties
    assert np.array_equal(_average_ranks(torch.from_numpy(v)).numpy(), rankdata(v))
