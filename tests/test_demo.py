"""``actkit demo``: the Table-1 protocol on the shipped zoo, in its reduced (--quick) form."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from actkit.cli import main
from actkit.demo import _QUICK_SAMPLES, COLUMNS, PAPER_TABLE1


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["demo", "--quick", "--out", str(out)])
    return rc, buf.getvalue(), out


def test_demo_quick_fills_every_row_and_column(demo_run):
    rc, stdout, out = demo_run
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["quick"] is True
    from importlib.metadata import version  # the versions the numbers came from

    for lib in ("numpy", "scikit-learn", "torch", "actkit"):
        assert report["versions"][lib] == version(lib)
    names = [r["name"] for r in report["rows"]]
    assert names == ["Pythia-tiny seed0->seed1", "MAE-tiny seed0->seed1",
                     "ResNet-tiny seed0->seed1", "ViT-tiny seed0->seed1"]
    for r in report["rows"]:
        for c in COLUMNS:
            v = r["ours"][c]
            assert v is not None and math.isfinite(v), (r["name"], c, v)
        errs = [r["ours"][m] for m in ("permutation", "rigid", "linear", "ica")]
        assert all(0 < e < 1.5 for e in errs), (r["name"], errs)
        # alignments fitted on paired rows can only do better with a richer class (held out,
        # so up to small over-fitting): rigid <= permutation, linear <= rigid
        assert r["ours"]["rigid"] <= r["ours"]["permutation"] + 1e-9
        assert r["ours"]["linear"] <= r["ours"]["rigid"] + 0.02
        assert 0 <= r["ours"]["linear_cka"] <= 1
        # chance levels beside CKA and CCA (B's rows permuted): far below the statistic
        assert 0 <= r["ours"]["linear_cka_chance"] < r["ours"]["linear_cka"]
        assert r["ours"]["mean_cca_chance"] < r["mean_cca"]
        assert r["n_rows"] > 0 and len(r["stores"]) == 2
        assert r["paper"]["permutation"] == PAPER_TABLE1[r["name"].split("-")[0].lower()]["permutation"]
    # every printed row, and the paper's beside it
    for name in names:
        assert name in stdout
    assert "0.219" in stdout and "0.202 (25%)" in stdout
    assert "[0." in stdout and "[ ]: chance level" in stdout
    assert (out / "table1.png").stat().st_size > 10_000
    assert len(list((out / "stores").glob("*.h5"))) == 8


def test_demo_stores_are_real_extractions(demo_run):
    """The stores the demo wrote are complete actkit stores of the zoo models."""
    import actkit

    _, _, out = demo_run
    report = json.loads((out / "report.json").read_text())
    row = report["rows"][2]  # ResNet layer3: 2x2 positions per image
    A = actkit.open_store(row["stores"][0])
    assert A.provenance["model"].endswith("resnet-tiny-seed0")
    assert A[row["layer"]].shape == (_QUICK_SAMPLES[1] * 4, 64)
    assert np.isfinite(np.asarray(A[row["layer"]])).all()


def test_demo_rerun_reuses_stores(demo_run):
    """Rerunning finds the finished stores: extraction is a no-op (files untouched)."""
    from actkit.demo import _extract, zoo_pairs

    _, _, out = demo_run
    before = {p.name: p.stat().st_mtime_ns for p in (out / "stores").glob("*.h5")}
    pair = zoo_pairs()[2]
    path = _extract(pair.model_a, pair, pair.layer, out / "stores", ".quick",
                    _QUICK_SAMPLES[1], "cpu", False)
    assert path.name in before
    after = {p.name: p.stat().st_mtime_ns for p in (out / "stores").glob("*.h5")}
    assert before == after


def test_demo_unwritable_out_is_a_one_line_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["demo", "--quick", "--out", str(blocker / "sub")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("actkit: error:") and err.count("\n") == 1


def _refused(argv, report, capsys):
    before = report.read_bytes()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("actkit: error:") and err.count("\n") == 1, err
    assert report.read_bytes() == before
    return err


def test_full_demo_refuses_the_quick_demo_s_folder(demo_run, capsys):
    """`actkit demo` pointed at a --quick run's folder would overwrite its report: refused at once."""
    _, _, out = demo_run
    err = _refused(["demo", "--out", str(out)], out / "report.json", capsys)
    assert "quick demo's report" in err


def test_quick_demo_refuses_the_full_demo_s_folder_and_foreign_reports(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "report.json").write_text(json.dumps({"title": "Nelson et al. Table 1 protocol", "quick": False}))
    assert "full demo's report" in _refused(["demo", "--quick", "--out", str(full)], full / "report.json", capsys)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.json").write_text('{"my": "results"}')
    assert "not an actkit demo report" in _refused(["demo", "--quick", "--out", str(mine)], mine / "report.json", capsys)
    assert not (mine / "stores").exists() and not (full / "stores").exists()


def test_quick_and_full_demo_default_to_separate_folders(tmp_path, monkeypatch):
    import actkit.demo

    seen = []

    def fake_run_demo(out, **kwargs):  # records where the command would write, computes nothing
        seen.append((out, kwargs["quick"]))
        raise SystemExit(0)

    monkeypatch.setattr(actkit.demo, "run_demo", fake_run_demo)
    monkeypatch.chdir(tmp_path)
    for argv in (["demo"], ["demo", "--quick"]):
        with pytest.raises(SystemExit):
            main(argv)
    assert seen == [("actkit-demo", False), ("actkit-demo-quick", True)]
