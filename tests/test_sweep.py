"""``actkit sweep``: one model across its training revisions (local checkpoints and an offline
hub cache), stores reused, results as JSON and a figure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from cli_helpers import cli_error, run_cli

REPO = Path(__file__).resolve().parents[1]
LAYER = "gpt_neox.layers.1"
FAST = dict(methods=["rigid", "linear", "ica"], ica_n_components=4, ica_restarts=2, ica_max_rows=2000)


def _texts(tmp_path):
    words = "the quick brown fox jumps over a lazy dog while features hold".split()
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(4 + i % 9)) for i in range(60)]
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _checkpoint(src, dst, noise, seed=0):
    """A copy of the tiny model whose weights moved by ``noise`` (a later "training step")."""
    import torch
    from transformers import GPTNeoXForCausalLM

    shutil.copytree(src, dst)
    model = GPTNeoXForCausalLM.from_pretrained(src)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(noise * torch.randn(p.shape, generator=gen))
    model.save_pretrained(dst, safe_serialization=True)
    return dst


@pytest.fixture(scope="module")
def checkpoints(tiny_gpt_neox, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    return [_checkpoint(tiny_gpt_neox, root / f"step-{s}", noise, seed=s)
            for s, noise in ((10, 0.3), (20, 0.1), (30, 0.02), (40, 0.0))]


class _Bar:
    """Stands in for tqdm: records the bars a sweep opens (total, updates, description)."""

    made: ClassVar[list] = []

    def __init__(self, *args, total=None, desc=None, **kwargs):
        self.total, self.desc, self.n = total, desc, 0
        _Bar.made.append(self)

    def update(self, k=1):
        self.n += k

    def close(self):
        pass

    def __getattr__(self, name):  # set_postfix, refresh, ...: nothing to draw
        return lambda *a, **k: None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_sweep_against_final_reuses_stores_and_writes_json_and_figure(checkpoints, tmp_path, monkeypatch):
    import actkit.sweep
    from actkit.sweep import plot_sweep, sweep

    texts, work = _texts(tmp_path), tmp_path / "work"
    kw = dict(layers=[LAYER], work_dir=work, progress=False, **FAST)
    first = sweep(inputs=texts, checkpoints=[str(c) for c in checkpoints[1:]], **kw)
    assert [s["extracted"] for s in first["stores"]] == [True, True, True]
    rows = first["comparisons"]
    assert [(r["step"], r["reference"], r["reference_step"]) for r in rows] == [(20, "step-40", 40),
                                                                                  (30, "step-40", 40)]
    # every numeric key of compare's result is kept; closer in training = closer representations
    assert {"rigid", "linear", "ica", "linear_cka", "ica_efficiency", "diameter"} <= set(rows[0])
    assert rows[0]["linear"] > rows[1]["linear"] and rows[0]["linear_cka"] < rows[1]["linear_cka"]
    mtimes = {p: os.path.getmtime(p) for p in work.glob("*.h5")}
    # an added revision extracts only itself; the others are reused untouched
    monkeypatch.setattr(actkit.sweep, "tqdm", _Bar)  # the sweep's own bar (tqdm.auto's, bound at import)
    _Bar.made = []
    again = sweep(inputs=texts, checkpoints=[str(c) for c in checkpoints], **{**kw, "progress": True})
    (bar,) = [b for b in _Bar.made if b.desc == "sweep"]
    assert bar.total == bar.n == 4  # a progress bar over the revisions, each counted once
    assert {s["label"]: s["extracted"] for s in again["stores"]} == {"step-10": True, "step-20": False,
                                                                     "step-30": False, "step-40": False}
    assert all(os.path.getmtime(p) == t for p, t in mtimes.items())
    same = {(r["step"], k): v for r in again["comparisons"] for k, v in r.items() if k != "reference"}
    diff = [(r["step"], k) for r in rows for k, v in r.items() if k != "reference" and not k.startswith("seconds") and same[(r["step"], k)] != v]
    assert not diff  # the same stores compare to the same numbers
    png = plot_sweep(again, tmp_path / "sweep.png")
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    assert img.shape[1] > 3 * img.shape[0] / 2  # three panels side by side for one layer
    assert img[..., :3].std() > 0.05  # lines and a band were drawn, not a blank canvas
    json.dumps(again, allow_nan=False)


def test_sweep_against_previous_and_the_cli(checkpoints, tmp_path, capsys):
    texts = _texts(tmp_path)
    out, plot = tmp_path / "s.json", tmp_path / "s.png"
    code, stdout, err = run_cli(capsys, "sweep", "--checkpoints", ",".join(str(c) for c in checkpoints[:3]),
                                "--inputs", texts, "--layers", LAYER, "--against", "previous", "--methods",
                                "rigid,linear", "--work-dir", tmp_path / "w", "--json", out, "--plot", plot, "--quiet")
    assert code == 0 and f"wrote {out} and {plot}" in err.splitlines() and "wrote" not in stdout
    result = json.loads(out.read_text())
    assert [(r["step"], r["reference_step"]) for r in result["comparisons"]] == [(20, 10), (30, 20)]
    assert plot.stat().st_size > 10_000
    assert "cannot tell the training step" in cli_error(capsys, "sweep", "--checkpoints", f"{texts.parent},"
                                                        f"{checkpoints[0]}", "--inputs", texts, "--layers", LAYER)
    assert "--steps has 1 numbers for 2" in cli_error(capsys, "sweep", "--checkpoints", ",".join(
        str(c) for c in checkpoints[:2]), "--steps", "5", "--inputs", texts, "--layers", LAYER)
    assert "--against MODEL2" in cli_error(capsys, "sweep", "--checkpoints", ",".join(
        str(c) for c in checkpoints[:2]), "--against", "other/model", "--inputs", texts, "--layers", LAYER)


def _hub_cache(root, repo, revisions):
    """A Hugging Face hub cache holding ``revisions`` ({name: model folder}) of ``repo``."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    for i, (name, folder) in enumerate(revisions.items()):
        commit = f"{i + 1:040x}"
        shutil.copytree(folder, base / "snapshots" / commit)
        (base / "refs" / name).write_text(commit)
    return root


@pytest.mark.slow
def test_hub_revisions_resolve_offline_from_a_local_cache(checkpoints, tmp_path):
    cache = _hub_cache(tmp_path / "hub", "acme/tiny-neox", {"step10": checkpoints[0], "step40": checkpoints[3],
                                                            "main": checkpoints[3]})
    _hub_cache(cache, "acme/tiny-neox-seed2", {"step10": checkpoints[1], "step40": checkpoints[2]})
    texts = _texts(tmp_path)
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    base = [sys.executable, "-m", "actkit", "sweep", "acme/tiny-neox", "--inputs", str(texts), "--layers", LAYER,
            "--methods", "rigid,linear", "--quiet", "--work-dir", str(tmp_path / "w")]
    # one seed against another at each revision (--against MODEL2), both resolved offline
    ok = subprocess.run(base + ["--revisions", "step10,step40", "--against", "acme/tiny-neox-seed2", "--json",
                                str(tmp_path / "h.json"), "--plot", str(tmp_path / "h.png")],
                        env=env, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    result = json.loads((tmp_path / "h.json").read_text())
    assert [(r["step"], r["reference"]) for r in result["comparisons"]] == [(10, "acme/tiny-neox-seed2"),
                                                                             (40, "acme/tiny-neox-seed2")]
    from actkit.store import open_store

    for s in result["stores"]:
        with open_store(s["path"]) as st:
            assert st.provenance["revision"] == s["revision"] and st.provenance["model"] == s["model"]
    assert len(result["stores"]) == 4
    row = result["comparisons"][0]  # step 10 of seed 0 (noise 0.3) vs step 10 of "seed 2" (noise 0.1)
    assert row["linear"] > 0.01
    bad = subprocess.run(base + ["--revisions", "step10,step99", "--json", str(tmp_path / "x.json"), "--plot",
                                 str(tmp_path / "x.png")], env=env, capture_output=True, text=True, timeout=600)
    lines = [x for x in bad.stderr.splitlines() if x.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "step99" in lines[0], bad.stderr
    assert np.isfinite(row["rigid"])


def test_the_figure_draws_the_ica_band_and_ticks_each_step(tmp_path, monkeypatch):
    """The band is ica ± ica_std (with its largest value in the legend, as it may be thinner than
    the line), each of a few steps is a tick, and the final revision is marked."""
    import matplotlib
    from matplotlib.collections import PolyCollection

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from actkit.sweep import plot_sweep

    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    rows = [{"step": s, "revision": f"step{s}", "reference": "step100", "reference_step": 100, "layer": "L",
             "permutation": e + 0.1, "rigid": e + 0.05, "linear": e, "ica": e + 0.06, "ica_std": sd,
             "linear_cka": 1 - e, "ica_efficiency": 0.8, "ica_efficiency_std": 0.1}
            for s, e, sd in ((1, 0.5, 0.02), (10, 0.3, 0.01), (30, 0.1, 0.005))]
    plot_sweep({"model": "m", "against": "final", "comparisons": rows}, tmp_path / "f.png")
    (fig,) = figs
    err, sim, eff = fig.axes
    (band,) = [c for c in err.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(ys.max(), 0.56 + 0.02) and np.isclose(ys.min(), 0.16 - 0.005)
    labels = [t.get_text() for t in err.get_legend().get_texts()]
    assert "ica ± ica_std (largest 0.02)" in labels
    assert [t.get_text() for t in err.get_xticklabels()] == ["1", "10", "30", "100"]
    assert any(isinstance(c, PolyCollection) for c in eff.collections)  # the efficiency's spread too
    flat = sorted(float(ln.get_ydata()[0]) for ln in eff.get_lines()
                  if ln.get_linestyle() in ("--", ":") and ln.get_ydata()[0] == ln.get_ydata()[-1])
    assert flat == [0.0, 1.0] and "1 (dashed): as rigid" in eff.get_ylabel()  # the scale's landmarks
    assert err.get_xscale() == "log" and "lower" in err.get_ylabel() and "higher" in sim.get_ylabel()


def test_sweep_prints_compares_table_and_writes_nothing_unasked(checkpoints, tmp_path, capsys, monkeypatch):
    """Issue 30: without --json/--plot a sweep prints only (no ./sweep.json, ./sweep.png), and
    its rows are the cells ``actkit compare`` prints for the same two stores."""
    texts = _texts(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    work = tmp_path / "w"
    opts = ["--methods", "rigid,linear,ica", "--ica-restarts", "2", "--ica-max-rows", "2000", "--seed", "0",
            "--eval-fraction", "0.25"]
    code, stdout, err = run_cli(capsys, "sweep", "--checkpoints", f"{checkpoints[0]},{checkpoints[3]}", "--inputs",
                                texts, "--layers", LAYER, "--work-dir", work, *opts, "--quiet")
    assert code == 0, err
    assert list(cwd.iterdir()) == [] and "wrote" not in stdout + err
    row = next(line for line in stdout.splitlines() if line.startswith(f"10 vs step-40: {LAYER}"))
    code, cmp_out, err = run_cli(capsys, "compare", work / "step-10.h5", work / "step-40.h5", "--layers", LAYER,
                                 *opts, "--quiet")
    assert code == 0, err
    cmp_row = next(line for line in cmp_out.splitlines() if line.startswith(LAYER))
    assert row.split(LAYER, 1)[1].split() == cmp_row.split(LAYER, 1)[1].split()
    # a reused store with a corrupt block: verify's line, not numbers (the sweep reads it checked)
    import h5py

    path = work / "step-10.h5"
    with h5py.File(path, "r") as f:
        offset = f[f"layers/{LAYER}/data"].id.get_offset() + 7
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x10
    path.write_bytes(bytes(raw))
    verify = cli_error(capsys, "verify", path)
    assert cli_error(capsys, "sweep", "--checkpoints", f"{checkpoints[0]},{checkpoints[3]}", "--inputs", texts,
                     "--layers", LAYER, "--work-dir", work, *opts, "--quiet") == verify


def test_a_not_identifiable_fit_prints_no_digits():
    """The sweep keeps compare's flags (``ica_identifiable``) and prints its cell for them."""
    from actkit._commands.sweep import sweep_table
    from actkit.report import format_table
    from actkit.sweep import _numeric

    d = {"permutation": 0.31, "rigid": 0.30, "linear": 0.25, "ica": 0.3817, "ica_std": 0.003,
         "ica_efficiency": -7.2, "ica_restarts": 3, "ica_identifiable": False, "ica_converged": True,
         "linear_cka": 0.14, "mean_cca": 0.5, "note": "text is dropped"}
    rows = [{"step": 10, "reference": "final", "layer": "L", **_numeric(d)}]
    text = sweep_table({"comparisons": rows})
    assert "not identifiable\u2021" in text and "0.382" not in text and "0.3817" not in text
    assert text.splitlines()[3].split(": L", 1)[1].split() == format_table([d], ["x"]).splitlines()[2][1:].split()
