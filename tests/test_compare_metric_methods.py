"""``actkit compare`` on several stores fits only what ``--metric`` (and ``--methods``) need:
no FastICA for a rigid matrix (issue 22)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_helpers import cli_error, run_cli

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    from actkit.store import LayerSpec, create_store

    tmp = tmp_path_factory.mktemp("metric")
    rng = np.random.default_rng(3)
    n, d = 400, 5
    index = np.stack([np.repeat(np.arange(100), 4), np.tile(np.arange(4), 100)], 1)
    S = rng.laplace(size=(n, d))
    paths = []
    for i, X in enumerate((S, S @ rng.normal(size=(d, d)), rng.normal(size=(n, d)))):
        w = create_store(tmp / f"s{i}.h5", [LayerSpec("l", n, d, index=index)], n_samples=100,
                         request={"i": i}, inputs_fingerprint="same")
        w.append("l", X.astype(np.float32))
        w.checkpoint(100)
        paths.append(w.finalize())
    return tmp, paths


@pytest.fixture
def fitted(monkeypatch):
    """The alignment classes whose maps were fitted, and whether FastICA ran at all."""
    from actkit.alignment import _ica_map, _maps
    from actkit.ica._estimator import FastICA

    seen = []
    for cls in (_maps.PermutationAlignment, _maps.RigidAlignment, _maps.LinearAlignment, _ica_map.ICAAlignment):
        real = cls.fit_pair

        def spy(self, pair, _real=real, _name=cls.__name__):
            seen.append(_name)
            return _real(self, pair)

        monkeypatch.setattr(cls, "fit_pair", spy)
    real_fit = FastICA.fit

    def fit(self, *args, **kwargs):
        seen.append("FastICA.fit")
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(FastICA, "fit", fit)
    return seen


def test_a_rigid_matrix_fits_no_ica(three, fitted, capsys):
    tmp, paths = three
    code, out, _ = run_cli(capsys, "compare", *paths, "--metric", "rigid", "--json", tmp / "r.json", "--quiet")
    assert code == 0 and "rigid [l]" in out
    assert set(fitted) == {"RigidAlignment"} and len(fitted) == 9  # 3 x 3 pairs, nothing else
    m = np.array(json.loads((tmp / "r.json").read_text())["l"]["matrix"], dtype=float)
    assert m[0, 0] < 1e-4 and m[0, 2] > m[0, 1]


def test_each_metric_fits_what_it_needs(three, fitted, capsys):
    _, paths = three
    assert run_cli(capsys, "compare", *paths, "--metric", "linear_cka", "--quiet")[0] == 0
    assert fitted == []  # similarities come from the moments alone
    assert run_cli(capsys, "compare", *paths, "--metric", "ica_efficiency", "--ica-restarts", "1",
                   "--quiet")[0] == 0
    assert set(fitted) == {"PermutationAlignment", "RigidAlignment", "ICAAlignment", "FastICA.fit"}
    fitted.clear()
    # --methods given: those methods, as compare_many(methods=...) fits them (issue 51: the rule is the API's)
    assert run_cli(capsys, "compare", *paths, "--metric", "rigid", "--methods", "rigid,linear", "--quiet")[0] == 0
    assert set(fitted) == {"RigidAlignment", "LinearAlignment"}
    assert "metric ica needs the method(s) ica" in cli_error(capsys, "compare", *paths, "--metric", "ica",
                                                              "--methods", "rigid", "--quiet")


def test_compare_many_fits_what_its_metric_needs(three, fitted):
    """The rule is the API's (issue 51): ``compare_many(..., metric="rigid")`` fits no FastICA."""
    import actkit
    from actkit.alignment import compare_many

    _, paths = three
    layers = [actkit.open_store(p)["l"] for p in paths]
    matrix, results = compare_many(layers, metric="rigid", progress=False)
    assert set(fitted) == {"RigidAlignment"} and "FastICA.fit" not in fitted and len(fitted) == 9
    assert results[(0, 1)].to_dict()["ica"] is None and np.isfinite(matrix).all()
    fitted.clear()
    compare_many(layers, metric="linear_cka", progress=False)
    assert fitted == []
    with pytest.raises(ValueError, match="metric ica_efficiency needs the method"):
        compare_many(layers, metric="ica_efficiency", methods=["rigid"])


def test_two_stores_still_fit_every_method_by_default(three, fitted, capsys):
    tmp, paths = three
    code, _, _ = run_cli(capsys, "compare", paths[0], paths[1], "--ica-restarts", "1", "--json", tmp / "t.json",
                         "--quiet")
    assert code == 0 and {"RigidAlignment", "LinearAlignment", "PermutationAlignment", "ICAAlignment"} <= set(fitted)
    assert json.loads((tmp / "t.json").read_text())["ica"] is not None
