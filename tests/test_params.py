"""actkit/_params.py's parameter validation (issue 35: written here, not imported from
scikit-learn's private ``_param_validation``) decides and words exactly as scikit-learn's,
side by side over every constraint kind actkit's estimators use."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.utils import _param_validation as sk  # the reference, in the test only

from actkit import _params as ak
from actkit.errors import ParameterError

KINDS = [
    lambda m: [m.Interval(Integral, 1, None, closed="left")],
    lambda m: [m.Interval(Integral, 1, None, closed="left"), None],
    lambda m: [m.Interval(Integral, 0, None, closed="left"), m.StrOptions({"auto"}), None],
    lambda m: [m.Interval(Real, 0.0, None, closed="neither")],
    lambda m: [m.Interval(Real, 0.0, 1.0, closed="left")],
    lambda m: [m.Interval(Real, 0, 1, closed="both")],
    lambda m: [m.Interval(Real, None, 0, closed="right")],
    lambda m: [m.Interval(Real, 0.0, None, closed="left"), m.StrOptions({"gcv"})],
    lambda m: [m.StrOptions({"unit-variance"}), m.Options(bool, {False})],
    lambda m: [m.StrOptions({"float32", "float64"}), type],
    lambda m: [str, object],
    lambda m: [dict, None],
    lambda m: ["boolean"],
    lambda m: ["verbose"],
    lambda m: ["random_state"],
    lambda m: ["array-like", None],
    lambda m: [callable],
]
VALUES = [0, 1, 5, -3, 0.0, 0.5, 1.0, 2.5, -1.0, np.nan, np.inf, True, False, np.bool_(True), None, "auto", "gcv",
          "unit-variance", "float32", "x", np.float32, {}, {"a": 1}, [1, 2], np.arange(3), np.int64(3),
          np.float64(0.25), np.random.RandomState(0), 2**32, len]


class _Est(BaseEstimator):
    def __init__(self, p=None):
        self.p = p


@pytest.mark.parametrize("kind", range(len(KINDS)))
def test_same_decision_and_message_as_scikit_learn(kind):
    for value in VALUES:
        est = _Est(p=value)
        est._parameter_constraints = {"p": KINDS[kind](ak)}
        try:
            sk.validate_parameter_constraints({"p": KINDS[kind](sk)}, {"p": value}, caller_name="_Est")
            want = None
        except sk.InvalidParameterError as exc:
            want = str(exc)
        try:
            ak.validate_params(est)
            got = None
        except ParameterError as exc:
            got = str(exc)
        assert got == want, (KINDS[kind](ak), value)


def test_no_validation_and_unknown_constraints():
    est = _Est(p=object())
    est._parameter_constraints = {"p": "no_validation"}
    ak.validate_params(est)
    est._parameter_constraints = {"p": ["no-such-kind"]}
    with pytest.raises(ValueError, match="unknown parameter constraint"):
        ak.validate_params(est)
