"""Splitting compare() changes nothing for users (issue 43): ``to_dict()`` of ``actkit.compare``
on the zoo stores, with measures, permutations and bootstrap asked, has the same keys and
equal values (to 1e-12 relative; strings, booleans and None exactly) as the JSON recorded
before the change, ``tests/data/compare_before_split.json``.

The recording is made on main, just before compare() is split (after the work that
legitimately changes compare's numbers is merged), by one command::

    python tests/_compare_record.py

It holds the library versions, Python and CPU model it was recorded with. Values to 1e-12
hold only on one machine and one set of libraries, and a test must never need (nearly)
bitwise-equal floats across machines, so the comparison has two strengths:

- **the recording's environment** (same library versions, Python and CPU model): every key,
  numbers to 1e-12 relative; strings, booleans and None exactly. This is the check that the
  split changed nothing.
- **any other environment** (another CPU's BLAS rounds differently; other libraries): the same
  keys, strings, booleans and None exactly, numbers to 1e-6 relative, leaving out what comes
  from the FastICA fits (the ``ica*`` keys and the notes on those fits): FastICA's optimum
  moves with 1e-7 noise in its input (README, "ICA alignment"), so those values are not
  reproducible across machines to any useful tolerance.

To restore the strict check after an upgrade of numpy / scipy / torch, record it again from
the commit before the split, never from the split. The pairs, inputs and keyword arguments are
``tests/_compare_record.py``'s.
"""

from __future__ import annotations

import json

import pytest
from _compare_record import (
    COMMAND,
    CROSS_MACHINE_RTOL,
    KWARGS,
    PAIRS,
    RECORD,
    differences,
    same_environment,
    without_ica_fits,
    zoo_compare_dicts,
)


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
    assert differences(base, {**base, "b": "y"}) == ["b: 'y', recorded 'x'"]
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
    ica = {"p": {"linear": 0.3, "ica": 0.5, "ica_identifiable": True, "notes": [
        "with 9 permutations", "ica_identifiable is false: the two halves share 3"]}}
    moved = {"p": {"linear": 0.3, "ica": 0.7, "ica_identifiable": False, "notes": [
        "with 9 permutations", "ica_identifiable is false: the two halves share 5"]}}
    assert differences(ica, moved) != []
    assert differences(without_ica_fits(ica), without_ica_fits(moved), rtol=1e-6) == []
    assert without_ica_fits(ica) == {"p": {"linear": 0.3, "notes": ["with 9 permutations"]}}
    assert differences(without_ica_fits(ica), without_ica_fits({"p": {**moved["p"], "linear": 0.4}}),
                       rtol=1e-6) == ["p.linear: 0.4, recorded 0.3 (relative difference 0.25 > 1e-06)"]


def test_the_strict_check_runs_where_the_recording_was_made():
    """The 1e-12 check is the one that runs in the recording's environment, the loose one elsewhere."""
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))["recorded_with"]
    assert same_environment({**recorded, "command": "anything"}) == same_environment(recorded)
    assert not same_environment({**recorded, "cpu": recorded.get("cpu", "") + " (another)"})
    assert not same_environment({**recorded, "numpy": "0.0"})


# ----------------------------------------------------------------------------- the recording
def test_compare_on_the_zoo_stores_equals_the_recording(tmp_path):
    if not RECORD.is_file():
        pytest.fail(f"{RECORD.relative_to(RECORD.parents[2])} is missing: record it on main, before "
                    f"compare() is split, with `{COMMAND}`")
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    assert recorded["pairs"] == {k: list(v) for k, v in PAIRS.items()} and recorded["kwargs"] == KWARGS, \
        f"tests/_compare_record.py's pairs or arguments changed since the recording: record it again ({COMMAND})"
    fresh = json.loads(json.dumps(zoo_compare_dicts(tmp_path)))   # the values as the JSON holds them
    for name in PAIRS:
        d = fresh[name]
        assert d["permutations"] == KWARGS["permutations"] and d["bootstrap"] == KWARGS["bootstrap"]
        assert d["measures"] == KWARGS["measures"]
    if same_environment(recorded["recorded_with"]):
        diff, how = differences(recorded["results"], fresh), "to 1e-12, same environment"
    else:
        diff = differences(without_ica_fits(recorded["results"]), without_ica_fits(fresh),
                           rtol=CROSS_MACHINE_RTOL)
        how = f"to {CROSS_MACHINE_RTOL:g}, FastICA keys left out: another environment"
    assert not diff, (f"compare's to_dict() differs from the recording ({how}; recorded with "
                      f"{recorded['recorded_with']}):\n" + "\n".join(diff[:40]))
