"""Issue 30: every output path (``--out``, ``--json``, ``--plot``, ``--work-dir``) and every
numeric option is checked before any computation: one line, exit 2, at once, nothing written.
The sources named here do not exist, so an error about them would show that the model or
store was looked at first."""

from __future__ import annotations

import time

import pytest

from cli_helpers import cli_error, run_cli


def _files(folder):
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else b"") for p in folder.rglob("*"))


NUMBERS = [
    (["compare", "A.h5", "B.h5", "--eval-fraction", "1.5"], "--eval-fraction must be in (0, 1), got 1.5"),
    (["compare", "A.h5", "B.h5", "--eval-fraction", "0"], "--eval-fraction"),
    (["compare", "A.h5", "B.h5", "--eval-fraction", "nan"], "--eval-fraction"),
    (["compare", "m1", "m2", "--inputs", "t.txt", "--batch-size", "0"], "--batch-size must be a positive integer"),
    (["compare", "A.h5", "B.h5", "--ica-max-iter", "0"], "--ica-max-iter"),
    (["compare", "A.h5", "B.h5", "--seed", "-1"], "--seed must be a non-negative integer"),
    (["extract", "no-model", "--inputs", "t.txt", "--layers", "x", "--out", "o.h5", "--batch-size", "0"], "--batch-size"),
    (["extract", "no-model", "--inputs", "t.txt", "--layers", "x", "--out", "o.h5", "--max-samples", "-3"], "--max-samples"),
    (["extract", "no-model", "--inputs", "t.txt", "--layers", "x", "--out", "o.h5", "--checkpoint-every", "-1"],
     "--checkpoint-every must be a number of seconds >= 0"),
    (["sweep", "m", "--inputs", "t.txt", "--layers", "x", "--eval-fraction", "1.5"], "--eval-fraction"),
    (["sweep", "m", "--inputs", "t.txt", "--layers", "x", "--batch-size", "0"], "--batch-size"),
    (["whiten", "S.h5", "--out", "o.h5", "--eps", "0"], "--eps"),
    (["whiten", "S.h5", "--out", "o.h5", "--block-rows", "0"], "--block-rows must be a positive number of rows"),
    (["ica", "S.h5", "--out", "o.h5", "--fit-rows", "1"], "--fit-rows must be >= 2, got 1"),
    (["ica", "S.h5", "--out", "o.h5", "--tol", "-1"], "--tol"),
    (["dictionary", "S.h5", "--out", "o.h5", "--n-components", "0"], "--n-components"),
    (["dictionary", "S.h5", "--out", "o.h5", "--n-components", "4", "--alpha", "-1"], "--alpha"),
    (["evaluate", "S.h5", "--labels", "l.npy", "--n-splits", "1"], "--n-splits"),
    (["evaluate", "S.h5", "--labels", "l.npy", "--max-bin", "0"], "--max-bin"),
]


@pytest.mark.parametrize("argv,expected", NUMBERS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in NUMBERS])
def test_numbers_are_refused_before_anything_is_loaded(argv, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    line = cli_error(capsys, *argv)
    assert time.perf_counter() - t0 < 2.0  # the parser and the checks only (1 s unloaded)
    assert expected in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def place(tmp_path):
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "keep.txt").write_text("keep\n")
    return tmp_path


def _outputs(p):
    """(option values, words the line must hold) for each bad output path."""
    return [
        (["--json", p / "missing" / "r.json"], "does not exist"),
        (["--json", p / "notes.txt" / "r.json"], "does not exist"),
        (["--json", p / "folder"], "is a folder"),
        (["--json", p / "notes.txt"], "not an output of this kind"),
        (["--plot", p / "r.txt"], "must name an image format"),
        (["--plot", p / "r"], "must name an image format"),
        (["--plot", p / "missing" / "r.png"], "does not exist"),
        (["--plot", p / "folder"], "must name an image format"),
        (["--work-dir", p / "notes.txt"], "is a file, not a folder"),
        (["--work-dir", p / "missing" / "w"], "does not exist"),
    ]


@pytest.mark.parametrize("command", ["compare", "evaluate", "sweep"])
def test_output_paths_are_checked_first_and_nothing_is_written(command, place, capsys):
    base = {"compare": ["compare", "A.h5", "B.h5"], "evaluate": ["evaluate", "S.h5", "--labels", "l.npy"],
            "sweep": ["sweep", "m", "--inputs", "t.txt", "--layers", "x"]}[command]
    before = _files(place)
    for extra, words in _outputs(place):
        if command == "evaluate" and extra[0] == "--work-dir":
            continue
        t0 = time.perf_counter()
        line = cli_error(capsys, *base, *extra)
        assert time.perf_counter() - t0 < 2.0
        assert words in line and extra[0] in line, (extra, line)
        assert _files(place) == before


@pytest.mark.parametrize("command", ["whiten", "ica", "dictionary", "import", "consolidate", "export"])
def test_out_is_checked_first(command, place, capsys):
    extra = {"dictionary": ["--n-components", "2"], "export": ["--format", "parquet"]}.get(command, [])
    before = _files(place)
    for out, words in ((place / "missing" / "o.h5", "does not exist"), (place / "notes.txt", "notes.txt"),
                       (place / "folder", "folder")):
        line = cli_error(capsys, command, place / "S.h5", "--out", out, *extra)
        assert words in line and "S.h5" not in line, line
        line = cli_error(capsys, command, place / "S.h5", "--out", out, "--overwrite", *extra)
        assert words in line and "S.h5" not in line, line
        assert _files(place) == before


def test_extract_never_replaces_a_users_file(place, capsys):
    before = _files(place)
    t0 = time.perf_counter()
    line = cli_error(capsys, "extract", "no-model", "--inputs", "t.txt", "--layers", "x", "--out",
                     place / "notes.txt", "--overwrite")
    assert time.perf_counter() - t0 < 2.0 and "notes.txt" in line and "not an output" in line
    assert _files(place) == before


def test_a_plot_is_written_in_the_format_its_suffix_names(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from actkit._atomic import save_figure_atomic
    from actkit._commands._preflight import is_image_file

    for name in ("f.png", "f.pdf", "f.svg"):
        fig = plt.figure()
        save_figure_atomic(fig, tmp_path / name)
        assert is_image_file(tmp_path / name), name
    assert (tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")


def test_an_earlier_json_and_plot_are_replaced(tmp_path, capsys):
    """Rerunning with the same --json and --plot replaces actkit's earlier files (a JSON
    document, an image of the suffix's format)."""
    import numpy as np

    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(0)
    paths = []
    for name in ("a", "b"):
        w = create_store(tmp_path / f"{name}.h5", [LayerSpec("L", 60, 3)], n_samples=60, request={"n": name})
        w.append("L", rng.normal(size=(60, 3)).astype(np.float32))
        w.checkpoint(60, force=True)
        paths.append(w.finalize())
    argv = ["compare", *paths, "--methods", "linear", "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png",
            "--quiet"]
    assert run_cli(capsys, *argv)[0] == 0
    (tmp_path / "r.json").write_text('{"old": 1}\n')
    assert run_cli(capsys, *argv)[0] == 0
    assert "old" not in (tmp_path / "r.json").read_text()
