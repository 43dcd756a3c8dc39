"""compare's small print of resampling (issue 39): what the permutation null holds fixed,
said in the JSON; resample counts with a floor (refused in one line before any work) and
notes where a count is allowed but weak; the CCA family's rank convention in
``--list-measures`` and the CLI help."""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest

import actkit
from actkit.errors import ActkitError
from actkit.inference import min_bootstrap
from cli_helpers import cli_error, run_cli

CLOSED = ("permutation", "rigid")


def _tokens(G=30, d=6, seed=0):
    """Per-token rows of G input samples of lengths 3 and 5 (a real relation)."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([3, 5], size=G)
    g = np.repeat(np.arange(G), lengths)
    A = rng.normal(size=(g.size, d))
    return A, A @ rng.normal(size=(d, d)) + 0.5 * rng.normal(size=(g.size, d)), g


def _compare(A, B, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return actkit.compare(A, B, methods=CLOSED, **kw)


# --- what the null holds fixed -------------------------------------------------------------

def test_the_json_says_what_the_permutation_null_holds_fixed():
    A, B, g = _tokens()
    d = _compare(A, B, groups=g, permutations=19).to_dict()
    assert "position" in d["permutation_null"] and "not the measure between unrelated" in d["permutation_null"]
    assert "position" in d["convention_resampling"]
    pooled = _compare(A, B, permutations=19).to_dict()      # one row per sample: no positions
    assert "unrelated representations" in pooled["permutation_null"]
    assert "position" not in pooled["permutation_null"]
    assert "permutation_null" not in _compare(A, B, groups=g).to_dict()


# --- floors and notes ----------------------------------------------------------------------

@pytest.mark.parametrize("confidence, floor", [(0.95, 40), (0.99, 200), (0.9, 20), (0.5, 4)])
def test_the_bootstrap_floor_is_two_over_one_minus_confidence(confidence, floor):
    assert min_bootstrap(confidence) == floor


def test_too_few_bootstrap_resamples_are_refused_before_any_work():
    A, B, g = _tokens()
    t = time.perf_counter()
    with pytest.raises(ActkitError, match=r"bootstrap=1 is too few resamples for a 95% interval.*at least .* = 40"):
        actkit.compare(A, B, groups=g, bootstrap=1)
    with pytest.raises(ActkitError, match="bootstrap=39 is too few"):
        actkit.compare(A, B, groups=g, bootstrap=39)
    with pytest.raises(ActkitError, match=r"99% interval.*= 200"):
        actkit.compare(A, B, groups=g, bootstrap=100, confidence=0.99)
    assert time.perf_counter() - t < 1.0           # no pass over the rows
    _compare(A, B, groups=g, bootstrap=40)          # the floor itself is accepted


def test_few_resamples_carry_notes_in_the_result_and_the_table():
    A, B, g = _tokens()
    res = _compare(A, B, groups=g, permutations=9, bootstrap=40)
    notes = " ".join(res.notes)
    assert "p cannot fall below 0.05" in notes and "1 / (9 + 1) = 0.1" in notes
    assert "40 bootstrap resamples (fewer than 100)" in notes and "noisy" in notes
    assert res.to_dict()["notes"] == res.notes
    text = str(res)
    assert "fewer than 100 resamples: its ends are noisy" in text
    assert "it cannot fall below 1/10" in text
    enough = _compare(A, B, groups=g, permutations=19, bootstrap=100)
    assert not any("noisy" in n or "cannot fall" in n for n in enough.notes)
    assert "noisy" not in str(enough) and "cannot fall" not in str(enough)


def test_the_cli_refuses_too_few_resamples_in_one_line(tmp_path, capsys):
    A, B, _ = _tokens()
    np.save(tmp_path / "a.npy", A.astype(np.float32))
    np.save(tmp_path / "b.npy", B.astype(np.float32))
    line = cli_error(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--bootstrap", "1")
    assert "--bootstrap 1 is too few resamples" in line and "40" in line
    line = cli_error(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--bootstrap", "100",
                     "--confidence", "0.999")
    assert "--bootstrap 100" in line and "2000" in line


# --- the CCA family's rank convention --------------------------------------------------------

def test_list_measures_and_help_state_the_cca_rank_convention(capsys):
    code, out, _ = run_cli(capsys, "compare", "--list-measures")
    assert code == 0
    flat = " ".join(out.split())
    for name in ("mean_cca", "svcca", "pwcca"):
        block = flat.split(f" {name} ", 1)[1][:900]
        assert "convention: the mean is over the min(rank A, rank B) canonical correlations" in block, name
        assert "google/svcca" in block and "5e-4 to 2e-3" in block and "LayerNorm" in block
    with pytest.raises(SystemExit):
        run_cli(capsys, "compare", "--help")
    help_text = " ".join(capsys.readouterr().out.split())
    assert "min(rank A, rank B)" in help_text and "google/svcca" in help_text
    assert "2 / (1 - confidence)" in help_text


def test_json_of_a_cli_run_has_the_null_text(tmp_path, capsys):
    A, B, _ = _tokens()
    np.save(tmp_path / "a.npy", A.astype(np.float32))
    np.save(tmp_path / "b.npy", B.astype(np.float32))
    js = tmp_path / "r.json"
    code, _, _ = run_cli(capsys, "compare", tmp_path / "a.npy", tmp_path / "b.npy", "--methods", "rigid",
                         "--permutations", "19", "--json", js, "--quiet")
    assert code == 0
    assert "permutation_null" in json.loads(js.read_text())
