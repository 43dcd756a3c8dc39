"""Permutations and bootstrap of the row-based measures from their pairwise structures
(issue 42, "Resampling the row-based measures"; issue 39, "Permutations with power on real
text", "No silent hours"): the structures give the values of recomputing the measure from the
re-paired or resampled rows, the copies of a bootstrap resample no longer bias it, the row
sample lets a permutation move every input sample, and the p-values are calibrated."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import scipy.stats
import torch

import actkit
from actkit._threads import use_threads
from actkit.inference import infer_rows, row_measure
from actkit._groups import SampleGroups
from actkit.measures import structure_for
from actkit._groups import bootstrap_draws
from actkit.measures import get_measure, sample_by_groups

STRUCTURED = [("rsa", {"method": "spearman"}), ("rsa", {"method": "pearson"}), ("mutual_knn", {"k": 5}),
              ("jaccard_knn", {"k": 5}), ("cknna", {"k": 5}), ("dcor", {"unbiased": False}),
              ("dcor", {"unbiased": True}), ("rbf_cka", {"sigma": 0.8})]


def _texts(G=30, seed=0, related=True, lengths=(2, 6), d=(7, 5)):
    """Rows of ``G`` texts of varied length (in sample order): a per-text effect and a
    per-token latent; B follows A's latent (``related``) or its own."""
    rng = np.random.default_rng(seed)
    sid = np.repeat(np.arange(G), rng.integers(*lengths, G))
    n = sid.size
    za = rng.normal(size=(G, 3))[sid] + rng.normal(size=(n, 3))
    zb = za if related else rng.normal(size=(G, 3))[sid] + rng.normal(size=(n, 3))
    A = za @ rng.normal(size=(3, d[0])) + 0.5 * rng.normal(size=(n, d[0]))
    B = zb @ rng.normal(size=(3, d[1])) + 0.5 * rng.normal(size=(n, d[1]))
    return A, B, sid


def _records(A, B, sid, chosen, **kw):
    measures = {f"{n}{i}": (row_measure(n, p), "similarity") for i, (n, p) in enumerate(chosen)}
    return infer_rows(torch.from_numpy(A), torch.from_numpy(B), sid, measures, progress=False, **kw)


def test_permutations_from_the_structures_equal_recomputing_every_null_value():
    """Each permutation re-pairs whole input samples (of equal length) by re-indexing the
    structure; the p-value and null equal those of recomputing the measure from the
    re-paired rows, for every row-based measure; dcor's and rbf_cka's bootstrap (V-statistics,
    copies included by definition) equal recomputing too."""
    A, B, sid = _texts(G=24, seed=1)
    fast = _records(A, B, sid, STRUCTURED, permutations=9, bootstrap=7, random_state=3)
    slow = _records(A, B, sid, STRUCTURED, permutations=9, bootstrap=7, random_state=3, structures=False)
    for key in fast:
        assert fast[key].p == slow[key].p
        assert fast[key].null_mean == pytest.approx(slow[key].null_mean, abs=1e-12)
        assert fast[key].null_sd == pytest.approx(slow[key].null_sd, abs=1e-12)
        if key.startswith(("dcor", "rbf_cka")):
            # 1e-9: dcor recomputed gives a row and its copy a distance of ~1e-8, not 0
            # (torch.cdist's matrix-product form: sqrt of a rounding error)
            assert fast[key].ci_low == pytest.approx(slow[key].ci_low, abs=1e-9)
            assert fast[key].ci_high == pytest.approx(slow[key].ci_high, abs=1e-9)


def test_a_resample_that_draws_each_sample_at_most_once_equals_the_measure_on_its_rows():
    """Where no sample is drawn twice the definitions coincide: the structure's value is the
    measure recomputed on the drawn samples' rows."""
    A, B, sid = _texts(G=30, seed=2)
    a, b, layout = torch.from_numpy(A), torch.from_numpy(B), SampleGroups(sid)
    rng = np.random.default_rng(0)
    for name, params in STRUCTURED:
        st = structure_for(name, params, a, b, layout, permutations=False, bootstrap=True)
        if not hasattr(st, "resampled"):
            continue
        for _ in range(3):
            w = (rng.random(layout.G) < 0.6).astype(float)
            rows = torch.as_tensor(np.flatnonzero(w[sid] > 0))
            assert st.resampled(w) == pytest.approx(get_measure(name).compute(a[rows], b[rows], **params),
                                                    abs=1e-12), name


def _expanded(w, sid):
    """The resampled rows: original row, and the drawn copy (draw id) of its sample."""
    rows, draw = [], []
    for s in np.flatnonzero(w):
        for c in range(int(w[s])):
            r = np.flatnonzero(sid == s)
            rows.append(r)
            draw.append(np.full(r.size, 1000 * s + c))
    return np.concatenate(rows), np.concatenate(draw)


def _rdm(X):
    Xc = X - X.mean(1, keepdims=True)
    Xn = Xc / np.linalg.norm(Xc, axis=1, keepdims=True)
    return 1 - Xn @ Xn.T


def _rsa_reference(A, B, sid, w, method):
    """Brute force: the RDMs of the resampled rows, leaving out the pairs of a row with its
    copies and of two copies of one sample (rsatoolbox's rule for repeated patterns)."""
    rows, draw = _expanded(w, sid)
    iu, ju = np.triu_indices(rows.size, 1)
    keep = ~((sid[rows][iu] == sid[rows][ju]) & (draw[iu] != draw[ju]))
    # the RDM of the rows, then of their copies: a copy's dissimilarities are its row's, the
    # same floats (a product of the expanded rows may round the copies apart by an ulp, and
    # Spearman would rank those false ties)
    da = _rdm(A)[np.ix_(rows, rows)][iu, ju][keep]
    db = _rdm(B)[np.ix_(rows, rows)][iu, ju][keep]
    f = scipy.stats.spearmanr if method == "spearman" else scipy.stats.pearsonr
    return f(da, db)[0]


def _knn_reference(A, B, sid, w, k, kind):
    """Brute force: each resampled row's k nearest (cosine) among the resampled rows, never
    a copy of itself or a row of another copy of its sample; overlaps of the original rows
    they are (copies are tied)."""
    rows, draw = _expanded(w, sid)
    scores = []
    for X in (A, B):
        Xn = X[rows] / np.linalg.norm(X[rows], axis=1, keepdims=True)
        S = Xn @ Xn.T
        S[(sid[rows][:, None] == sid[rows][None, :]) & (draw[:, None] != draw[None, :])] = -np.inf
        np.fill_diagonal(S, -np.inf)
        scores.append([Counter(rows[np.argsort(-S[i], kind="stable")[:k]]) for i in range(rows.size)])
    c = np.array([sum((x & y).values()) for x, y in zip(*scores)], dtype=float)
    return float(np.mean(c / k if kind == "mutual_knn" else c / (2 * k - c)))


def _hsic_dense(K, L):
    """platonic-rep's ``hsic_unbiased`` of two masked kernels (zero diagonals)."""
    n = K.shape[0]
    v = np.sum(K * L.T) + K.sum() * L.sum() / ((n - 1) * (n - 2)) - 2 * K.sum(0) @ L.sum(1) / (n - 2)
    return v / (n * (n - 3))


def _cknna_reference(A, B, sid, w, k):
    """Brute force: CKNNA of the resampled rows, each row's k nearest (cosine) never a copy
    of itself or a row of another copy of its sample, tied copies taken in copy order."""
    rows, draw = _expanded(w, sid)
    kernels, masks = [], []
    for X in (A, B):
        Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
        K = (Xn @ Xn.T)[rows][:, rows]                      # copies exactly tied
        S = K.copy()
        S[(sid[rows][:, None] == sid[rows][None, :]) & (draw[:, None] != draw[None, :])] = -np.inf
        np.fill_diagonal(S, -np.inf)
        M = np.zeros_like(K)
        np.put_along_axis(M, np.argsort(-S, axis=1, kind="stable")[:, :k], 1.0, axis=1)
        kernels.append(K)
        masks.append(M)
    (K, L), (MA, MB) = kernels, masks
    kl = _hsic_dense(K * MA * MB, L * MA * MB)
    return kl / (np.sqrt(_hsic_dense(K * MA, K * MA) * _hsic_dense(L * MB, L * MB)) + 1e-6)


@pytest.mark.parametrize("name,params,ties", [("rsa", {"method": "spearman"}, False),
                                              ("rsa", {"method": "spearman"}, True),
                                              ("rsa", {"method": "pearson"}, False),
                                              ("mutual_knn", {"k": 4}, False), ("jaccard_knn", {"k": 4}, False),
                                              ("cknna", {"k": 4}, False)])
def test_a_bootstrap_resample_never_pairs_a_sample_with_its_copy(name, params, ties):
    """A sample drawn twice is two distinct input samples: no row is its copy's neighbour,
    and the pairs of a row with its copies (and of two copies of one sample) are left out
    of the RDMs; the structure's value equals that brute force on the resampled rows (also
    with tied RDM entries: two identical rows, as repeated [CLS] tokens give)."""
    A, B, sid = _texts(G=16, seed=3)
    if ties:
        A[-1], B[-1] = A[0], B[0]
    st = structure_for(name, params, torch.from_numpy(A), torch.from_numpy(B), SampleGroups(sid),
                       permutations=False, bootstrap=True)
    for w in bootstrap_draws(16, 4, 5):
        assert w.max() >= 2
        if name == "rsa":
            ref = _rsa_reference(A, B, sid, w, params["method"])
        elif name == "cknna":
            ref = _cknna_reference(A, B, sid, w, params["k"])
        else:
            ref = _knn_reference(A, B, sid, w, params["k"], name)
        assert st.resampled(w) == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize("name", ["mutual_knn", "jaccard_knn", "cknna"])
def test_copies_no_longer_bias_the_bootstrap(name):
    """The designed case of the bias documented before (docs/compare.md): rows each their own
    input sample. Recomputed from the resampled rows, a row's copy is its nearest neighbour
    in both spaces: every resample lies above the observed value. From the structures the
    resamples straddle it."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(120, 4))
    A = z @ rng.normal(size=(4, 10)) + rng.normal(size=(120, 10))
    B = z @ rng.normal(size=(4, 8)) + 2 * rng.normal(size=(120, 8))
    sid = np.arange(120)
    params = {"k": 5}
    kw = dict(bootstrap=60, random_state=0, interval="percentile")
    old = _records(A, B, sid, [(name, params)], structures=False, **kw)[f"{name}0"]
    new = _records(A, B, sid, [(name, params)], **kw)[f"{name}0"]
    assert old.ci_low > old.value                           # the old bias: all above
    assert new.ci_low < new.value < new.ci_high


def test_the_row_sample_takes_equal_rows_from_as_many_texts_as_fit():
    groups = np.repeat(np.arange(200), np.random.default_rng(0).integers(3, 40, 200))
    rows = sample_by_groups(groups.size, groups, 1000, random_state=0)
    per = np.bincount(groups[rows])
    per = per[per > 0]
    assert rows.size <= 1000 and np.unique(per).size == 1            # equal rows per text
    r = per[0]
    assert per.size == min(np.sum(np.bincount(groups) >= r), 1000 // r)
    assert rows.size >= 1000 - max(r, 1000 // 200) * 2                # nearly all the budget
    assert np.array_equal(rows, sample_by_groups(groups.size, groups, 1000, random_state=0))
    assert not np.array_equal(rows, sample_by_groups(groups.size, groups, 1000, random_state=1))


ALL = ["rsa", "mutual_knn", "cknna", "jaccard_knn", "rbf_cka", "dcor"]


def test_every_row_measure_reaches_the_smallest_p_on_related_texts_of_varied_length():
    """Per-token rows of 150 texts of 3 to 40 tokens, B a function of A plus noise: with a
    row sample of 600 rows every sampled text can be re-paired (permutation_exchangeable 1)
    and each row-based measure reaches p = 1 / 20 with 19 permutations."""
    A, B, g = _texts(G=150, seed=4, lengths=(3, 41), d=(12, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=g, methods=("rigid",), measures=ALL, permutations=19,
                             max_rows=600, progress=False)
    d = res.to_dict()
    for name in ALL:
        assert d[f"{name}_p"] == 1 / 20, name
        assert d[f"{name}_permutation_exchangeable"] == 1.0
    assert not any("conservative" in note for note in res.notes)


def test_p_values_stay_uniform_on_independent_texts():
    """Independent A and B, each with a per-text effect (rows of one text dependent): over 80
    seeded pairs the p-values of every row-based measure are uniform on {1/20, ..., 1}."""
    chosen = [("rsa", {"method": "spearman"}), ("mutual_knn", {"k": 5}), ("jaccard_knn", {"k": 5}),
              ("cknna", {"k": 5}), ("rbf_cka", {"sigma": 0.8}), ("dcor", {"unbiased": False})]
    ps = []
    for seed in range(80):
        A, B, g = _texts(G=40, seed=100 + seed, related=False, lengths=(3, 12))
        rows = sample_by_groups(g.size, g, 160, seed)
        rec = _records(A[rows], B[rows], g[rows], chosen, permutations=19, random_state=seed)
        ps.append([r.p for r in rec.values()])
    ps = np.array(ps)
    assert np.all(np.mean(ps <= 0.05, axis=0) <= 0.11)      # binomial(80, 0.05): P(> 8) < 0.01
    assert np.all(np.abs(ps.mean(axis=0) - 0.525) < 0.09)    # mean of uniform {1/20..1}: 0.525


def test_one_and_two_threads_give_the_same_digits():
    A, B, sid = _texts(G=30, seed=5)
    out = []
    for t in (1, 2):
        with use_threads(t):
            rec = _records(A, B, sid, STRUCTURED, permutations=8, bootstrap=20, random_state=1)
        out.append([(r.p, r.null_mean, r.ci_low, r.ci_high) for r in rec.values()])
    assert out[0] == out[1]


def test_compare_on_a_torch_device_gives_the_same_digits_at_one_and_two_threads():
    """Through ``actkit.compare(device=...)`` (the structures built from torch tensors on the
    device; CPU here): every row measure's p-value, null and interval, at 1 and 2 threads."""
    A, B, g = _texts(G=40, seed=8)
    names = ["rsa", "mutual_knn", "jaccard_knn", "cknna", "dcor", "rbf_cka"]
    out = []
    for threads in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = actkit.compare(A, B, groups=g, methods=("rigid",), measures=names, permutations=7, bootstrap=9,
                               confidence=0.5, device=torch.device("cpu"), threads=threads,
                               progress=False).to_dict()
        out.append({f"{m}_{k}": d[f"{m}_{k}"] for m in names for k in ("p", "null_mean", "ci_low", "ci_high")})
    assert all(v is not None for v in out[0].values())
    assert out[0] == out[1]


def test_compare_prints_its_estimate_before_resampling(capsys):
    """No silent hours: before the resamples, the estimate of their time and the --max-rows
    that would take about three minutes, on stderr."""
    A, B, g = _texts(G=60, seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actkit.compare(A, B, groups=g, methods=("rigid",), measures=["rsa", "mutual_knn"], permutations=5,
                       bootstrap=40)
    err = capsys.readouterr().err
    assert "resampling rsa, mutual_knn on" in err and "(5 permutations + 40 bootstrap resamples): about" in err


def test_a_long_estimate_names_the_max_rows_that_fits(capsys, monkeypatch):
    """When the estimate is over TARGET_SECONDS it names the --max-rows that would fit
    (the cost grows with the square of the rows)."""
    import actkit.inference._rows as rows_mod

    monkeypatch.setattr(rows_mod, "TARGET_SECONDS", 1e-9)
    A, B, sid = _texts(G=60, seed=6)
    _records(A, B, sid, [("rsa", {"method": "spearman"})], permutations=3, bootstrap=3)
    assert capsys.readouterr().err == ""                       # progress=False: silent
    measures = {"rsa": (row_measure("rsa", {"method": "spearman"}), "similarity")}
    infer_rows(torch.from_numpy(A), torch.from_numpy(B), sid, measures, permutations=3, bootstrap=3)
    err = capsys.readouterr().err
    assert "--max-rows 100 would take about" in err


def test_a_row_sample_of_texts_of_unique_lengths_carries_a_note():
    """All rows fit (whole texts), and no two texts share a length: no sampled row can be
    re-paired; permutation_exchangeable is 0 for the measure and a note says so."""
    rng = np.random.default_rng(9)
    g = np.repeat(np.arange(12), np.arange(3, 15))
    A = rng.normal(size=(g.size, 6))
    B = A @ rng.normal(size=(6, 5)) + rng.normal(size=(g.size, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=g, methods=("rigid",), measures=["mutual_knn"], permutations=5,
                             progress=False)
    assert res.to_dict()["mutual_knn_permutation_exchangeable"] == 0.0
    assert any(n.startswith("mutual_knn: only 0% of its sampled rows") for n in res.notes)


# --- rsatoolbox's own bootstrap of the same RDM comparison ---------------------------------
# rsatoolbox.inference.bootstrap_sample_pattern(rdm, "sample") draws the input samples with
# replacement (np.random), RDMs.subsample_pattern takes their rows with repetitions after
# setting the RDM's diagonal to NaN, and rdm.compare(method="spearman") ranks the non-NaN
# upper-triangle entries (scipy's average ranks) and correlates them. So a row's pairs with
# its own copies are left out, as ours. One difference: rsatoolbox keeps the pairs of two
# different rows of one sample lying in two different copies of it; ours leaves them out
# (two copies of a sample never meet). They coincide where each input sample is one row.


def _rsatoolbox_draws(A, B, sid, M, seed=0, drop_between_copies=False):
    """rsatoolbox's own bootstrap: ``M`` values and the multiplicities it drew. With
    ``drop_between_copies`` its resampled RDMs also get NaN at the pairs of two rows of one
    sample in two of its copies (the one pair rsatoolbox keeps and ours leaves out)."""
    import rsatoolbox

    descriptors = {"sample": sid, "row": np.arange(sid.size)}
    rdm = [rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(X, obs_descriptors=descriptors),
                                   method="correlation") for X in (A, B)]
    np.random.seed(seed)
    values, draws = [], []
    for _ in range(M):
        ra, idx = rsatoolbox.inference.bootstrap_sample_pattern(rdm[0], "sample")
        rb = rdm[1].subsample_pattern("sample", idx)
        if drop_between_copies:
            ra, rb = (_drop_between_copies(r) for r in (ra, rb))
        values.append(float(rsatoolbox.rdm.compare(ra, rb, method="spearman")[0, 0]))
        draws.append(np.bincount(idx, minlength=np.unique(sid).size))
    return np.array(values), np.array(draws)


def _drop_between_copies(rdm):
    import rsatoolbox

    row = np.asarray(rdm.pattern_descriptors["row"])            # the original row of each
    sample = np.asarray(rdm.pattern_descriptors["sample"])
    copy = np.array([np.sum(row[:i] == row[i]) for i in range(row.size)])   # its occurrence
    D = rdm.get_matrices()[0]
    D[(sample[:, None] == sample[None, :]) & (copy[:, None] != copy[None, :])] = np.nan
    return rsatoolbox.rdm.RDMs(D[None], pattern_descriptors=rdm.pattern_descriptors)


def test_rsa_bootstrap_equals_rsatoolboxs_own_resample_by_resample_where_the_rules_coincide():
    """Each input sample one row (rsatoolbox's pattern bootstrap): every one of rsatoolbox's
    resamples equals ours on the multiplicities it drew, to 1e-12."""
    A, B, _ = _texts(G=40, seed=12)
    sid = np.arange(A.shape[0])
    st = structure_for("rsa", {"method": "spearman"}, torch.from_numpy(A), torch.from_numpy(B),
                       SampleGroups(sid), permutations=False, bootstrap=True)
    values, draws = _rsatoolbox_draws(A, B, sid, 30, seed=1)
    assert draws.max() >= 3
    for v, m in zip(values, draws):
        assert st.resampled(m) == pytest.approx(v, abs=1e-12)


def test_rsa_bootstrap_is_rsatoolboxs_less_the_pairs_between_copies_of_one_sample():
    """Input samples of 4-5 rows: rsatoolbox's resamples with the pairs of two rows of one
    sample in two different copies set to NaN equal ours, resample by resample; those pairs
    (~3% of a resample's pairs here, 0.45% at 200 samples of 10 rows) move a value by
    < 0.02 (by ~0.002 on average: they are pairs of one sample, close in both spaces)."""
    A, B, sid = _texts(G=40, seed=11, lengths=(4, 6))
    st = structure_for("rsa", {"method": "spearman"}, torch.from_numpy(A), torch.from_numpy(B),
                       SampleGroups(sid), permutations=False, bootstrap=True)
    kept, draws = _rsatoolbox_draws(A, B, sid, 20, seed=2)
    dropped, _ = _rsatoolbox_draws(A, B, sid, 20, seed=2, drop_between_copies=True)
    ours = np.array([st.resampled(m) for m in draws])
    np.testing.assert_allclose(ours, dropped, rtol=0, atol=1e-12)
    assert np.all(np.abs(kept - ours) < 0.02) and np.any(np.abs(kept - ours) > 1e-4)


def test_rsa_bootstrap_interval_agrees_with_rsatoolboxs():
    """The same data, 400 resamples each, each its own draws: our percentile interval and
    rsatoolbox's agree within the Monte-Carlo error of a 2.5% / 97.5% quantile of 400
    resamples (4 standard errors of the difference of two independent estimates, normal
    approximation: sd * sqrt(p (1 - p) / M) / phi(z_p) each) plus the mean shift the pairs
    between copies give (measured on rsatoolbox's own draws)."""
    A, B, sid = _texts(G=40, seed=11, lengths=(4, 6))
    M = 400
    theirs, draws = _rsatoolbox_draws(A, B, sid, M, seed=0)
    rec = _records(A, B, sid, [("rsa", {"method": "spearman"})], bootstrap=M, random_state=0,
                   interval="percentile")["rsa0"]
    st = structure_for("rsa", {"method": "spearman"}, torch.from_numpy(A), torch.from_numpy(B),
                       SampleGroups(sid), permutations=False, bootstrap=True)
    shift = float(np.mean(theirs - np.array([st.resampled(m) for m in draws])))
    p = 0.025
    se = theirs.std() * np.sqrt(p * (1 - p) / M) / scipy.stats.norm.pdf(scipy.stats.norm.ppf(p))
    tol = 4 * np.sqrt(2) * se + abs(shift)
    lo, hi = np.quantile(theirs, [p, 1 - p])
    assert abs(rec.ci_low - lo) < tol and abs(rec.ci_high - hi) < tol
    assert tol < 0.5 * (hi - lo)                                 # a tolerance that can fail
