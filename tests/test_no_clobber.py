"""Issue 30: no command deletes or replaces what it did not create. ``--overwrite`` replaces
only an earlier output of the same kind (an actkit store, an actkit export); a user's file or
folder gets one line (exit 2) and stays byte-identical; a failed or terminated export leaves
nothing behind (no ``.partial``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli_error, run_cli

from actkit import _faults
from actkit.store import LayerSpec, create_store


def _tree(folder: Path) -> dict:
    """Every file under ``folder`` (hidden ones included) with its sha256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def store(tmp_path):
    rows, d = 40, 3
    X = np.random.default_rng(0).normal(size=(rows, d)).astype(np.float32)
    w = create_store(tmp_path / "s.h5", [LayerSpec("L", rows, d)], n_samples=rows, request={"t": 1})
    w.append("L", X)
    w.checkpoint(rows, force=True)
    return w.finalize()


@pytest.fixture
def user_folder(tmp_path):
    """A working folder of the user's: notes, code, a sub-folder."""
    folder = tmp_path / "work"
    (folder / "src").mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes\n")
    for i in range(5):
        (folder / "src" / f"m{i}.py").write_text(f"x = {i}\n")
    return folder


@pytest.mark.parametrize("fmt", ["parquet", "hf-datasets"])
def test_export_overwrite_never_replaces_a_user_folder(store, user_folder, tmp_path, capsys, fmt):
    before = _tree(tmp_path)
    line = cli_error(capsys, "export", store, "--format", fmt, "--out", user_folder, "--overwrite", "--quiet")
    assert "not an actkit" in line and str(user_folder) in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("fmt,name", [("parquet", "e.parquet"), ("hf-datasets", "e-hf")])
def test_export_overwrite_never_replaces_a_user_file(store, tmp_path, capsys, fmt, name):
    (tmp_path / name).write_text("not an export\n")
    before = _tree(tmp_path)
    line = cli_error(capsys, "export", store, "--format", fmt, "--out", tmp_path / name, "--overwrite")
    assert "not an actkit" in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("fmt,name", [("parquet", "e.parquet"), ("hf-datasets", "e-hf")])
def test_export_overwrite_replaces_its_own_export(store, tmp_path, capsys, fmt, name):
    if fmt == "hf-datasets":
        import datasets
    out = tmp_path / name
    assert run_cli(capsys, "export", store, "--format", fmt, "--out", out, "--quiet")[0] == 0
    first = _tree(tmp_path)
    assert run_cli(capsys, "export", store, "--format", fmt, "--out", out, "--quiet", "--overwrite")[0] == 0
    assert _tree(tmp_path).keys() == first.keys()  # replaced in place, nothing left beside it
    other = "hf-datasets" if fmt == "parquet" else "parquet"  # an export of the other kind: not replaced
    line = cli_error(capsys, "export", store, "--format", other, "--out", out, "--overwrite")
    assert f"not an actkit {other} export" in line
    # a file the user added to an export folder makes it theirs
    if fmt == "hf-datasets":
        (out / "notes.txt").write_text("mine\n")
        before = _tree(tmp_path)
        cli_error(capsys, "export", store, "--format", fmt, "--out", out, "--overwrite")
        assert _tree(tmp_path) == before


@pytest.mark.parametrize("fmt,name", [("parquet", "e.parquet"), ("hf-datasets", "e-hf")])
def test_the_same_export_again_has_nothing_to_do(store, tmp_path, capsys, fmt, name):
    """Issue 48: the same export run again (after a kill between its rename and its exit, or
    just again) finds its finished output, exit 0, bytes unchanged; another export (another
    block size, labels) without --overwrite is refused in one line."""
    out = tmp_path / name
    argv = ["export", store, "--format", fmt, "--out", out, "--quiet"]
    assert run_cli(capsys, *argv)[0] == 0
    first = _tree(tmp_path)
    assert run_cli(capsys, *argv)[0] == 0
    assert _tree(tmp_path) == first
    labels = tmp_path / "labels.txt"
    labels.write_text("a\n" * 40)
    assert "exists; pass --overwrite" in cli_error(capsys, *argv, "--labels", labels)
    assert _tree(tmp_path) == {**first, "labels.txt": _tree(tmp_path)["labels.txt"]}


@pytest.mark.parametrize("fmt,name", [("parquet", "e.parquet"), ("hf-datasets", "e-hf")])
def test_a_terminated_export_leaves_nothing(store, tmp_path, capsys, monkeypatch, fmt, name):
    """SIGTERM mid-export (command line), a full disk after the first block (Python API): an
    earlier export untouched, no ``.partial`` left anywhere."""
    from actkit.export import export_store

    if fmt == "hf-datasets":
        import datasets
    out = tmp_path / name
    assert run_cli(capsys, "export", store, "--format", fmt, "--out", out, "--quiet")[0] == 0
    before = _tree(tmp_path)
    _faults._counts.clear()
    monkeypatch.setenv("ACTKIT_FAULT", "term:export-rows:1")
    try:
        code, _, err = run_cli(capsys, "export", store, "--format", fmt, "--out", out, "--quiet", "--overwrite")
        assert code == 143, err
        assert _tree(tmp_path) == before
        _faults._counts.clear()
        monkeypatch.setenv("ACTKIT_FAULT", "enospc:export-rows:2")
        with pytest.raises(OSError):
            export_store(store, out, format=fmt, overwrite=True, block_rows=10, progress=False)
    finally:
        _faults._counts.clear()
    assert _tree(tmp_path) == before
    assert not [p for p in tmp_path.rglob("*") if "partial" in p.name]


def test_store_overwrite_never_replaces_a_user_file(store, tmp_path, capsys):
    """``whiten --out notes.txt --overwrite`` (and an HDF5 file of someone else's) are refused
    before any computation; an actkit store there is replaced."""
    import h5py

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(3)
    before = _tree(tmp_path)
    for target in (notes, other, tmp_path / "work"):
        if target.name == "work":
            target.mkdir()
            before = _tree(tmp_path)
        line = cli_error(capsys, "whiten", store, "--out", target, "--overwrite", "--quiet")
        assert str(target) in line, line
        assert _tree(tmp_path) == before
    out = tmp_path / "w.h5"
    assert run_cli(capsys, "whiten", store, "--out", out, "--quiet")[0] == 0
    assert run_cli(capsys, "whiten", store, "--out", out, "--quiet", "--overwrite", "--n-components", "2")[0] == 0
    from actkit import open_store

    with open_store(out) as s:
        assert s[s.layers[0]].shape[1] == 2
    with pytest.raises(Exception, match="only its own outputs"):
        create_store(other, [LayerSpec("L", 2, 2)], n_samples=2, request={"t": 2}, overwrite=True)


def test_a_users_files_in_a_shards_folder_stay(tmp_path):
    """A single store finalised at OUT removes the shards of a sharded store it replaced, never
    a ``OUT.shards`` folder holding anything else; a sharded rewrite refuses it."""
    from actkit.errors import StoreError
    from actkit.store._shard_state import rerun_state

    out = tmp_path / "o.h5"
    folder = tmp_path / "o.h5.shards"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    w = create_store(out, [LayerSpec("L", 2, 2)], n_samples=2, request={"t": 3})
    w.append("L", np.ones((2, 2), np.float32))
    w.checkpoint(2, force=True)
    w.finalize()
    assert (folder / "notes.txt").read_text() == "mine\n"
    with pytest.raises(StoreError, match="did not write there"):
        rerun_state(out, {"request": {"t": 4}}, overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine\n"


def test_an_export_killed_with_sigkill_is_cleaned_up_by_the_next(store, tmp_path):
    """``kill -9`` mid-export (no cleanup can run) leaves only a hidden folder of the run's own;
    the next export of the same OUT removes it, and OUT is complete."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "e.parquet"
    argv = [sys.executable, "-m", "actkit", "export", str(store), "--format", "parquet", "--out", str(out), "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(repo), ACTKIT_FAULT="kill:export-rows:1")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".e.parquet.")]
    assert len(left) == 1 and left[0].endswith(".partial") and not out.exists()
    env.pop("ACTKIT_FAULT")
    assert subprocess.run(argv, env=env, capture_output=True, timeout=300).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.parquet", "s.h5"]


def test_a_killed_runs_temporaries_go_and_nothing_else(store, tmp_path, capsys):
    """Issue 48: the next run of a command removes the temporaries a killed run left for its
    output (``.OUT.????????.partial``: empty, or holding actkit's marker, unlocked), and
    nothing else: not a user's file or folder of that name without the marker, not another
    output's, not one a live run holds."""
    import subprocess
    import sys

    from actkit._atomic import TEMPORARY_MARKER

    out = tmp_path / "w.h5"
    live = subprocess.Popen([sys.executable, "-c", "import sys; from actkit._atomic import Temporary; "
                             "t = Temporary(sys.argv[1]).open(); print(t.folder, flush=True); sys.stdin.read()",
                             str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = Path(live.stdout.readline().strip())  # a live run's temporary: locked
        empty = tmp_path / ".w.h5.abcdefgh.partial"  # killed between mkdtemp and its marker
        empty.mkdir()
        built = tmp_path / ".w.h5.0123_789.partial"  # killed while building the store in it
        built.mkdir()
        (built / TEMPORARY_MARKER).write_text("")
        (built / "w.h5.partial").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
        mine = tmp_path / ".w.h5.zzzzzzzz.partial"  # a user's folder of that name: no marker
        mine.mkdir()
        (mine / "notes.txt").write_text("mine\n")
        (tmp_path / ".w.h5.yyyyyyyy.partial").write_text("a user's file of that name\n")
        (tmp_path / ".w.h5.x.abcdefgh.partial").mkdir()  # the temporary of another output (w.h5.x)
        before = {k: v for k, v in _tree(tmp_path).items() if not k.startswith((empty.name, built.name))}
        assert run_cli(capsys, "whiten", store, "--out", out, "--quiet")[0] == 0
        after = _tree(tmp_path)
        assert not empty.exists() and not built.exists() and held.is_dir()
        assert {k: v for k, v in after.items() if k != "w.h5"} == before
    finally:
        live.communicate("", timeout=60)  # it ends without removing its temporary, as a kill would
    assert held.is_dir() and run_cli(capsys, "whiten", store, "--out", out, "--quiet")[0] == 0
    assert not held.exists()  # the same command again: nothing to do, and that temporary gone
    assert _tree(tmp_path) == {k: v for k, v in after.items() if not k.startswith(held.name)}
