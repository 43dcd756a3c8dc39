"""InfoM / InfoE / InfoC behave as spec §5 describes."""

import numpy as np
import pytest
from scipy.stats import ortho_group

import actkit
from actkit.metrics import infomec

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    n = 1500
    s = np.stack([rng.integers(0, k, n) for k in (3, 4, 5, 6)], 1)
    z = (s - s.mean(0)) / s.std(0) + 0.05 * rng.normal(size=s.shape)
    return rng, s, z


def _scores(out):
    return out["infom"], out["infoe"], out["infoc"]


def test_sources_as_latents_score_one(data):
    _, s, z = data
    m, e, c = _scores(infomec(s, z))
    assert m > 0.97 and e > 0.99 and c > 0.97
    out = infomec(s, z)
    assert out["nmi"].shape == (4, 4) and out["active"].all()
    assert np.all(np.diag(out["nmi"]) > 0.9)


def test_rotation_keeps_infoe_drops_infom_infoc_and_ica_restores(data):
    _, s, z = data
    base = _scores(infomec(s, z))
    zr = z @ ortho_group.rvs(4, random_state=3)
    rot = _scores(infomec(s, zr))
    assert rot[1] == pytest.approx(base[1], abs=0.02)       # InfoE: linear decodability kept
    assert rot[0] < base[0] - 0.3 and rot[2] < base[2] - 0.2
    zi = actkit.FastICA(whiten="unit-variance", random_state=0).fit_transform(zr)
    ica = _scores(infomec(s, zi))
    assert ica[0] > rot[0] + 0.25 and ica[2] > rot[2] + 0.2
    assert ica[1] == pytest.approx(base[1], abs=0.02)


def test_inactive_latents_are_pruned_and_zero_columns_guarded(data):
    rng, s, z = data
    tiny = 1e-4 * rng.normal(size=(len(s), 1))             # range < max/20: inactive
    noise = rng.normal(size=(len(s), 1))                    # active, ~zero NMI with everything
    out = infomec(s, np.hstack([z, tiny, noise]))
    assert out["active"].tolist() == [True] * 4 + [False, True]
    assert all(np.isfinite(v) for v in _scores(out))
    # the pure-noise active latent lowers modularity a little, never makes it NaN
    assert out["infom"] < infomec(s, z)["infom"]
    assert out["infom"] == pytest.approx(infomec(s, z, prune_ratio=0.5)["infom"], abs=0.3)


def test_infoe_baseline_is_log_k_with_balanced_weights():
    """H0 = log K: the balanced logistic regression fitted on all-zero input."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    y = rng.choice(4, size=500, p=[0.1, 0.2, 0.3, 0.4])
    clf = LogisticRegression(C=np.inf, class_weight="balanced").fit(np.zeros((500, 1)), y)
    counts = np.bincount(y)
    w = (500 / (4 * counts))[y]
    p = clf.predict_proba(np.zeros((500, 1)))[np.arange(500), y]
    assert -(w * np.log(p)).sum() / w.sum() == pytest.approx(np.log(4), rel=1e-4)
    # latents unrelated to the source: InfoE ~ 0
    out = infomec(y, rng.normal(size=(500, 2)))
    assert abs(out["infoe"]) < 0.05


def test_label_encoding_and_errors():
    rng = np.random.default_rng(2)
    s = rng.integers(0, 3, size=(300, 2))
    z = s + 0.01 * rng.normal(size=s.shape)
    a = infomec(s, z)
    b = infomec(np.where(s == 0, "red", np.where(s == 1, "green", "blue")), z)
    assert a["infom"] == pytest.approx(b["infom"]) and a["infoe"] == pytest.approx(b["infoe"])
    with pytest.raises(ValueError, match="same number of rows"):
        infomec(s[:10], z)
    with pytest.raises(ValueError, match="single value"):
        infomec(np.zeros((300, 1)), z)
    bad = z.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        infomec(s, bad)


def test_infoe_uses_the_official_unweighted_log_loss():
    """Hsu et al.'s code fits the logistic regression with balanced class weights but
    scores it with the plain log loss (sklearn.metrics.log_loss); on imbalanced factors
    that differs from the balanced-weighted loss (actkit 0.1, ``infoe_loss="balanced"``)."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(3)
    s = (rng.random(400) < 0.2).astype(int)[:, None]            # 20% / 80%
    z = s + 0.8 * rng.normal(size=(400, 1))
    zs = (z - z.mean(0)) / z.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(C=np.inf, class_weight="balanced", max_iter=1000).fit(zs, s[:, 0])
    p = clf.predict_proba(zs)
    by_hand = (np.log(2) - log_loss(s[:, 0], p)) / np.log(2)
    w = np.where(s[:, 0] == 1, 400 / (2 * s.sum()), 400 / (2 * (400 - s.sum())))
    balanced = (np.log(2) - log_loss(s[:, 0], p, sample_weight=w)) / np.log(2)
    out = infomec(s, z)
    assert out["infoe"] == pytest.approx(by_hand, abs=1e-6)
    assert infomec(s, z, infoe_loss="balanced")["infoe"] == pytest.approx(balanced, abs=1e-6)
    assert abs(by_hand - balanced) > 1e-3
    with pytest.raises(ValueError, match="infoe_loss"):
        infomec(s, z, infoe_loss="weighted")
