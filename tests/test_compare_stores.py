"""``actkit compare A B`` is one Python call (issue 51): :func:`actkit.alignment.compare_stores`
gives the printed table, the ``--json`` document and the ``--html`` page the command writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit.alignment import StoreComparison, StoreMatrices, compare_store_matrix, compare_stores
from actkit.errors import ValidationError
from cli_helpers import run_cli

pytestmark = [pytest.mark.usefixtures("torch_one_thread"), pytest.mark.filterwarnings("ignore::UserWarning")]

KW = dict(methods=("permutation", "rigid", "linear"), bootstrap=40, progress=False)


def _store(path, layers, index, fingerprint="same"):
    from actkit.store import LayerSpec, create_store

    n = index.shape[0]
    w = create_store(path, [LayerSpec(k, n, v.shape[1], index=index) for k, v in layers.items()],
                     n_samples=int(index[:, 0].max()) + 1, request={"p": str(path)}, inputs_fingerprint=fingerprint)
    for k, v in layers.items():
        w.append(k, v.astype(np.float32))
    w.checkpoint(int(index[:, 0].max()) + 1)
    return w.finalize()


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(9)
    index = np.stack([np.repeat(np.arange(80), 4), np.tile(np.arange(4), 80)], 1)
    S = rng.laplace(size=(320, 5))
    a = _store(tmp / "a.h5", {"l1": S @ rng.normal(size=(5, 6)), "l2": S @ rng.normal(size=(5, 4))}, index)
    b = _store(tmp / "b.h5", {"l1": S @ rng.normal(size=(5, 6)) + 0.3 * rng.normal(size=(320, 6)),
                              "l2": rng.normal(size=(320, 4))}, index)
    other = _store(tmp / "o.h5", {"l1": rng.normal(size=(320, 6))}, index, fingerprint="other")
    c = _store(tmp / "c.h5", {"l1": S @ rng.normal(size=(5, 6)), "l2": S @ rng.normal(size=(5, 4))}, index)
    return tmp, a, b, other, c


def test_the_command_writes_what_compare_stores_gives(stores, capsys, tmp_path):
    _, a, b, _, _ = stores
    js, page = tmp_path / "r.json", tmp_path / "r.html"
    code, out, _ = run_cli(capsys, "compare", a, b, "--methods", "permutation,rigid,linear", "--bootstrap", "40",
                           "--json", js, "--html", page, "--quiet")
    assert code == 0
    got = compare_stores(actkit.open_store(a), actkit.open_store(b), names=(str(a), str(b)), **KW)
    assert isinstance(got, StoreComparison) and got.labels == ["l1", "l2"] and got.pairs == [("l1", "l1"), ("l2", "l2")]
    assert out == got.format() + "\n"
    doc = json.loads(js.read_text(encoding="utf-8"))
    mine = json.loads(json.dumps(got.to_dict()))
    assert set(doc) == {"l1", "l2"} and doc["l1"]["store_a"] == str(a) and doc["l2"]["store_b"] == str(b)
    for label in ("l1", "l2"):
        assert {k: v for k, v in doc[label].items() if not k.startswith("seconds")} == \
            {k: v for k, v in mine[label].items() if not k.startswith("seconds")}
    again = got.to_html(tmp_path / "again.html")
    assert actkit.pages.is_actkit_page(again) and actkit.pages.is_actkit_page(page)


def test_one_pair_is_one_object_and_other_inputs_are_refused_first(stores):
    _, a, b, other, _ = stores
    one = compare_stores(actkit.open_store(a), actkit.open_store(b), [("l1", "l1")], **KW)
    d = one.to_dict()
    assert d["store_a"] == str(a) and "permutation" in d and "l1" not in d
    with pytest.raises(ValidationError, match="were extracted from different inputs"):
        compare_stores(actkit.open_store(a), actkit.open_store(other), [("l1", "l1")], **KW)
    with pytest.raises(ValidationError, match="x and y have different row counts"):
        actkit.alignment.check_same_rows([np.zeros((5, 2)), np.zeros((6, 2))], ["x", "y"])


def test_several_stores_are_compare_store_matrix(stores, capsys, tmp_path):
    """``actkit compare A B C --metric linear_cka`` writes what compare_store_matrix gives."""
    _, a, b, _, c = stores
    js = tmp_path / "m.json"
    code, out, _ = run_cli(capsys, "compare", a, b, c, "--metric", "linear_cka", "--json", js, "--quiet")
    assert code == 0
    got = compare_store_matrix([actkit.open_store(p) for p in (a, b, c)], ["l1", "l2"], metric="linear_cka",
                               names=[str(a), str(b), str(c)], progress=False)
    assert isinstance(got, StoreMatrices) and out == got.format() + "\n"
    assert json.loads(js.read_text(encoding="utf-8")) == json.loads(json.dumps(got.to_dict()))
    m = got.matrices["l1"]
    assert m.shape == (3, 3) and np.allclose(np.diag(m), 1.0) and set(got.results["l2"]) == {
        (i, j) for i in range(3) for j in range(3)}
    page = got.to_html(tmp_path / "m.html")
    assert actkit.pages.is_actkit_page(page)
