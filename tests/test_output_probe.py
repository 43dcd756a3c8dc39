"""Issue 39: every output path of every command is proven writable before any work, by making
and removing a file in its folder (:func:`actkit.store.unwritable_reason`), not by a
permission guess: ``/proc`` and ``/sys`` pass ``access(2)`` for root, and ``compare --json
/proc/x.json`` ran 68 s before its traceback. Here ``/proc``, ``/sys`` and a real read-only
mount are refused in one line, exit 2, at once, with nothing left behind. The sources named
do not exist (except where stated), so an error about them would show that they were looked at
before the output was checked."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from actkit.store import LayerSpec, create_store, unwritable_reason
from cli_helpers import cli_error, run_cli

REPO = Path(__file__).resolve().parents[1]


def outputs(d):
    """(argv, option named in the line) for each output of each command, the outputs in ``d``."""
    return [
        (["compare", "A.h5", "B.h5", "--json", f"{d}/x.json"], "--json"),
        (["compare", "A.h5", "B.h5", "--plot", f"{d}/x.png"], "--plot"),
        (["compare", "m1", "m2", "--inputs", "t.txt", "--layers", "x", "--work-dir", f"{d}/w"], "--work-dir"),
        (["dictionary", "S.h5", "--out", f"{d}/o.h5", "--n-components", "2"], "--out"),
        (["dictionary", "S.h5", "--out", "o.h5", "--n-components", "2", "--json", f"{d}/x.json"], "--json"),
        (["sae-eval", "S.h5", "--sae", "sae-dir", "--json", f"{d}/x.json"], "--json"),
        (["evaluate", "S.h5", "--labels", "l.npy", "--json", f"{d}/x.json"], "--json"),
        (["evaluate", "S.h5", "--labels", "l.npy", "--plot", f"{d}/x.png"], "--plot"),
        (["sweep", "m", "--inputs", "t.txt", "--layers", "x", "--json", f"{d}/x.json"], "--json"),
        (["sweep", "m", "--inputs", "t.txt", "--layers", "x", "--plot", f"{d}/x.png"], "--plot"),
        (["sweep", "m", "--inputs", "t.txt", "--layers", "x", "--work-dir", f"{d}/w"], "--work-dir"),
        (["whiten", "S.h5", "--out", f"{d}/o.h5"], "--out"),
        (["ica", "S.h5", "--out", f"{d}/o.h5"], "--out"),
        (["import", "e.npy", "--out", f"{d}/o.h5"], "--out"),
        (["consolidate", "S.h5", "--out", f"{d}/o.h5"], "--out"),
        (["export", "S.h5", "--format", "parquet", "--out", f"{d}/o.parquet"], "o.parquet"),
        (["export", "S.h5", "--format", "hf-datasets", "--out", f"{d}/ds"], "ds"),
        (["extract", "no-model", "--inputs", "t.txt", "--layers", "x", "--out", f"{d}/o.h5"], "--out"),
        (["demo", "--out", f"{d}/demo"], "--out"),
        (["reproduce", "kl", "--quick", "--out", f"{d}/rep"], "--out"),
    ]


def _ids(cases):
    return [" ".join([argv[0], argv[-2] if argv[-2].startswith("--") else argv[-1]]) for argv, _ in cases]


@pytest.mark.parametrize("folder", ["/proc", "/sys", "/proc/self"])
def test_a_folder_that_takes_no_file_is_named(folder, tmp_path):
    why = unwritable_reason(f"{folder}/x.json")
    assert why is not None and why.startswith(f"folder {folder} is not writable ("), why
    assert unwritable_reason(tmp_path / "x.json") is None
    assert list(tmp_path.iterdir()) == []  # the probe is removed
    assert unwritable_reason(tmp_path / "missing" / "x.json") == f"folder {tmp_path / 'missing'} does not exist"


@pytest.mark.parametrize("system", ["/proc", "/sys"])
@pytest.mark.parametrize("argv,flag", outputs("{D}"), ids=_ids(outputs("{D}")))
def test_system_folders_are_refused_before_any_work(system, argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t0 = time.perf_counter()
    line = cli_error(capsys, *[a.replace("{D}", system) for a in argv])
    assert time.perf_counter() - t0 < 2.0
    assert f"{system} is not writable" in line and flag in line, line
    assert list(tmp_path.iterdir()) == []


def _stores(folder, n=3):
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        w = create_store(folder / f"s{i}.h5", [LayerSpec("L1", 40, 3), LayerSpec("L2", 40, 3)], n_samples=40,
                         request={"n": i})
        for layer in ("L1", "L2"):
            w.append(layer, rng.normal(size=(40, 3)).astype(np.float32))
        w.checkpoint(40, force=True)
        paths.append(w.finalize())
    return paths


def test_the_issues_compare_to_proc_stops_before_the_table(tmp_path, capsys):
    """The report's case on real stores: nothing printed, nothing computed, one line."""
    a, b = _stores(tmp_path, 2)
    t0 = time.perf_counter()
    line = cli_error(capsys, "compare", a, b, "--methods", "linear", "--json", "/proc/x.json")
    assert time.perf_counter() - t0 < 2.0 and "--json /proc/x.json" in line, line
    assert run_cli(capsys, "compare", a, b, "--methods", "linear", "--json", tmp_path / "r.json", "--quiet")[0] == 0
    assert json.loads((tmp_path / "r.json").read_text())


def test_compare_checks_each_per_layer_plot_before_the_work(tmp_path, capsys):
    """Three stores draw one matrix per layer, ``OUT.LAYER.png``: a user's file at one of those
    names is refused before the first matrix (and left as it was); otherwise both are drawn."""
    paths = _stores(tmp_path)
    (tmp_path / "m.L2.png").write_text("my notes\n")
    _, out, err = run_cli(capsys, "compare", *paths, "--methods", "linear", "--metric", "linear", "--plot", tmp_path / "m.png", "--quiet")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--plot" in lines[0] and "m.L2.png" in lines[0] and "not an output" in lines[0], err
    assert out == "" and not (tmp_path / "m.L1.png").exists()
    assert (tmp_path / "m.L2.png").read_text() == "my notes\n"
    (tmp_path / "m.L2.png").unlink()
    assert run_cli(capsys, "compare", *paths, "--methods", "linear", "--metric", "linear", "--plot", tmp_path / "m.png", "--quiet")[0] == 0
    assert (tmp_path / "m.L1.png").read_bytes()[:4] == b"\x89PNG" == (tmp_path / "m.L2.png").read_bytes()[:4]


def test_a_read_only_mount_is_refused_before_any_work(tmp_path):
    """A real read-only tmpfs (``mount -o ro``) in a mount namespace of its own (``unshare
    --map-root-user --mount``: root or not), every command of :func:`outputs` run against it."""
    disk, spec, results, cwd = tmp_path / "ro", tmp_path / "spec.json", tmp_path / "results.json", tmp_path / "cwd"
    disk.mkdir()
    cwd.mkdir()
    cases = outputs("{DISK}")
    spec.write_text(json.dumps([argv for argv, _ in cases]))
    mount = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    proc = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", mount, str(disk), sys.executable,
                           str(REPO / "tests" / "_readonly_run.py"), str(disk), str(spec), str(results)],
                          cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "tests"), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, ("a real read-only mount needs `unshare --map-root-user --mount` (util-linux, user "
                                  f"namespaces enabled): {proc.stderr.strip()[-2000:]}")
    res = json.loads(results.read_text())
    assert res["listing"] == [] and list(cwd.iterdir()) == []
    for (argv, flag), run in zip(cases, res["runs"]):
        lines = run["stderr"].strip().splitlines()
        assert run["returncode"] == 2 and len(lines) == 1 and run["stdout"] == "", (argv, run)
        assert lines[0].startswith("actkit: error: ") and "Read-only file system" in lines[0] and flag in lines[0], \
            (argv, lines)
        assert run["seconds"] < 2.0, (argv, run["seconds"])


def test_an_html_output_is_checked_like_the_others(tmp_path):
    """``--html`` (a command that writes a page): the same probe, and only an earlier page of
    actkit's is replaced, with ``--overwrite``; ``--html`` and ``--json`` may not be one file."""
    from argparse import Namespace

    from actkit._commands._preflight import check_outputs
    from actkit.errors import InputError
    from actkit.pages import render_page

    with pytest.raises(InputError, match=r"cannot write --html /proc/r.html: folder /proc is not writable"):
        check_outputs(Namespace(command="compare", html="/proc/r.html"))
    (tmp_path / "notes.html").write_text("my notes\n")
    with pytest.raises(InputError, match="exists and is not a page actkit wrote"):
        check_outputs(Namespace(command="compare", html=str(tmp_path / "notes.html"), overwrite=True))
    (tmp_path / "page.html").write_text(render_page("compare", {"pairs": [], "maps": []}, title="old"))
    with pytest.raises(InputError, match="pass --overwrite to replace it"):
        check_outputs(Namespace(command="compare", html=str(tmp_path / "page.html")))
    check_outputs(Namespace(command="compare", html=str(tmp_path / "page.html"), overwrite=True))
    with pytest.raises(InputError, match="--json and --html name the same file"):
        check_outputs(Namespace(command="compare", html=str(tmp_path / "r.html"), json=str(tmp_path / "r.html")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.html", "page.html"]
