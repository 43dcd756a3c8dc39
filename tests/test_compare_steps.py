"""compare's steps (:mod:`actkit.alignment.steps`) called one at a time, each with only what its
docstring names: together they give ``compare``'s result, no step leaves state on what it was
given for another to read, and each returns its own notes."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import actkit
from actkit.alignment import ICAAlignment, METHODS
from actkit.alignment import steps

KW = dict(permutations=9, bootstrap=40, ica_restarts=2, random_state=0)


@pytest.fixture(scope="module")
def planted():
    rng = np.random.default_rng(5)
    S = rng.laplace(size=(1200, 5))
    groups = np.repeat(np.arange(300), 4)
    A = S @ rng.normal(size=(5, 6)) + 0.05 * rng.normal(size=(1200, 6))
    B = S @ rng.normal(size=(5, 5)) + 0.2 * rng.normal(size=(1200, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=groups, threads=1, progress=False, **KW)
    return A, B, groups, res


def _state(obj):
    """What an object holds (attribute names and the identity of each value)."""
    return {k: id(v) for k, v in vars(obj).items()}


def _fresh_pair(request, rows):
    return steps.moment_pass(request, rows, progress=False)


def test_the_steps_one_at_a_time_give_compares_result(planted):
    A, B, groups, res = planted
    request = steps.resolve_request(A, B, groups=groups)
    ica = ICAAlignment(restarts=KW["ica_restarts"], random_state=0)
    rows = steps.split_by_sample(request, ica, random_state=0)
    pair = _fresh_pair(request, rows)
    held_state = (_state(pair), _state(pair.a), _state(pair.b))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        maps = steps.fit_maps(pair, METHODS, ica, n_ica_rows=rows.ica_sample.size, k_ica=rows.k_ica)
        assert not hasattr(ica, "pairs_")                 # the unfitted map given stays unfitted
        # every later step on a Pair of its own: none reads what another step left on one
        held = steps.heldout_errors(_fresh_pair(request, rows), maps.alignments, rows, request.groups,
                                    bootstrap=KW["bootstrap"])
        ica_rep = steps.ica_report(maps.alignments, held, rows, _fresh_pair(request, rows))
        sim = steps.similarities(request, _fresh_pair(request, rows), maps.alignments, random_state=0)
        sources = steps.matched_sources(maps.alignments, _fresh_pair(request, rows))
        resampled = steps.resample(request, _fresh_pair(request, rows), sim, held, rows, random_state=0,
                                   permutations=KW["permutations"], bootstrap=KW["bootstrap"])
    assert caught == []                                   # steps return their notes; compare warns
    assert (_state(pair), _state(pair.a), _state(pair.b)) == held_state
    with pytest.warns(UserWarning):
        notes = steps.warn_notes(maps, held, ica_rep, resampled)
    assert notes == res.notes
    settings = steps.Settings(eval_fraction=0.2, random_state=0, alpha=0.0, ica_max_iter=200, ica_tol=1e-4,
                              ica_restarts=KW["ica_restarts"], device="cpu")
    info = steps.result_info(request, rows, pair, maps, held, ica_rep, sim, resampled, settings,
                             steps.Timings(0.0, 0.0, 0.0, 0.0))
    out = steps.result(request, maps, held, sim, sources, resampled, info, notes, rows).to_dict()
    expect = res.to_dict()
    assert {k for k in out if not k.startswith("seconds")} == {k for k in expect if not k.startswith("seconds")}
    for k, v in expect.items():
        if not k.startswith("seconds"):
            assert out[k] == v or (v != v and out[k] != out[k]), k


def test_resample_alone_needs_no_earlier_pass_on_its_pair(planted):
    """``resample`` reads the per-row errors from the HeldOut it is given, not from its Pair
    (it raised AttributeError on a Pair that heldout_errors had not scored)."""
    A, B, groups, res = planted
    request = steps.resolve_request(A, B, groups=groups)
    rows = steps.split_by_sample(request, ICAAlignment(), random_state=0)
    maps = steps.fit_maps(_fresh_pair(request, rows), ["permutation", "rigid"], ICAAlignment())
    held = steps.heldout_errors(_fresh_pair(request, rows), maps.alignments, rows, groups, bootstrap=40)
    assert set(held.row_errors) == {"permutation", "rigid"}
    assert all(e.shape == rows.eval_rows.shape for e in held.row_errors.values())
    sim = steps.similarities(request, _fresh_pair(request, rows), maps.alignments)
    out = steps.resample(request, _fresh_pair(request, rows), sim, held, rows, bootstrap=40)
    for name in ("rigid", "linear_cka"):
        assert out.records[name].ci_low == res.measures[name].ci_low
        assert out.records[name].ci_high == res.measures[name].ci_high
    assert [m for m, _ in out.notes] == [n for n in res.notes if "bootstrap resamples" in n]


def test_a_step_given_copies_gives_the_same(planted):
    """A step is a function of its inputs: a deep copy of them gives the same value."""
    A, B, groups, _ = planted
    request = steps.resolve_request(A, B, groups=groups)
    rows = steps.split_by_sample(request, ICAAlignment(), random_state=0)
    pair = _fresh_pair(request, rows)
    maps = steps.fit_maps(pair, ["permutation", "rigid", "linear"], ICAAlignment())
    one = steps.heldout_errors(pair, maps.alignments, rows, groups)
    two = steps.heldout_errors(copy.deepcopy(pair), copy.deepcopy(maps.alignments), copy.deepcopy(rows), groups)
    assert one.errors == two.errors and one.den_se == two.den_se
