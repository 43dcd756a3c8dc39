"""``actkit compare --measures`` and ``--list-measures`` (issue 31): columns, JSON keys,
parameters, the measures table, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from _stores import write_store
from cli_helpers import cli_error as _error, run_cli as _run

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _store(path, X, index):
    return write_store(path, {"h": X}, index)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measures")
    rng = np.random.default_rng(0)
    n, d = 480, 6
    index = np.stack([np.repeat(np.arange(120), 4), np.tile(np.arange(4), 120)], 1)
    S = rng.laplace(size=(n, d))
    a = _store(tmp / "a.h5", S @ rng.normal(size=(d, d)), index)
    b = _store(tmp / "b.h5", np.tanh(S @ rng.normal(size=(d, 5))), index)
    return a, b


def test_measures_are_columns_and_json_keys(pair, capsys, tmp_path):
    a, b = pair
    out_json = tmp_path / "r.json"
    code, out, _ = _run(capsys, "compare", a, b, "--methods", "rigid", "--quiet", "--measures",
                        "procrustes,rsa,mutual_knn:k=5,shape_metric:alpha=0.5", "--max-rows", "200",
                        "--json", out_json)
    assert code == 0
    header = out.splitlines()[1]
    for name in ("procrustes", "rsa", "mutual_knn", "shape_metric"):
        assert name in header
    d = json.loads(out_json.read_text())
    assert d["measures"] == ["procrustes", "rsa", "mutual_knn", "shape_metric"]
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        A, B = sa["h"], sb["h"]
        assert d["procrustes"] == pytest.approx(actkit.measure(A, B, "procrustes"), abs=1e-12)
        assert d["shape_metric"] == pytest.approx(actkit.measure(A, B, "shape_metric", alpha=0.5), abs=1e-12)
        assert d["mutual_knn"] == pytest.approx(actkit.measure(A, B, "mutual_knn", k=5, max_rows=200))
    assert d["mutual_knn_rows"] <= 200 and d["mutual_knn_rows"] % 4 == 0     # whole input samples
    assert "procrustes_rows" not in d


def test_two_variants_of_a_measure_in_one_run(pair, capsys, tmp_path):
    """Issue 39: ``shape_metric:alpha=0.5,shape_metric:alpha=1`` in one run: distinct keys,
    each equal to the measure alone with its parameters, and the parameters in the headers
    (also those of a measure asked for once with other than its defaults)."""
    a, b = pair
    out_json = tmp_path / "v.json"
    code, out, _ = _run(capsys, "compare", a, b, "--methods", "rigid", "--quiet", "--measures",
                        "shape_metric:alpha=0.5,shape_metric:alpha=1,mutual_knn:k=5,procrustes",
                        "--max-rows", "200", "--permutations", "19", "--json", out_json)
    assert code == 0
    header = out.splitlines()[1]
    for col in ("shape_metric alpha=0.5", "shape_metric alpha=1", "mutual_knn k=5", "procrustes"):
        assert col in header, header
    d = json.loads(out_json.read_text())
    assert d["measures"] == ["shape_metric:alpha=0.5", "shape_metric:alpha=1", "mutual_knn", "procrustes"]
    assert d["measure_params"]["mutual_knn"] == {"k": "5"} and d["measure_params"]["procrustes"] == {}
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        A, B = sa["h"], sb["h"]
        half = actkit.measure(A, B, "shape_metric", alpha=0.5)
        one = actkit.measure(A, B, "shape_metric", alpha=1.0)
    assert d["shape_metric:alpha=0.5"] == pytest.approx(half, abs=1e-12)
    assert d["shape_metric:alpha=1"] == pytest.approx(one, abs=1e-12) and abs(half - one) > 1e-4
    for key in ("shape_metric:alpha=0.5", "shape_metric:alpha=1"):        # each resampled
        assert 0 < d[f"{key}_p"] <= 1 and d[f"{key}_null_mean"] is not None


def test_list_measures_prints_the_table(capsys):
    code, out, _ = _run(capsys, "compare", "--list-measures")
    assert code == 0
    for name in actkit.measures.available():
        assert any(line.startswith(name + " ") for line in out.splitlines()), name
    assert "out of core" in out and "sampled" in out and "netrep" in out


def test_matrix_of_a_measure(pair, capsys, tmp_path):
    a, b = pair
    code, out, _ = _run(capsys, "compare", a, b, a, "--metric", "jaccard_knn:k=4", "--quiet")
    assert code == 0 and "jaccard_knn" in out


@pytest.mark.parametrize("argv,message", [
    (["--measures", "procrustez"], "unknown measure 'procrustez'; choose from"),
    (["--measures", "mutual_knn:k=1000"], "k=1000 must be below the rows used (480)"),
    (["--measures", "shape_metric:alpha=2"], "alpha must be a number in [0, 1]"),
    (["--measures", "shape_metric:zero_pad=false"], "needs equal widths, got 6 and 5"),
    (["--measures", "mutual_knn:k"], "must be key=value"),
])
def test_bad_measures_are_one_line_errors(pair, capsys, argv, message):
    a, b = pair
    line = _error(capsys, "compare", a, b, "--methods", "rigid", "--quiet", *argv)
    assert message in line
