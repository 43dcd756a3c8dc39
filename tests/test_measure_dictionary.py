"""The ``dictionary`` measure of the measure protocol (issue 34): the share of A's atoms with a
match in B, on planted sparse data (the same latents seen through another invertible map:
all match) against unrelated Gaussian rows (none match)."""

import json

import numpy as np
import pytest

import actkit
from actkit.cli import main
from actkit.errors import ValidationError
from actkit.synthetic.dgp import sparse_measurements


@pytest.fixture(scope="module")
def planted():
    X, S, A = sparse_measurements(3000, n_latents=40, n_features=20, k=3, random_state=0)
    # the same latents through another map (a random rotation: the atoms keep their geometry)
    R = np.linalg.qr(np.random.default_rng(1).normal(size=(20, 20)))[0]
    G = np.random.default_rng(2).normal(size=(3000, 20)).astype(np.float32)
    return X, (X @ R).astype(np.float32), G


def test_same_latents_match_and_gaussian_rows_do_not(planted):
    X, XR, G = planted
    same = actkit.measure(X, XR, "dictionary", n_components=40, k=3)
    assert same >= 0.9
    assert actkit.measure(X, G, "dictionary", n_components=40, k=3) <= 0.1
    # the same feature space: atoms matched by |cos| (a fit against itself: every atom)
    assert actkit.measure(X, X, "dictionary", n_components=40, k=3, match="atoms") == 1.0


def test_it_is_the_share_of_hungarian_matches_above_the_threshold(planted):
    from actkit.dictionary._stability import match_codes

    X, XR, _ = planted
    fa = actkit.SparseDictionary(40, k=3, random_state=0).fit(X)
    fb = actkit.SparseDictionary(40, k=3, random_state=0).fit(XR)
    _, _, corr = match_codes(fa.transform(X), fb.transform(XR))
    want = float(np.mean(corr > 0.9))
    got = actkit.measure(X, XR, "dictionary", n_components=40, k=3)
    assert got == pytest.approx(want, abs=1e-12)


def test_compare_measures_dictionary_on_two_stores(planted, tmp_path, capsys):
    from actkit.store import LayerSpec, create_store

    X, XR, _ = planted
    paths = []
    for name, M in (("a.h5", X), ("b.h5", XR)):
        n = M.shape[0]
        w = create_store(tmp_path / name, [LayerSpec("h", n, M.shape[1], index=np.c_[np.arange(n), -np.ones(n)]
                                                     .astype(np.int64))],
                         n_samples=n, request={"m": name}, provenance={}, inputs_fingerprint="same-inputs")
        w.append("h", M)
        w.checkpoint(n, force=True)
        w.finalize()
        paths.append(str(tmp_path / name))
    js = tmp_path / "c.json"
    code = main(["compare", *paths, "--methods", "permutation", "--measures", "dictionary:n_components=40:k=3",
                 "--json", str(js)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(js.read_text())["dictionary"] >= 0.9


@pytest.mark.parametrize("params, message", [
    ({"match": "atoms"}, "needs equal widths"),
    ({"k": 50, "n_components": 10}, "k=50 must be at most n_components=10"),
    ({"threshold": 1.5}, "threshold must be"),
    ({"match": "both"}, "match must be one of codes, atoms"),
])
def test_mistakes_are_one_line(params, message):
    rng = np.random.default_rng(0)
    with pytest.raises(ValidationError, match=message):
        actkit.measure(rng.normal(size=(200, 8)), rng.normal(size=(200, 6)), "dictionary", **params)
