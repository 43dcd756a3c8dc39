"""compare's closed-form columns carry their conditions (issue 19): the rows rule of the rigid
and linear maps, the GCV ridge, the chance levels of CKA and mean CCA, the same digits at 1
and 2 threads and under 1e-6 relative noise, the notes in the JSON, progress in a log, and
plots that say which cut of the sources they draw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from scipy.stats import ortho_group

from actkit import compare
from actkit.alignment._maps import gcv_alpha
from actkit.alignment._table import ica_cell
from actkit.metrics import linear_cka, mean_cca

CLOSED = ("permutation", "rigid", "linear")


def _quiet_compare(A, B, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compare(A, B, methods=kw.pop("methods", CLOSED), **kw)


def _related(n, d, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    return A, A @ rng.normal(size=(d, d)) / np.sqrt(d) + 0.5 * rng.normal(size=(n, d))


# --- too few fit rows --------------------------------------------------------------------

def test_too_few_fit_rows_for_rigid_and_linear_are_noted_in_the_table_and_the_json():
    A, B = _related(200, 64)                 # 160 fit rows: rigid needs 320, linear 640
    with pytest.warns(UserWarning, match="the linear map had 160 fit rows"):
        res = compare(A, B, methods=CLOSED)
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["rigid_fit_rows_ok"] is False and d["linear_fit_rows_ok"] is False
    assert (d["rigid_min_fit_rows"], d["linear_min_fit_rows"]) == (320, 640)
    assert any("the rigid map had 160 fit rows" in x for x in d["notes"])
    assert any("the linear map had 160 fit rows" in x for x in d["notes"])
    table = str(res)
    assert "\u2020" in table.splitlines()[2] and "too few fit rows" in table


def test_enough_fit_rows_give_no_note():
    A, B = _related(1000, 16)                 # 800 fit rows: rigid needs 80, linear 160
    res = _quiet_compare(A, B)
    d = res.to_dict()
    assert d["rigid_fit_rows_ok"] and d["linear_fit_rows_ok"]
    assert not any("fit rows" in x for x in d["notes"])
    assert "\u2020" not in str(res)


def _gcv_brute(A, B, alpha):
    """GCV of a ridge with intercept, from the rows: hat matrix and residuals explicitly."""
    n = A.shape[0]
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    H = Ac @ np.linalg.solve(Ac.T @ Ac + alpha * np.eye(A.shape[1]), Ac.T)
    rss = np.sum((Bc - H @ Bc) ** 2)
    df = np.trace(H) + 1.0
    return (rss / n) / (1 - df / n) ** 2


def test_gcv_alpha_minimises_the_explicit_gcv_of_the_rows():
    A, B = _related(120, 40, seed=3)
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    a = gcv_alpha(Ac.T @ Ac, Ac.T @ Bc, Bc.T @ Bc, A.shape[0])
    top = np.linalg.eigvalsh(Ac.T @ Ac)[-1]
    grid = [0.0, *(top * 10.0 ** np.linspace(-12.0, 2.0, 57))]
    brute = [_gcv_brute(A, B, x) for x in grid]
    assert a == pytest.approx(grid[int(np.argmin(brute))], rel=1e-12)
    assert a > 0                               # 120 rows, 40 features, noisy: a ridge helps


def test_gcv_ridge_rescues_the_linear_map_on_few_rows_and_is_recorded():
    A, B = _related(150, 100)        # 120 fit rows for 100 features: least squares overfits
    plain = _quiet_compare(A, B).to_dict()
    gcv = _quiet_compare(A, B, alpha="gcv").to_dict()
    assert gcv["ridge_alpha_method"] == "gcv" and gcv["ridge_alpha"] > 0
    assert plain["ridge_alpha"] == 0.0
    assert gcv["linear"] < 0.8 * plain["linear"]


# --- chance levels -----------------------------------------------------------------------

def test_chance_levels_are_near_the_statistic_for_independent_data():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(2000, 384)), rng.normal(size=(2000, 384))
    d = _quiet_compare(A, B).to_dict()
    assert d["mean_cca"] > 0.3 and d["linear_cka"] > 0.1           # in-sample: not near 0
    assert d["mean_cca_chance"] == pytest.approx(d["mean_cca"], abs=0.01)
    assert d["linear_cka_chance"] == pytest.approx(d["linear_cka"], abs=0.01)
    assert "[0." in str(_quiet_compare(A[:, :8], B[:, :8]))


def test_chance_levels_are_far_below_related_data():
    A, B = _related(2000, 32)
    d = _quiet_compare(A, B).to_dict()
    assert d["mean_cca"] - d["mean_cca_chance"] > 0.3
    assert d["linear_cka"] - d["linear_cka_chance"] > 0.3


def test_chance_is_the_statistic_of_b_with_its_rows_permuted_seeded():
    A, B = _related(600, 12, seed=4)
    d = _quiet_compare(A, B, random_state=7).to_dict()
    perm = np.random.default_rng([7, 0]).permutation(600)     # one window holds every row
    assert d["linear_cka_chance"] == pytest.approx(linear_cka(A, B[perm]), rel=1e-10)
    assert d["mean_cca_chance"] == pytest.approx(mean_cca(A, B[perm]), rel=1e-10)
    other = _quiet_compare(A, B, random_state=8).to_dict()
    assert other["mean_cca_chance"] != d["mean_cca_chance"]
    small = _quiet_compare(A, B, random_state=7, block_rows=50).to_dict()
    for key in ("linear_cka_chance", "mean_cca_chance", "mean_cca", "linear"):
        assert small[key] == pytest.approx(d[key], rel=1e-12), key     # block sums: rounding


def _positional(seed=0, G=60, d=16):
    """Per-token rows of G input samples of 3 lengths: a token's row holds its position's
    vector (shared by A and B, as [CLS] or position embeddings are) plus noise of its own."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([4, 6, 9], size=G)
    groups = np.repeat(np.arange(G), lengths)
    position = np.concatenate([np.arange(k) for k in lengths])
    pos = rng.normal(size=(9, d))
    A = 2 * pos[position] + rng.normal(size=(groups.size, d))
    B = 2 * pos[position] @ rng.normal(size=(d, d)) / np.sqrt(d) + rng.normal(size=(groups.size, d))
    return A, B, groups


def test_chance_re_pairs_whole_input_samples_of_equal_length_as_the_p_values_do():
    """Issue 39: one chance level, by input sample. The bracket is the statistic with B's
    input samples re-paired (whole samples, equal lengths): it keeps tokens aligned by
    position, as the permutation null does, where a row shuffle would not."""
    A, B, groups = _positional()
    d = _quiet_compare(A, B, groups=groups, random_state=3).to_dict()
    # brute force: sample s of A meets sample pi(s) of B of the same length, row by row
    rng = np.random.default_rng([3, 0])
    _, inv = np.unique(groups, return_inverse=True)
    lengths = np.bincount(inv)
    perm = np.arange(lengths.size)
    for k in np.unique(lengths):
        idx = np.flatnonzero(lengths == k)
        perm[idx] = idx[rng.permutation(idx.size)]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    r = np.concatenate([np.arange(starts[perm[s]], starts[perm[s]] + lengths[s]) for s in range(lengths.size)])
    assert d["linear_cka_chance"] == pytest.approx(linear_cka(A, B[r]), rel=1e-10)
    assert d["mean_cca_chance"] == pytest.approx(mean_cca(A, B[r]), rel=1e-10)
    # one draw of the permutation test's null: within its spread, far above a row shuffle
    res = _quiet_compare(A, B, groups=groups, random_state=3, permutations=99).to_dict()
    assert abs(d["linear_cka_chance"] - res["linear_cka_null_mean"]) < 4 * res["linear_cka_null_sd"]
    shuffled = linear_cka(A, B[np.random.default_rng(0).permutation(len(B))])
    assert d["linear_cka_chance"] > shuffled + 0.2
    assert "re-paired" in str(_quiet_compare(A, B, groups=groups))


def test_chance_with_one_row_per_sample_is_a_row_permutation():
    """Pooled rows (one row per sample): re-pairing samples is permuting rows."""
    A, B = _related(300, 6, seed=2)
    d = _quiet_compare(A, B, random_state=5).to_dict()
    g = _quiet_compare(A, B, random_state=5, groups=np.arange(300)).to_dict()
    perm = np.random.default_rng([5, 0]).permutation(300)
    assert d["linear_cka_chance"] == pytest.approx(linear_cka(A, B[perm]), rel=1e-10)
    # one row per sample given as groups: the same draw
    assert g["linear_cka_chance"] == pytest.approx(d["linear_cka_chance"], rel=1e-12)


# --- the same digits: threads and rounding -----------------------------------------------

_KEYS = ("permutation", "rigid", "linear", "linear_cka", "linear_cka_debiased", "mean_cca",
         "linear_cka_chance", "mean_cca_chance")

_SCRIPT = """
import warnings, numpy as np
from actkit import compare
rng = np.random.default_rng(0)
A = (rng.normal(size=(6000, 96)) @ rng.normal(size=(96, 96)) + 3).astype(np.float32)
B = (np.tanh(A @ rng.normal(size=(96, 96)) / 20) + 0.3 * rng.normal(size=(6000, 96))).astype(np.float32)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    d = compare(A, B, methods=("permutation", "rigid", "linear")).to_dict()
print(" ".join(float(d[k]).hex() for k in %r))
""" % (_KEYS,)


def test_closed_form_columns_are_bitwise_equal_at_1_and_2_threads():
    outs = []
    for t in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t)
        outs.append(subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True,
                                   capture_output=True, text=True).stdout.split())
    assert len(outs[0]) == len(_KEYS)
    assert outs[0] == outs[1]


_TRANSFORM_SCRIPT = """
import hashlib, numpy as np
from actkit.alignment import LinearAlignment, RigidAlignment
rng = np.random.default_rng(0)
A = (rng.normal(size=(6000, 96)) @ rng.normal(size=(96, 96)) + 3).astype(np.float32)
B = (np.tanh(A @ rng.normal(size=(96, 96)) / 20) + 0.3 * rng.normal(size=(6000, 96))).astype(np.float32)
for cls in (RigidAlignment, LinearAlignment):
    h = cls().fit(A[:4000], B[:4000], progress=False)
    print(hashlib.sha256(h.transform(A[4000:]).tobytes()).hexdigest(), h.score(A[4000:], B[4000:]).hex())
"""


def test_transform_and_score_are_bitwise_equal_at_1_and_2_threads():
    # OpenBLAS's 2-thread float32 GEMM gave other bits in the last place of h(a) (and of the
    # score, ~1e-9 relative); each fixed block now runs at one BLAS thread
    outs = []
    for t in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t)
        outs.append(subprocess.run([sys.executable, "-c", _TRANSFORM_SCRIPT], env=env, check=True,
                                   capture_output=True, text=True).stdout.split())
    assert len(outs[0]) == 4
    assert outs[0] == outs[1]


def _weak_directions(seed=0):
    """float32 rows with 16 of 64 directions at 1e-9 of the variance, around a mean of 5:
    float32 sums of their products used to decide their canonical correlations."""
    rng = np.random.default_rng(seed)
    n, D = 3000, 64
    sd = np.r_[np.ones(48), np.full(16, 3e-5)]
    A = ((rng.normal(size=(n, D)) * sd) @ ortho_group.rvs(D, random_state=2) + 5).astype(np.float32)
    B = (np.tanh(A @ rng.normal(size=(D, D)) / 8) + 0.5 * rng.normal(size=(n, D))).astype(np.float32)
    return A, B


def test_closed_form_columns_are_stable_under_1e_6_relative_noise_on_the_rows():
    A, B = _weak_directions()
    base = _quiet_compare(A, B).to_dict()
    q = np.random.default_rng(100)
    A2 = (A * (1 + 1e-6 * q.normal(size=A.shape))).astype(np.float32)
    B2 = (B * (1 + 1e-6 * q.normal(size=B.shape))).astype(np.float32)
    moved = _quiet_compare(A2, B2).to_dict()
    for key in _KEYS:      # actkit 0.1: mean CCA moved by 7.4e-3 and linear by 4.5e-3 here
        assert moved[key] == pytest.approx(base[key], abs=1e-5), key
    assert base["rank_cut"] == 1e-6
    assert mean_cca(A2, B2) == pytest.approx(mean_cca(A, B), abs=1e-5)    # the metrics API too
    assert mean_cca(A, B) == pytest.approx(base["mean_cca"], abs=1e-12)


# --- notes, marks, progress, plots -------------------------------------------------------

def test_the_json_keeps_every_note_of_the_result():
    A, B = _related(200, 64)
    res = _quiet_compare(A, B)
    assert len(res.notes) >= 2
    assert json.loads(json.dumps(res.to_dict()))["notes"] == res.notes


def test_an_efficiency_never_prints_as_minus_zero():
    cell = ica_cell({"ica": 0.3, "ica_efficiency": -0.004, "permutation": 0.3, "rigid": 0.2,
                     "ica_restarts": 3})
    assert cell == "0.300 (0%)"
    assert ica_cell({"ica": 0.3, "ica_efficiency": -0.3}) == "0.300 (-30%)"


def test_progress_goes_to_a_log_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    import actkit._progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    A, B = _related(3000, 8)
    _quiet_compare(A, B, block_rows=500)
    err = capsys.readouterr().err
    assert "actkit: compare: moments: " in err and "of 3,000 rows) after" in err
    assert "actkit: compare: chance levels: 100%" in err
    _quiet_compare(A, B, block_rows=500, progress=False)
    assert capsys.readouterr().err == ""


def test_a_long_step_without_rows_logs_a_heartbeat(monkeypatch, capsys):
    import actkit._progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.02)
    with progress.heartbeat("compare: fitting the ica map", None):
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert "actkit: compare: fitting the ica map: still running after 0m00s" in err
    with progress.heartbeat("quiet", False):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_the_plot_says_which_cut_of_the_sources_it_draws():
    import matplotlib
    from actkit.report import plot_captions, plot_compare

    rng = np.random.default_rng(1)
    S = rng.laplace(size=(1500, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = compare(S, S @ rng.normal(size=(8, 8)), ica_restarts=1)
    fig = plot_compare([res], ["x -> y"], max_components=4)
    titles = [ax.get_title() for ax in fig.axes]
    assert any("first 4 of 8 sources (a diagonal cut)" in t for t in titles)
    lines = plot_captions([res], ["x -> y"], max_components=4)
    assert lines and lines[0].startswith("plot x -> y: matched-source |corr| of the first 4 of 8")
    full = plot_captions([res], ["x -> y"])
    assert "matched-source |corr| of all 8 sources" in full[0]


def test_cli_json_notes_gcv_and_a_bad_alpha(tmp_path, capsys):
    from cli_helpers import run_cli
    from test_cli_compare import _store

    rng = np.random.default_rng(0)
    n, d = 80, 32
    index = np.stack([np.repeat(np.arange(40), 2), np.tile(np.arange(2), 40)], 1)
    X = rng.normal(size=(n, d))
    a = _store(tmp_path / "a.h5", {"l": X}, index)
    b = _store(tmp_path / "b.h5", {"l": X @ rng.normal(size=(d, d)) + rng.normal(size=(n, d))}, index)
    js = tmp_path / "out.json"
    code, out, err = run_cli(capsys, "compare", a, b, "--methods", "permutation,rigid,linear",
                             "--alpha", "gcv", "--json", js, "--quiet")
    assert code == 0
    data = json.loads(js.read_text())
    assert data["ridge_alpha_method"] == "gcv" and data["ridge_alpha"] > 0
    assert any("the rigid map had" in x for x in data["notes"])
    assert "\u2020" in out and "the rigid map had" in err
    with pytest.raises(SystemExit) as exc:          # argparse's usage error, as every flag
        run_cli(capsys, "compare", a, b, "--alpha", "-1")
    assert exc.value.code == 2
    assert "argument --alpha: must be a number >= 0 or 'gcv'" in capsys.readouterr().err


def test_figures_keep_a_session_s_matplotlib_backend():
    """A notebook's pyplot (here on the svg backend) stays as it is when actkit draws; without
    one, actkit draws on Agg without importing pyplot before a figure is asked for."""
    code = ("import sys, matplotlib\n"
            "import actkit.report as r\n"
            "assert 'matplotlib.pyplot' not in sys.modules\n"
            "matplotlib.use('svg')\n"
            "import matplotlib.pyplot as plt\n"
            "assert r.pyplot() is plt\n"
            "print(matplotlib.get_backend())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "svg"
    fresh = subprocess.run([sys.executable, "-c", "import actkit.report as r, matplotlib\nr.pyplot()\n"
                            "print(matplotlib.get_backend())"], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.strip().lower() == "agg"
