"""Issue 39, the API's small print: ``actkit.measure`` with several measures returns each
(the same numbers as one at a time), ``actkit.compare_layers`` takes arrays in memory (the
same numbers as ``actkit.measure`` on each pair), and a representation without variance is
refused in one line instead of giving a silent ``nan`` (or a number computed from ties)."""

from __future__ import annotations

import numpy as np
import pytest

import actkit
from actkit.errors import ValidationError
from actkit.measures import available, get_measure


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(240, 6))
    B = A @ rng.normal(size=(6, 5)) + 0.5 * rng.normal(size=(240, 5))
    return A, B


def test_a_list_of_measures_returns_each_as_one_at_a_time(pair):
    A, B = pair
    names = ["procrustes", "rsa", "linear_cka", "mutual_knn:k=5", "linear", "ica_efficiency"]
    got = actkit.measure(A, B, names)
    assert list(got) == ["procrustes", "rsa", "linear_cka", "mutual_knn", "linear", "ica_efficiency"]
    one = {"procrustes": actkit.measure(A, B, "procrustes"), "rsa": actkit.measure(A, B, "rsa"),
           "linear_cka": actkit.measure(A, B, "linear_cka"), "mutual_knn": actkit.measure(A, B, "mutual_knn", k=5),
           "linear": actkit.measure(A, B, "linear"), "ica_efficiency": actkit.measure(A, B, "ica_efficiency")}
    for k, v in one.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12, nan_ok=True), k
    assert actkit.measure(A, B, "procrustes,mutual_knn:k=5") == {k: got[k] for k in ("procrustes", "mutual_knn")}
    assert actkit.measure(A, B, ("rsa",)) == {"rsa": got["rsa"]}


@pytest.mark.parametrize("name,params,words", [
    (3, {}, "a measure's name or a list of them, got int"),
    (["procrustes", "nope"], {}, "unknown measure 'nope'"),
    (["mutual_knn", "rsa"], {"k": 5}, "give each one's parameters in its name"),
    (["rsa", "rsa"], {}, "asked for twice"),
])
def test_a_bad_list_is_one_line(pair, name, params, words):
    with pytest.raises(ValidationError, match=words):
        actkit.measure(*pair, name, **params)


def test_compare_layers_takes_arrays_in_memory(pair):
    A, B = pair
    C = A[:, :3]
    one = actkit.compare_layers(A, B)
    assert one.layers_a == ["0"] == one.layers_b
    assert one.matrix[0, 0] == pytest.approx(actkit.measure(A, B, "linear_cka"), rel=1e-10)
    lm = actkit.compare_layers({"a": A, "c": C}, [B, A], measure="mean_cca")
    assert lm.layers_a == ["a", "c"] and lm.layers_b == ["0", "1"]
    for i, X in enumerate((A, C)):
        for j, Y in enumerate((B, A)):
            assert lm.matrix[i, j] == pytest.approx(actkit.measure(X, Y, "mean_cca"), rel=1e-9)
    stacked = actkit.compare_layers(np.stack([A, A[:, ::-1]]), np.stack([B[:, :5]]))
    assert stacked.matrix.shape == (2, 1) and stacked.matrix[0, 0] == pytest.approx(stacked.matrix[1, 0], rel=1e-12)


@pytest.mark.parametrize("bad,words", [
    (3, "must be a store"),
    (np.zeros(240), "layer '0' has shape (240,)"),
    ({}, "holds no layer"),
])
def test_compare_layers_refuses_what_is_not_layers(pair, bad, words):
    with pytest.raises(ValidationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        actkit.compare_layers(bad, pair[1])


def _constants(rng):
    return {"all one value": np.full((240, 6), 0.1),
            "each column its own value": np.tile(rng.normal(size=6), (240, 1)).astype(np.float32)}


@pytest.mark.parametrize("name", [m for m in available() if get_measure(m).source != "alignment"] + ["linear"])
def test_a_constant_side_is_refused_not_nan(pair, name):
    rng = np.random.default_rng(1)
    for what, C in _constants(rng).items():
        for A, B, side in ((C, pair[1], "A"), (pair[0], C[:, :5], "B")):
            with pytest.raises(ValidationError, match=f"^{side} is constant .*zero variance"):
                actkit.measure(A, B, name)


def test_compare_refuses_a_constant_side_before_any_fit(pair):
    C = np.full((240, 6), 2.0)
    for methods in (("linear",), ("permutation", "rigid", "linear", "ica")):
        with pytest.raises(ValidationError, match="^A is constant .*the comparison is undefined"):
            actkit.compare(C, pair[1], methods=methods)
    with pytest.raises(ValidationError, match="^A and B are constant"):
        actkit.compare(C, C, methods=("linear",))


def test_a_varying_column_among_constant_ones_is_kept(pair):
    """Only a side with no varying column at all is refused: one varying column is enough."""
    A = np.full((240, 6), 3.0)
    A[:, 2] = pair[0][:, 0]
    assert np.isfinite(actkit.measure(A, pair[1], "linear_cka"))
    assert np.isfinite(actkit.measure(A * 1e-6, pair[1], "rsa"))


def test_a_constant_layer_in_a_map_is_named_not_a_silent_nan(pair):
    """A layer map keeps going past a constant layer: its cells are NaN (printed ``-``),
    ``info["constant_layers"]`` names it, and one warning says so; the other cells are
    unchanged and a constant-only map has no p-values to compute."""
    A, B = pair
    with pytest.warns(UserWarning, match=r"layer\(s\) A:dead, B:1 are constant .*linear_cka is undefined"):
        lm = actkit.compare_layers({"a": A, "dead": np.full((240, 3), 0.5)}, [B, np.zeros((240, 2))], permutations=9)
    assert lm.info["constant_layers"] == ["A:dead", "B:1"]
    assert np.isnan(lm.matrix[1]).all() and np.isnan(lm.matrix[:, 1]).all() and np.isnan(lm.p[1]).all()
    assert lm.matrix[0, 0] == pytest.approx(actkit.measure(A, B, "linear_cka"), rel=1e-10)
    assert "-" in str(lm).splitlines()[2]
    with pytest.warns(UserWarning, match="constant"):
        only = actkit.compare_layers(np.ones((240, 2)), B, permutations=9)
    assert np.isnan(only.matrix).all() and "permutation_exchangeable" not in only.info
