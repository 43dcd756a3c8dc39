"""Splitting compare() changes nothing for users (issue 43): ``to_dict()`` of ``actkit.compare``
on the zoo stores, with measures, permutations and bootstrap asked, has the same keys and
equal values (to 1e-12 relative; strings, booleans and None exactly) as the JSON recorded
before the change, ``tests/data/compare_before_split.json``.

The recording is made on main, just before compare() is split (after the work that
legitimately changes compare's numbers is merged), by one command::

    python tests/_compare_record.py

It holds the library versions and machine it was recorded with: values to 1e-12 hold on one
machine and one set of libraries, so after an upgrade of numpy / scipy / torch (or on
another machine) record it again from the commit before the split, never from the split.
The pairs, inputs and keyword arguments are ``tests/_compare_record.py``'s.
"""

from __future__ import annotations

import json

import pytest
from _compare_record import COMMAND, KWARGS, PAIRS, RECORD, differences, zoo_compare_dicts


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
    diff = differences(recorded["results"], fresh)
    assert not diff, (f"compare's to_dict() differs from the recording (made with "
                      f"{recorded['recorded_with']}):\n" + "\n".join(diff[:40]))
