"""The default ICA estimator (best contrast of R random starts, docs/definitions.md "ICA
alignment"): the rows rule's k', the paper's single-fit estimator, the reproducibility
check, forced components, and a printed table that does not depend on the thread count."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from actkit.alignment import compare


def _planted(n=6000, k_heavy=16, k_gauss=16, seed=0, noise=0.0, gauss_sd=0.3):
    """``k_heavy`` heavy-tailed sources of variance >= 2 (the top PCA components) and
    ``k_gauss`` Gaussian directions of SD ``gauss_sd``, mixed by a random rotation on each side."""
    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(n, k_heavy)) ** 3
    S = S / S.std(0) * np.linspace(2.0, 4.0, k_heavy)
    G = gauss_sd * rng.normal(size=(n, k_gauss))
    X = np.hstack([S, G])
    d = X.shape[1]
    A = X @ np.linalg.qr(rng.normal(size=(d, d)))[0]
    B = X @ np.linalg.qr(rng.normal(size=(d, d)))[0]
    B = B + noise * B.std() * rng.normal(size=B.shape)
    return A.astype(np.float32), B.astype(np.float32)


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _contrast(Y):
    """FastICA's logcosh contrast, written out: sum_i (E log cosh y_i - E log cosh nu)^2."""
    x, w = np.polynomial.hermite_e.hermegauss(100)
    g_nu = np.sum(w * np.log(np.cosh(x))) / math.sqrt(2 * math.pi)
    Y = Y / Y.std(0)
    return float(np.sum((np.log(np.cosh(Y)).mean(0) - g_nu) ** 2))


def test_too_few_rows_shrink_k_and_say_so():
    A, B = _planted(n=3000, k_heavy=8, k_gauss=24)
    with pytest.warns(UserWarning, match=r"ICA fitted the leading 10 of 32 whitened components: 500 fit rows"):
        res = compare(A, B, ica_max_rows=500)
    d = res.to_dict()
    assert d["ica_n_components"] == 10 and d["ica_n_components_reason"] == "rows"
    assert any("leading 10 of 32" in note for note in res.notes)
    assert res.alignments["ica"].unmixing_a_.shape == (10, 32)
    # said in the JSON and in the printed summary, not only in a warning
    assert any("leading 10 of 32" in note for note in json.loads(json.dumps(d))["notes"])
    from actkit.report import ica_summary

    assert "ica A -> B: 10 of 32 components (rows rule)" in ica_summary([res], ["A -> B"])[0]
    # enough rows: every component, no note
    full = _quiet(compare, A, B)
    assert full.to_dict()["ica_n_components"] == 32 and full.to_dict()["ica_n_components_reason"] == "all"
    assert not any("leading" in note for note in full.notes)
    # a forced k is kept, with the too-few-rows warning instead
    with pytest.warns(UserWarning, match="500 fit rows for 32 components.*spurious"):
        forced = compare(A, B, ica_max_rows=500, ica_n_components=32)
    assert forced.to_dict()["ica_n_components_reason"] == "requested"


def test_cli_too_few_rows_shrink_k_in_the_table_notes_and_json(tmp_path, capsys):
    from cli_helpers import run_cli

    A, B = _planted(n=3000, k_heavy=8, k_gauss=24)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--quiet",
                             "--ica-max-rows", "500", "--json", tmp_path / "c.json")
    assert code == 0, err
    assert "10 of 32 components (rows rule)" in out
    assert "note: " in err and "ICA fitted the leading 10 of 32 whitened components: 500 fit rows" in err
    d = json.loads((tmp_path / "c.json").read_text())
    assert d["ica_n_components"] == 10 and d["ica_n_components_reason"] == "rows"
    assert any("ICA fitted the leading 10 of 32" in note for note in d["notes"])


def test_planted_top16_keeps_all_sources_and_equals_the_best_contrast_fit():
    """16 heavy-tailed sources in the top 16 PCA components of 64: the default matches all
    16, the halves agree, and the map is the pairing of the best-contrast fit of each side."""
    A, B = _planted(n=8000, k_heavy=16, k_gauss=48, seed=1)
    res = _quiet(compare, A, B, ica_n_components=16)
    d = res.to_dict()
    h = res.alignments["ica"]
    assert d["ica_matched"] == 16 and d["ica_identified_a"] == d["ica_identified_b"] == 16
    assert d["ica_shared_halves_a"] == d["ica_shared_halves_b"] == 16
    assert d["ica_identifiable"] is True
    assert np.abs(res.matched_correlations).min() > 0.99     # every planted source found
    R = d["ica_restarts"]
    assert R == 5 and len(h.restarts_) == R * R
    # the best-contrast start of each side, from the contrasts of the single-start maps'
    # sources on the fit rows (recomputed here with a plain formula)
    fit = ~np.isin(np.arange(A.shape[0]), np.flatnonzero(_eval_mask(res, A.shape[0])))
    best = []
    for X, attr in ((A, "unmixing_a_"), (B, "unmixing_b_")):
        Xf = X[fit].astype(np.float64)
        J = [_contrast((Xf - Xf.mean(0)) @ getattr(m, attr).T) for m in h.classic_]
        best.append(int(np.argmax(J)))
    assert (d["ica_best_restart_a"], d["ica_best_restart_b"]) == tuple(best)
    np.testing.assert_array_equal(h.coef_, h.restarts_[best[0] * R + best[1]].coef_)


def _eval_mask(res, n):
    from actkit.alignment import split

    mask, _ = split(n, None, res.to_dict()["eval_fraction"], res.to_dict()["random_state"])
    return mask


def test_halves_that_disagree_flag_the_estimate_not_identifiable():
    """16 heavy-tailed sources and 16 Gaussian directions at full width: the Gaussian
    subspace has no ICA solution, so the two halves' best fits share only the heavy-tailed
    sources and ica_identifiable is False, with a note."""
    A, B = _planted(n=6000, k_heavy=16, k_gauss=16, seed=2, gauss_sd=1.0)
    with pytest.warns(UserWarning, match="ica_identifiable is false: the two halves"):
        res = compare(A, B)
    d = res.to_dict()
    assert d["ica_n_components"] == 32
    assert 16 <= d["ica_shared_halves"] < 29
    assert d["ica_identifiable"] is False
    assert any(n.startswith("ica_identifiable is false") for n in res.notes)
    table = str(res)                     # the table marks the cell, prints no digits, says why
    cell = table.splitlines()[2]
    assert "not identifiable\u2021" in cell and f"{d['ica']:.3f}" not in cell
    assert "\u2021: ica_identifiable is false" in table and "no digits" in table


def test_unidentifiable_cell_prints_the_same_table_when_rows_move_by_1e6():
    """Where the halves disagree, 1e-6 of relative noise on the rows (another CPU's BLAS,
    another extraction batch size) lands FastICA on other optima: the error moves by more
    than rounding, yet the printed table, which shows no digits of it, stays identical."""
    A, B = _planted(n=6000, k_heavy=16, k_gauss=16, seed=2, gauss_sd=1.0)
    rng = np.random.default_rng(0)
    A2 = A + 1e-6 * A.std(0) * rng.standard_normal(A.shape)
    B2 = B + 1e-6 * B.std(0) * rng.standard_normal(B.shape)
    r1, r2 = _quiet(compare, A, B), _quiet(compare, A2, B2)
    d1, d2 = r1.to_dict(), r2.to_dict()
    assert d1["ica_identifiable"] is False and d2["ica_identifiable"] is False
    assert abs(d1["ica"] - d2["ica"]) > 1e-5        # the optimum moved: digits would not reproduce
    assert str(r1) == str(r2)


def test_ica_classic_is_the_mean_and_se_of_single_start_fits():
    A, B = _planted(n=4000, k_heavy=6, k_gauss=6, seed=3, noise=0.2)
    res = _quiet(compare, A, B, ica_seed=7).to_dict()
    singles = [_quiet(compare, A, B, ica_restarts=1, ica_seed=7 + r).to_dict() for r in range(5)]
    errs = np.array([s["ica"] for s in singles])
    effs = np.array([s["ica_efficiency"] for s in singles])
    assert res["ica_classic"] == pytest.approx(errs.mean(), rel=1e-12)
    assert res["ica_classic_se"] == pytest.approx(errs.std(ddof=1) / math.sqrt(5), rel=1e-9)
    assert res["ica_classic_efficiency"] == pytest.approx(effs.mean(), rel=1e-9)
    assert res["ica_classic_efficiency_se"] == pytest.approx(effs.std(ddof=1) / math.sqrt(5), rel=1e-9)
    assert all(s["ica_std"] is None and s["ica_identifiable"] is None for s in singles)
    # the ICA seed is separate from the split seed
    assert res["random_state"] == 0 and res["ica_seed"] == 7


def test_forced_components_on_a_noisy_copy_map_like_rigid():
    """--ica-n-components below the width: the directions outside the fitted components are
    mapped as the permutation maps them (before, they were dropped: a MiniLM layer against
    a copy with 1% weight noise gave ica 0.276 against permutation 0.009)."""
    rng = np.random.default_rng(4)
    S = rng.laplace(size=(6000, 32)) * np.linspace(1, 3, 32)
    A = (S @ rng.normal(size=(32, 32))).astype(np.float32)
    B = (A + 0.01 * A.std() * rng.normal(size=A.shape)).astype(np.float32)
    res = _quiet(compare, A, B, ica_n_components=8)
    e = res.errors
    assert e["ica"] <= e["rigid"] + 0.01, e
    assert e["ica"] <= e["permutation"] + 0.01, e


def _store(path, X):
    from actkit import open_store
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec("l", X.shape[0], X.shape[1], dtype=str(X.dtype))], n_samples=X.shape[0],
                     request={"test": str(path)}, overwrite=True)
    w.append("l", X)
    w.checkpoint(w.n_samples, force=True)
    w.finalize()
    return open_store(path)["l"]


def test_block_rows_change_no_printed_digit_and_no_bit_of_the_unmixing(tmp_path):
    """compare on two stores read in blocks of the default size, 1000 and 777 rows: the same
    table, the same unmixing bits, and every JSON number equal up to block-sum rounding."""
    from actkit.report import format_table, ica_summary

    A, B = _planted(n=6000, k_heavy=8, k_gauss=8, seed=11, noise=0.3)
    a, b = _store(tmp_path / "a.h5", A), _store(tmp_path / "b.h5", B)
    runs = [_quiet(compare, a, b, block_rows=br, progress=False) for br in (None, 1000, 777)]
    printed = {format_table([r], ["A -> B"]) + "\n".join(ica_summary([r], ["A -> B"])) for r in runs}
    assert len(printed) == 1, printed
    ref = runs[0].to_dict()
    for r in runs[1:]:
        for side in ("unmixing_a_", "unmixing_b_"):
            assert np.array_equal(getattr(r.alignments["ica"], side), getattr(runs[0].alignments["ica"], side))
        d = r.to_dict()
        assert d["notes"] == ref["notes"]
        for key, v in ref.items():
            if isinstance(v, float) and not key.startswith("seconds_"):
                assert d[key] == pytest.approx(v, rel=1e-10, abs=1e-12), key
    # the in-memory rows print the same
    mem = _quiet(compare, A, B, progress=False)
    assert format_table([mem], ["A -> B"]) + "\n".join(ica_summary([mem], ["A -> B"])) in printed


def test_the_json_carries_the_not_converged_and_not_identifiable_notes(tmp_path, capsys):
    """What the table marks (``*``: not converged) and the summary says (identifiable: no)
    is in the JSON's notes too."""
    from cli_helpers import run_cli

    A, B = _planted(n=4000, k_heavy=8, k_gauss=8, seed=12, gauss_sd=1.0)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--quiet",
                             "--ica-max-iter", "3", "--json", tmp_path / "c.json")
    assert code == 0, err
    d = json.loads((tmp_path / "c.json").read_text())
    assert d["ica_converged"] is False
    assert "*" in out and "FastICA did not converge" in out
    assert any(n.startswith("FastICA did not converge within 3 iterations") for n in d["notes"])
    assert d["ica_identifiable"] is False
    assert any(n.startswith("ica_identifiable is false") for n in d["notes"])
    for note in d["notes"]:                     # every note in the JSON is printed too
        assert note in err, note


def test_consensus_method_is_kept_and_reports_the_classic_estimator_too():
    A, B = _planted(n=4000, k_heavy=6, k_gauss=0, seed=5)
    d = _quiet(compare, A, B, ica_method="consensus", ica_restarts=3).to_dict()
    assert d["ica_method"] == "consensus" and d["ica_shared_halves"] is None
    assert d["ica_identified"] == 6 and d["ica_classic"] is not None
    with pytest.raises(ValueError, match="ica_method"):
        compare(A, B, ica_method="median")


def _cli(tmp_path, tag, *flags, threads_env=None):
    """``actkit compare a.npy b.npy`` in a fresh process: (stdout, stderr, JSON without the
    timings)."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)
        if threads_env is not None:
            env[var] = threads_env
    js = tmp_path / f"{tag}.json"
    run = subprocess.run([sys.executable, "-m", "actkit", "compare", str(tmp_path / "a.npy"),
                          str(tmp_path / "b.npy"), "--quiet", "--json", str(js), *flags],
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr
    d = {k: v for k, v in json.loads(js.read_text()).items() if not k.startswith("seconds_")}
    return run.stdout, run.stderr, d


def test_printed_table_and_json_identical_at_one_and_two_threads(tmp_path):
    """The CLI in separate processes at --threads 1, --threads 2 and the thread policy's
    default: the same table, summary, notes and JSON (issue 19: 2 threads printed
    0.419+-0.008 (14%) where 1 thread printed 0.400+-0.007 (29%))."""
    A, B = _planted(n=10000, k_heavy=16, k_gauss=16, seed=6, noise=0.3)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    one = _cli(tmp_path, "t1", "--threads", "1")
    two = _cli(tmp_path, "t2", "--threads", "2")
    default = _cli(tmp_path, "t0", threads_env="2")        # no flag: OMP_NUM_THREADS=2
    assert one[0] == two[0] == default[0]                  # table and ICA summary
    assert one[1] == two[1] == default[1]                  # the note lines
    assert one[2] == two[2] == default[2]                  # the JSON, every key but timings
    d = one[2]
    assert d["ica_n_components"] == 32 and d["ica_restarts"] == 5
    assert "ICA (% eff.)" in one[0] and "best-contrast fit of 5 restarts" in one[0]


def test_fastica_auto_components_apply_the_rows_rule():
    import actkit

    rng = np.random.default_rng(8)
    X = rng.laplace(size=(2000, 64)) @ rng.normal(size=(64, 64))
    with pytest.warns(UserWarning, match="leading 40 of 64 whitened components: 2000 rows support 40"):
        est = actkit.FastICA(n_components="auto", random_state=0, max_iter=50).fit(X)
    assert est.n_components_ == 40
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)     # enough rows: all, no warning
        est = _quiet_convergence(actkit.FastICA(n_components="auto", random_state=0, max_iter=50), X[:, :8])
    assert est.n_components_ == 8


def _quiet_convergence(est, X):
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X)


def test_cli_ica_applies_the_rows_rule_and_warns(tmp_path, capsys):
    import actkit
    from actkit.store import LayerSpec, create_store
    from cli_helpers import run_cli

    rng = np.random.default_rng(9)
    X = (rng.laplace(size=(1000, 32)) @ rng.normal(size=(32, 32))).astype(np.float32)
    path = tmp_path / "s.h5"
    w = create_store(path, [LayerSpec("l", 1000, 32, dtype="float32")], n_samples=1000,
                     request={"test": "rows"}, overwrite=True)
    w.append("l", X)
    w.checkpoint(w.n_samples, force=True)
    w.finalize()
    code, out, err = run_cli(capsys, "ica", path, "--layer", "l", "--out", tmp_path / "o.h5", "--quiet")
    assert code == 0, err
    assert "warning: FastICA on the leading 20 of 32 whitened components: 1000 rows support 20" in err
    assert actkit.open_store(tmp_path / "o.h5").params["unmixing"].shape == (20, 32)
    code, out, err = run_cli(capsys, "ica", path, "--layer", "l", "--out", tmp_path / "f.h5", "--quiet",
                             "--n-components", "32", "--max-iter", "20")
    assert code == 0, err
    assert "warning: 1000 fit rows for 32 components" in err and "spurious" in err
    assert actkit.open_store(tmp_path / "f.h5").params["unmixing"].shape == (32, 32)


def test_cli_ica_method_and_seed_flags(tmp_path, capsys):
    from cli_helpers import run_cli

    A, B = _planted(n=3000, k_heavy=6, k_gauss=0, seed=10, noise=0.2)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--quiet",
                             "--ica-method", "consensus", "--ica-seed", "3", "--ica-restarts", "2",
                             "--json", tmp_path / "c.json")
    assert code == 0, err
    d = json.loads((tmp_path / "c.json").read_text())
    assert d["ica_method"] == "consensus" and d["ica_seed"] == 3 and d["random_state"] == 0
    code, out, err = run_cli(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--quiet",
                             "--json", tmp_path / "b.json")
    assert code == 0, err
    d = json.loads((tmp_path / "b.json").read_text())
    assert d["ica_method"] == "best" and d["ica_restarts"] == 5 and d["ica_identifiable"] is True
    assert "\u2021" not in out
    assert "6 sources matched" in out and "the rest mapped" not in out


def test_ica_below_rigid_carries_a_note():
    """The ICA map rescales (A's whitening, B's mixing), rigid does not: on B = 2 A Q the ica
    error is ~0 below rigid, the efficiency exceeds 100% and a note says why (seen on real
    MiniLM layers 4 -> 5, per token: efficiency ~300%); a Gaussian pair has no such note."""
    rng = np.random.default_rng(7)
    A = (rng.laplace(size=(4000, 8)) @ rng.normal(size=(8, 8))).astype(np.float32)
    Q = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    res = _quiet(compare, A, (2.0 * A @ Q).astype(np.float32), ica_restarts=2)
    assert res.errors["ica"] < 0.01 < res.errors["rigid"] < res.errors["permutation"], res.errors
    assert res.ica_efficiency > 1
    assert any("ica is below rigid" in n for n in res.notes), res.notes
    assert any("ica is below rigid" in n for n in res.to_dict()["notes"])
    G = rng.normal(size=(4000, 8)).astype(np.float32)
    res = _quiet(compare, G, (G @ Q + 0.1 * rng.normal(size=G.shape)).astype(np.float32),
                 ica_restarts=2)
    assert res.errors["ica"] > res.errors["rigid"], res.errors
    assert not any("ica is below rigid" in n for n in res.notes), res.notes
