"""What users see of the analysis equals the recording, ``tests/data/compare_recorded.json``.

``tests/_compare_record.py`` computes, on fixed inputs it makes itself, what a user sees of
the analysis: ``actkit.compare``'s ``to_dict()`` (and its printed table, matched and source
correlations, held-out rows), ``compare_many``'s matrices and results, ``actkit compare``'s
stdout, stderr, ``--json`` and one-line errors, the records of the resampling (p-values,
null means and SDs, intervals) by both permutation routes, the draws and the chance pairing
of the input-sample groups, the Hungarian matchings and ``dictionary_stability``, and the
JSON writers' output. This test computes it again and compares.

**Why it exists.** A refactor (code moved, merged or made pure: issue 51's input-sample
groups, compare's steps, the command line as a shell) must change nothing a user sees. The
recording made before the refactor is the reference that says so.

**The two strengths.** Values to 1e-12 hold only on one machine and one set of libraries, so
- **in the recording's environment** (the same library versions, Python, CPU model and float
  kernels, torch's CPU capability and the BLAS core type: ``recorded_with``): every key and line, numbers to 1e-12 relative, strings, booleans and
  None exactly;
- **elsewhere**: the same keys, numbers to 1e-6 relative or 1e-6 absolute, strings exactly, leaving out what
  comes from the FastICA fits (the ``ica*`` keys, the notes on those fits, the printed text
  that carries their digits): FastICA's optimum moves with 1e-7 noise in its input (README,
  "ICA alignment").

**When it is re-recorded, and why** (``python tests/_compare_record.py``, then commit the
JSON alone or with the change that requires it):
1. **a change that alters what users see on purpose** (a fix, a new key, another default,
   another message): the commit that makes the change re-records, and its message names
   the keys or lines that move and why. A refactor never re-records: if it moves a
   recorded value it changed something users see, and the refactor is wrong;
2. **the extraction changed the zoo stores' rows** (``inputs_sha256`` differs: the test says
   so before anything else): the analysis is then not what moved; re-record in the commit
   that changed the extraction, saying so;
3. **the environment changed** (numpy, scipy, torch, scikit-learn, Python or the CPU: the
   test names the loose check in its message): to restore the strict check, re-record from
   a commit with no refactor in flight (main before the refactor's branch is merged), never
   from the refactor itself;
4. **a new surface is added** to ``tests/_compare_record.py``: re-record in that commit from
   a commit before the change it is to guard.

History: first recorded for issue 43 (compare split into steps); re-recorded for issue 51
(one home per idea) on the commit before its refactor, with the surfaces above added, after
the issue 43 recording had been outrun by later deliberate changes (the extraction's rows
and FastICA's fits had moved: rules 1 and 2) without being re-recorded. On 2026-12-07
``recorded_with`` gained ``kernels`` (values unchanged): the same "AMD EPYC" run with torch's
and BLAS's SSE4.2 kernels moved the zoo rows' bits and every value by ~1e-8, and the strict
check took that for a change; ``torch AVX512; openblas SkylakeX`` is what this machine, where
the strict check passes, runs.
"""

from __future__ import annotations

import json

import pytest
from _compare_record import (
    COMMAND,
    CROSS_MACHINE_ATOL,
    CROSS_MACHINE_RTOL,
    KWARGS,
    PAIRS,
    RECORD,
    differences,
    record_all,
    same_environment,
    without_ica_fits,
)

SURFACES = ("compare", "compare_many", "cli", "inference", "stability", "json")


# ----------------------------------------------------------------------------- the checker itself
def test_the_checker_sees_every_kind_of_difference():
    base = {"a": 1.0, "b": "x", "c": None, "d": [1, 2.5], "e": True, "seconds_total": 3.0,
            "f": float("nan")}
    same = {**base, "a": 1.0 + 1e-13, "seconds_total": 9.0}
    assert differences(base, same) == []
    assert differences(base, {**base, "a": 1.0 + 1e-11}) == [
        "a: 1.00000000001, recorded 1.0 (relative difference 1e-11 > 1e-12)"]
    assert differences(base, {k: v for k, v in base.items() if k != "c"}) == ["(top): key 'c' is gone"]
    assert differences(base, {**base, "g": 1}) == ["(top): new key 'g'"]
    assert differences(base, {**base, "b": "y"}) == ["b: text differs:\n--- recorded\nx\n--- now\ny"]
    assert differences(base, {**base, "c": 0.0}) == ["c: 0.0, recorded None"]
    assert differences(base, {**base, "d": [1, 2.5, 3]}) == ["d: 3 items, recorded 2"]
    assert differences(base, {**base, "d": [1, 2.6]}) == [
        "d[1]: 2.6, recorded 2.5 (relative difference 0.0385 > 1e-12)"]
    assert differences(base, {**base, "e": 1}) == ["e: 1, recorded True"]
    assert differences(base, {**base, "f": 0.0}) != []
    assert differences({"r": {"x": 0.0}}, {"r": {"x": 1e-300}}) != []
    # the cross-machine strength: 1e-6 relative, the FastICA fits left out, the rest exact
    assert differences(base, {**base, "a": 1.0 + 1e-7}, rtol=1e-6) == []
    assert differences(base, {**base, "a": 1.0 + 1e-5}, rtol=1e-6) != []
    assert differences({"x": 1.2e-8}, {"x": 1.4e-8}, rtol=1e-6) != []      # rounding itself: relative fails,
    assert differences({"x": 1.2e-8}, {"x": 1.4e-8}, rtol=1e-6, atol=1e-6) == []  # the absolute floor holds
    assert differences({"x": 0.0035}, {"x": 0.0035 + 2e-6}, rtol=1e-6, atol=1e-6) != []
    ica = {"compare": {"p": {"to_dict": {"linear": 0.3, "ica": 0.5, "ica_identifiable": True, "notes": [
        "with 9 permutations", "ica_identifiable is false: the two halves share 3"]}, "table": "ica 0.5"}}}
    moved = {"compare": {"p": {"to_dict": {"linear": 0.3, "ica": 0.7, "ica_identifiable": False, "notes": [
        "with 9 permutations", "ica_identifiable is false: the two halves share 5"]}, "table": "ica 0.7"}}}
    assert differences(ica, moved) != []
    assert differences(without_ica_fits(ica), without_ica_fits(moved), rtol=1e-6) == []
    assert without_ica_fits(ica) == {"compare": {"p": {"to_dict": {"linear": 0.3, "notes": ["with 9 permutations"]}}}}
    moved["compare"]["p"]["to_dict"]["linear"] = 0.4
    assert differences(without_ica_fits(ica), without_ica_fits(moved), rtol=1e-6) == [
        "compare.p.to_dict.linear: 0.4, recorded 0.3 (relative difference 0.25 > 1e-06)"]


def test_the_strict_check_runs_where_the_recording_was_made():
    """The 1e-12 check is the one that runs in the recording's environment, the loose one elsewhere."""
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))["recorded_with"]
    assert same_environment({**recorded, "command": "anything"}) == same_environment(recorded)
    assert not same_environment({**recorded, "cpu": recorded.get("cpu", "") + " (another)"})
    assert not same_environment({**recorded, "numpy": "0.0"})


# ----------------------------------------------------------------------------- the recording
@pytest.fixture(scope="module")
def recording():
    if not RECORD.is_file():
        pytest.fail(f"{RECORD.name} is missing: record it with `{COMMAND}` (the module docstring says when)")
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    return record_all(tmp_path_factory.mktemp("recorded"))


def test_the_recording_is_of_these_inputs(recording, fresh):
    assert recording["pairs"] == {k: list(v) for k, v in PAIRS.items()} and recording["kwargs"] == KWARGS, \
        f"tests/_compare_record.py's pairs or arguments changed since the recording: re-record (rule 4, {COMMAND})"
    assert set(recording["results"]) == set(SURFACES) == set(fresh["results"])
    if same_environment(recording["recorded_with"]):
        assert fresh["inputs_sha256"] == recording["inputs_sha256"], (
            "the zoo stores' extracted rows differ from the recording's: the extraction changed, not the "
            f"analysis; re-record in the commit that changed the extraction (rule 2, {COMMAND})")


@pytest.mark.parametrize("surface", SURFACES)
def test_what_users_see_equals_the_recording(recording, fresh, surface):
    if same_environment(recording["recorded_with"]):
        diff = differences(recording["results"][surface], fresh["results"][surface], path=surface)
        how = "to 1e-12, same environment"
    else:
        diff = differences(without_ica_fits(recording["results"]).get(surface),
                           without_ica_fits(fresh["results"]).get(surface), rtol=CROSS_MACHINE_RTOL, path=surface,
                           atol=CROSS_MACHINE_ATOL)
        how = f"to {CROSS_MACHINE_RTOL:g} relative or {CROSS_MACHINE_ATOL:g} absolute, FastICA keys and printed text left out: another environment (rule 3)"
    assert not diff, (f"{surface} differs from the recording ({how}; recorded with {recording['recorded_with']}); "
                      f"see the module docstring for when a re-recording is right:\n" + "\n".join(diff[:40]))
