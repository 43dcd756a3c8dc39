"""The store format: crash-safe writing, resume, refusal rules, reading."""

import hashlib
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import actkit
from actkit.errors import LayerError, StoreError, StoreIncompleteError
from actkit.store import LayerSpec, create_store, open_store, partial_path, progress_path


def _specs(n=10):
    idx = np.stack([np.repeat(np.arange(n), 2), np.tile([0, 1], n)], 1)
    return [
        LayerSpec("blocks.0", rows=2 * n, features=3, index=idx, attrs={"pool": "none"}),
        LayerSpec("pooled", rows=n, features=4, dtype="float16"),
    ]


def _data(n=10):
    rng = np.random.default_rng(0)
    return rng.normal(size=(2 * n, 3)).astype(np.float32), rng.normal(size=(n, 4)).astype(np.float32)


def _write(path, n=10, stop_after=None, request=None, step=3, **kw):
    a, b = _data(n)
    w = create_store(path, _specs(n), n_samples=n, request=request or {"model": "m"},
                     provenance={"model": "m", "versions": {"actkit": "x"}}, inputs_fingerprint="abc",
                     params={"unembedding": np.eye(3)}, **kw)
    if w.complete:
        return w
    for s in range(w.samples_done, n, step):
        e = min(n, s + step)
        w.append("blocks.0", a[2 * s : 2 * e])
        w.append("pooled", b[s:e])
        w.checkpoint(e)
        if stop_after is not None and e >= stop_after:
            w.close()
            return w
    w.finalize()
    return w


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_roundtrip_layers_index_params_provenance(tmp_path):
    p = tmp_path / "s.h5"
    _write(p)
    a, b = _data()
    with actkit.open_store(p) as st:
        assert st.layers == ["blocks.0", "pooled"]
        assert st.complete
        np.testing.assert_array_equal(st["blocks.0"][:], a)
        np.testing.assert_array_equal(np.asarray(st["pooled"]), b.astype(np.float16))
        assert st["blocks.0"].shape == (20, 3) and len(st["pooled"]) == 10
        np.testing.assert_array_equal(st["blocks.0"].groups, np.repeat(np.arange(10), 2))
        np.testing.assert_array_equal(st["pooled"].index[:, 1], -1)
        np.testing.assert_array_equal(st.params["unembedding"], np.eye(3))
        assert st.provenance["versions"] == {"actkit": "x"}
        assert st.inputs_fingerprint == "abc"
        # unsorted and repeated row selections work like numpy
        np.testing.assert_array_equal(st["blocks.0"][[5, 1, 1]], a[[5, 1, 1]])
        blocks = list(st["blocks.0"].iter_blocks(7))
        assert [s for s, _ in blocks] == [0, 7, 14]
        np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), a)
        info = st.info()
    assert info["complete"] is True
    assert info["layers"]["blocks.0"] == {**info["layers"]["blocks.0"], "dataset": "/layers/blocks.0/data",
                                          "shape": [20, 3]}
    # readable with plain h5py
    with h5py.File(p, "r") as f:
        assert f["layers/pooled/data"].shape == (10, 4)
        assert f["provenance"].attrs["model"] == b"m"  # fixed-length strings: no global heap
        assert json.loads(f["meta"][()].tobytes())["provenance"]["model"] == "m"
    assert not partial_path(p).exists() and not progress_path(p).exists()


def test_files_are_bitwise_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _write(tmp_path / "a.h5")
    _write(tmp_path / "b.h5")
    assert _sha(tmp_path / "a.h5") == _sha(tmp_path / "b.h5")


def test_resume_gives_identical_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _write(tmp_path / "full.h5")
    p = tmp_path / "r.h5"
    w = _write(p, stop_after=3)
    assert not p.exists() and partial_path(p).exists()
    with pytest.raises(StoreIncompleteError, match="3/10 samples"):
        open_store(p)
    with open_store(p, allow_incomplete=True) as st:
        assert not st.complete and st["pooled"].shape == (3, 4)
    w = _write(p)  # resumes
    assert _sha(p) == _sha(tmp_path / "full.h5")


def test_rerun_is_noop_and_other_request_refused(tmp_path):
    p = tmp_path / "s.h5"
    _write(p)
    before = _sha(p)
    assert _write(p).complete
    with pytest.raises(StoreError, match=r"different request \(model: other here, m in the store\).*--overwrite"):
        _write(p, request={"model": "other"})
    assert _sha(p) == before
    _write(p, request={"model": "other"}, overwrite=True)
    with open_store(p) as st:
        assert st.request["request"] == {"model": "other"}


def test_half_written_batch_is_rewritten_on_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _write(tmp_path / "full.h5")
    p = tmp_path / "h.h5"
    a, b = _data()
    w = create_store(p, _specs(), n_samples=10, request={"model": "m"},
                     provenance={"model": "m", "versions": {"actkit": "x"}}, inputs_fingerprint="abc",
                     params={"unembedding": np.eye(3)})
    w.append("blocks.0", a[:6]); w.append("pooled", b[:3]); w.checkpoint(3)
    w.append("blocks.0", a[6:12])  # crash before the second layer of this batch
    w.close()
    _write(p)
    assert _sha(p) == _sha(tmp_path / "full.h5")


def test_partial_from_other_request_refused(tmp_path):
    p = tmp_path / "s.h5"
    _write(p, stop_after=3)
    with pytest.raises(StoreError, match="unfinished store of a different request"):
        _write(p, request={"model": "other"})


def test_kill9_during_writes_never_leaves_unreadable_partial(tmp_path):
    """A writer killed with SIGKILL at a random moment leaves a readable partial store,
    and the identical request then completes it with the right content."""
    p = tmp_path / "k.h5"
    script = f"""
import numpy as np, sys
sys.path.insert(0, {str(os.path.dirname(__file__))!r})
from test_store import _write
import time
from actkit.store import create_store
_write({str(p)!r}, n=300000, step=50)
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    import time

    deadline = time.time() + 60
    while time.time() < deadline and not progress_path(p).exists():
        time.sleep(0.01)
    time.sleep(0.3)
    proc.kill()
    proc.wait()
    assert not p.exists(), "the writer finished before it was killed: make the test bigger"
    if True:
        with open_store(p, allow_incomplete=True) as st:
            done = json.load(open(progress_path(p)))["samples_done"]
            assert st["pooled"].shape[0] == done
    _write(p, n=300000, step=50)
    a, b = _data(300000)
    with open_store(p) as st:
        np.testing.assert_array_equal(st["blocks.0"][:], a)


def test_bad_files(tmp_path):
    with pytest.raises(StoreError, match="missing.h5 does not exist"):
        open_store(tmp_path / "missing.h5")
    txt = tmp_path / "x.h5"
    txt.write_text("hello")
    with pytest.raises(StoreError, match="not an HDF5 file"):
        open_store(txt)
    good = tmp_path / "g.h5"
    _write(good, n=2000)
    trunc = tmp_path / "t.h5"
    trunc.write_bytes(good.read_bytes()[:3000])
    with pytest.raises(StoreError, match="truncated or corrupt"):
        open_store(trunc)
    other = tmp_path / "o.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    with pytest.raises(StoreError, match="not an actkit store"):
        open_store(other)
    with open_store(good) as st, pytest.raises(LayerError, match="did you mean blocks.0"):
        st["blocks.1"]
    with pytest.raises(StoreError, match="does not exist"):
        _write(tmp_path / "nope" / "s.h5")


def test_info_cli(tmp_path, capsys):
    from actkit.cli import main

    p = tmp_path / "s.h5"
    _write(p)
    assert main(["info", str(p), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["complete"] and info["layers"]["pooled"]["shape"] == [10, 4]
    assert info["provenance"]["model"] == "m"
    assert main(["info", str(p)]) == 0
    assert "blocks.0" in capsys.readouterr().out
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("actkit: error:") and err.count("\n") == 1
