"""Warnings from the Python API name the user's line (issue 30), not an actkit file.

Behind ``follows_thread_policy`` (``actkit/_threads.py``), scikit-learn's ``set_output``
wrapper or a helper, a fixed ``stacklevel`` landed inside actkit; ``actkit._warn.warn_user``
attributes each warning to the first frame outside actkit. Every call below is made from
this file, so every warning must carry this file's name and the calling line.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import numpy as np
import pytest

import actkit

def _caught(fn):
    """Run ``fn`` (a lambda on one line of this file); its warnings and that line's number."""
    line = inspect.getsourcelines(fn)[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert caught, "expected a warning"
    return caught, line


def _assert_here(caught, line, category):
    hits = [w for w in caught if issubclass(w.category, category)]
    assert hits, [str(w.message) for w in caught]
    for w in hits:
        assert (w.filename, w.lineno) == (__file__, line), (w.filename, w.lineno, str(w.message)[:80])


@pytest.fixture(scope="module")
def mixed():
    rng = np.random.default_rng(0)
    return rng.laplace(size=(3000, 8)) @ rng.normal(size=(8, 8))


def test_estimator_warnings_name_the_callers_line(mixed):
    from sklearn.exceptions import ConvergenceWarning

    from actkit.whitening import RankDeficientWarning

    caught, line = _caught(lambda: actkit.FastICA(max_iter=2, random_state=0).fit(mixed))
    _assert_here(caught, line, ConvergenceWarning)
    # fit_transform passes through scikit-learn's set_output wrapper
    caught, line = _caught(lambda: actkit.FastICA(max_iter=2, random_state=0).fit_transform(mixed))
    _assert_here(caught, line, ConvergenceWarning)
    caught, line = _caught(lambda: actkit.Whitener().fit(np.hstack([mixed, mixed[:, :2]])))
    _assert_here(caught, line, RankDeficientWarning)
    caught, line = _caught(lambda: actkit.SparseDictionary(n_components=8, max_iter=1, random_state=0).fit(mixed))
    _assert_here(caught, line, ConvergenceWarning)


def test_compare_warnings_name_the_callers_line_not_threads_py(mixed):
    """compare runs behind ``follows_thread_policy``; its notes warned from actkit/_threads.py."""
    from sklearn.exceptions import ConvergenceWarning

    B = mixed @ np.random.default_rng(1).normal(size=(8, 8))
    caught, line = _caught(lambda: actkit.compare(mixed, B, methods=["ica"], ica_max_iter=2, progress=False))
    _assert_here(caught, line, ConvergenceWarning)
    assert not any(w.filename.endswith("_threads.py") for w in caught)


def test_extract_warnings_name_the_callers_line(tmp_path):
    """The truncation warning of a text extraction (deep inside actkit.extractors)."""
    from actkit import zoo

    texts = tmp_path / "long.txt"
    texts.write_text(" ".join(["word"] * 400) + "\nshort line\n")
    out = tmp_path / "s.h5"
    caught, line = _caught(lambda: actkit.extract(zoo.model_spec("pythia-tiny-seed0"), str(texts), out, layers=["gpt_neox.layers.0"], progress=False))
    _assert_here(caught, line, UserWarning)
    assert any("truncated" in str(w.message) for w in caught)


def test_a_warning_from_actkit_frames_only_still_names_a_real_file():
    """Where no frame is outside actkit (its own worker threads), the warning stays valid."""
    from concurrent.futures import ThreadPoolExecutor

    from actkit._warn import warn_user

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ThreadPoolExecutor(1).submit(warn_user, "from a worker").result()
    assert [str(w.message) for w in caught] == ["from a worker"]
    assert Path(caught[0].filename).is_file()
