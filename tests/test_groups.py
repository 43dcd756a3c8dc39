"""Rows as input samples (:mod:`actkit._groups`): each rule checked against a brute force that
builds the same thing from the rows' ids, sample by sample."""

from __future__ import annotations

import numpy as np
import pytest

from actkit._groups import SampleGroups, bootstrap_draws, clustered_se, permutation_draws
from actkit.errors import ValidationError


def _ids(seed=0):
    """Ids (not 0..G-1, not sorted, rows of a sample not contiguous) of samples of lengths
    1 to 4, one length held by a single sample."""
    rng = np.random.default_rng(seed)
    lengths = np.r_[np.full(5, 1), np.full(6, 3), [7], np.full(4, 2)]
    ids = np.repeat(rng.permutation(lengths.size) * 10 + 5, lengths)
    return ids[rng.permutation(ids.size)], lengths


def _rows_of(ids):
    """``{id: [rows of that id, in order]}`` by a loop over the rows."""
    out = {}
    for i, x in enumerate(ids):
        out.setdefault(x, []).append(i)
    return out


def test_samples_are_the_sorted_ids_and_rows_keep_their_order_within_a_sample():
    ids, _ = _ids()
    g = SampleGroups(ids)
    by_id = _rows_of(ids)
    keys = sorted(by_id)
    assert g.G == len(keys) and g.n == ids.size
    assert [keys[s] for s in g.inverse] == list(ids)
    assert list(g.order) == [r for k in keys for r in by_id[k]]
    assert list(g.n_s) == [len(by_id[k]) for k in keys]
    for s, k in enumerate(keys):
        assert list(g.order[g.offsets[s]:g.offsets[s + 1]]) == by_id[k]
        assert list(g.position[g.offsets[s]:g.offsets[s + 1]]) == list(range(len(by_id[k])))
    assert list(g.sid) == sorted(g.inverse)


def test_no_ids_make_every_row_its_own_sample_and_a_wrong_shape_is_one_line():
    g = SampleGroups(None, 5)
    assert g.G == 5 and list(g.order) == list(range(5)) and list(g.n_s) == [1] * 5
    with pytest.raises(ValidationError, match=r"groups must have one entry per row \(4\), got shape \(3,\)"):
        SampleGroups([1, 2, 3], 4)


def test_length_classes_and_what_can_move():
    ids, lengths = _ids()
    g = SampleGroups(ids)
    classes = g.classes()
    assert [L for L, _ in classes] == sorted(set(lengths))
    for L, members in classes:
        assert list(members) == [s for s in range(g.G) if g.n_s[s] == L]
    alone = {L for L in set(lengths) if list(lengths).count(L) == 1}
    assert list(g.movable()) == [int(g.n_s[s]) not in alone for s in range(g.G)]
    assert g.movable_share() == pytest.approx(np.mean([int(x) not in alone for x in g.n_s]))
    assert g.movable_row_share() == pytest.approx(sum(int(x) for x in g.n_s if int(x) not in alone) / g.n)


def test_a_permutation_moves_whole_samples_within_their_length():
    ids, _ = _ids(1)
    g = SampleGroups(ids)
    perms, movable = permutation_draws(g.n_s, 50, 3)
    assert movable == g.movable_share()
    assert np.array_equal(perms, g.permutation_draws(50, 3)[0])
    for perm in perms:
        assert sorted(perm) == list(range(g.G))
        assert np.array_equal(g.n_s[perm], g.n_s)
        assert np.all(perm[~g.movable()] == np.flatnonzero(~g.movable()))
    assert any((perm != np.arange(g.G)).any() for perm in perms)
    assert np.array_equal(perms, permutation_draws(g.n_s, 50, 3)[0])      # seeded


def test_the_row_order_of_a_permutation_concatenates_whole_samples():
    """Row (s, p) of A meets row p of sample perm[s] of B: B's rows gathered sample by sample."""
    ids, _ = _ids(2)
    g = SampleGroups(ids)
    by_id = _rows_of(ids)
    keys = sorted(by_id)
    perms, _ = permutation_draws(g.n_s, 7, 0)
    for perm in perms:
        in_sample_order = np.concatenate([np.arange(g.offsets[t], g.offsets[t + 1]) for t in perm])
        assert np.array_equal(g.row_order(perm), in_sample_order)
        given_order = np.empty(g.n, int)
        for s, k in enumerate(keys):
            given_order[by_id[k]] = by_id[keys[perm[s]]]
        assert np.array_equal(g.paired_rows(perm), given_order)
    assert np.array_equal(g.row_order(perms), np.stack([g.row_order(p) for p in perms]))


def test_one_permutation_is_one_draw_per_length_class_of_its_own_stream():
    ids, _ = _ids(3)
    g = SampleGroups(ids)
    rng = np.random.default_rng([9, 4])
    expect = np.arange(g.G)
    for L in sorted(set(g.n_s)):
        idx = np.flatnonzero(g.n_s == L)
        if idx.size > 1:
            expect[idx] = idx[rng.permutation(idx.size)]
    assert np.array_equal(g.one_permutation(9, 4), expect)
    assert np.array_equal(SampleGroups(None, 30).paired_rows(SampleGroups(None, 30).one_permutation(2, 0)),
                          np.random.default_rng([2, 0]).permutation(30))


def test_bootstrap_draws_count_each_sample_drawn_with_replacement():
    W = bootstrap_draws(6, 4, 1)
    rng = np.random.default_rng([1, 2])
    picks = rng.integers(0, 6, size=(4, 6))
    assert np.array_equal(W, np.stack([np.bincount(p, minlength=6) for p in picks]).astype(float))
    assert not np.array_equal(W, bootstrap_draws(6, 4, 1, stream=3))
    assert SampleGroups(None, 6).bootstrap_draws(4, 1).tolist() == W.tolist()


def test_the_clustered_standard_error_by_its_formula():
    ids, _ = _ids(4)
    d = np.random.default_rng(0).normal(size=ids.size)
    by_id = _rows_of(ids)
    t = np.array([d[r].sum() for r in by_id.values()])
    m = np.array([len(r) for r in by_id.values()])
    G, n = len(by_id), ids.size
    expect = np.sqrt(G / (G - 1) * np.sum((t - d.mean() * m) ** 2)) / n
    assert clustered_se(d, ids) == pytest.approx(expect, rel=1e-12)
    assert SampleGroups(ids).clustered_se(d) == pytest.approx(expect, rel=1e-12)
    assert clustered_se(d, None) == pytest.approx(d.std(ddof=1) / np.sqrt(n), rel=1e-12)
    assert np.isnan(clustered_se(d[:1], None)) and np.isnan(clustered_se(d, np.zeros(n)))
