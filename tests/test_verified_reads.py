"""Issue 30: every command that reads a store checks the checksums of the blocks it reads (as
``actkit verify`` does). A flipped byte in one block is one line and exit 2 in compare,
evaluate, sweep and every analysis command, never a number computed from it; ``--no-verify``
skips the check."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import cli_error, run_cli

from actkit.store import LayerSpec, create_store, open_store

ROWS, D = 400, 6


def _store(path, X):
    w = create_store(path, [LayerSpec("L", len(X), X.shape[1])], n_samples=len(X), request={"p": str(path.name)})
    w.append("L", X.astype(np.float32))
    w.checkpoint(len(X), force=True)
    return w.finalize()


def _flip(path, row):
    """Flip one bit of row ``row`` of layer L (stored contiguously, so a plain file offset)."""
    import h5py

    with h5py.File(path, "r") as f:
        offset = f["layers/L/data"].id.get_offset() + row * D * 4 + 1
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x40
    path.write_bytes(bytes(raw))


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(0)
    S = rng.laplace(size=(ROWS, D))
    a = _store(tmp_path / "a.h5", S @ rng.normal(size=(D, D)))
    b = _store(tmp_path / "b.h5", S @ rng.normal(size=(D, D)))
    labels = tmp_path / "labels.npy"
    np.save(labels, (S[:, 0] > 0).astype(np.int64))
    _flip(a, 123)
    return a, b, labels


def test_a_corrupt_block_is_verify_s_error_in_every_command(pair, tmp_path, capsys):
    a, b, labels = pair
    verify = cli_error(capsys, "verify", a)
    assert "layer L block 0" in verify and "does not match its checksum" in verify
    commands = [
        ("compare", a, b, "--methods", "linear", "--json", tmp_path / "c.json"),
        ("compare", b, a, "--methods", "linear"),
        ("whiten", a, "--out", tmp_path / "w.h5"),
        ("ica", a, "--out", tmp_path / "i.h5", "--n-components", "3"),
        ("dictionary", a, "--out", tmp_path / "d.h5", "--n-components", "4", "--n-epochs", "1"),
        ("export", a, "--format", "parquet", "--out", tmp_path / "e.parquet"),
        ("evaluate", a, "--labels", labels, "--n-splits", "2", "--n-rotations", "1", "--json", tmp_path / "v.json"),
        ("units", a, "--no-inputs", "--json", tmp_path / "u.json"),
    ]
    for argv in commands:
        assert cli_error(capsys, *argv, "--quiet") == verify, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h5", "b.h5", "labels.npy"]  # nothing written


def test_no_verify_reads_without_the_check(pair, capsys):
    a, b, _ = pair
    code, out, err = run_cli(capsys, "compare", a, b, "--methods", "linear", "--quiet", "--no-verify")
    assert code == 0, err
    with open_store(a, verify_reads=False) as s:
        assert s["L"][123].shape == (D,)


def test_reads_of_a_layer_check_the_blocks_they_touch(pair):
    """Slices, single rows, sorted and unsorted row arrays, np.asarray and iter_blocks of the
    Python API all check; rows of an intact store read as before."""
    from actkit.errors import StoreError

    a, b, _ = pair
    with open_store(a) as s:
        layer = s["L"]
        for read in (lambda: layer[100:130], lambda: layer[123], lambda: layer[[5, 123]], lambda: layer[[123, 5]],
                     lambda: np.asarray(layer), lambda: list(layer.iter_blocks(50)), lambda: layer[::-1]):
            with pytest.raises(StoreError, match="does not match its checksum"):
                read()
    with open_store(b) as s, open_store(b, verify_reads=False) as raw:
        for key in (slice(3, 40), 7, [1, 9, 300], [300, 1, 9, 9], slice(None, None, -3), (slice(2, 9), slice(1, 4))):
            np.testing.assert_array_equal(s["L"][key], raw["L"][key])
        np.testing.assert_array_equal(np.asarray(s["L"]), raw["L"].dataset[()])
