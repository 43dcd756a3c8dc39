"""The measure protocol: :class:`Measure` (what a measure states), :class:`Param` (one
parameter and its check), :class:`Moments` (what a moment-based measure is computed from)
and the registry (:func:`available`, :func:`get_measure`, :func:`parse_measures`).

See :mod:`actkit.measures` for the protocol as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from actkit._threads import small_linalg
from actkit.errors import ValidationError

__all__ = ["Measure", "Param", "Moments", "SOURCES"]

#: How a measure gets its data: streaming moments (exact, out of core), a seeded row sample,
#: or the fitted alignments of :func:`actkit.compare` (its held-out errors).
SOURCES = ("moments", "rows", "alignment")


@dataclass(frozen=True)
class Param:
    """One parameter of a measure.

    Attributes
    ----------
    name : str
    default : object
    valid : str
        The valid values in words, for the one-line error (``"an integer >= 1"``).
    check : callable
        ``check(value) -> value`` (converted, e.g. ``int``), raising ``ValueError`` or
        ``TypeError`` when the value is not valid.
    """

    name: str
    default: Any
    valid: str
    check: Callable[[Any], Any]


def int_param(name, default, low=1, *, none=False):
    """An integer parameter ``>= low`` (``none``: None allowed)."""
    def check(v):
        if none and (v is None or v == "none"):
            return None
        if isinstance(v, bool) or float(v) != int(float(v)) or int(float(v)) < low:
            raise ValueError
        return int(float(v))
    return Param(name, default, f"an integer >= {low}" + (" or none" if none else ""), check)


def float_param(name, default, low=None, high=None, *, open_low=False, open_high=False, none=False):
    """A float parameter in ``[low, high]`` (``open_*``: excluded ends; ``none``: None allowed)."""
    lo = "(" if open_low else "["
    hi = ")" if open_high else "]"
    where = (f"in {lo}{low}, {high}{hi}" if low is not None and high is not None
             else f"{'>' if open_low else '>='} {low}" if low is not None else "a number")

    def check(v):
        if none and (v is None or v == "none"):
            return None
        if isinstance(v, bool):
            raise ValueError
        v = float(v)
        if not np.isfinite(v):
            raise ValueError
        if low is not None and (v < low or (open_low and v == low)):
            raise ValueError
        if high is not None and (v > high or (open_high and v == high)):
            raise ValueError
        return v
    return Param(name, default, f"a number {where}" + (" or none" if none else ""), check)


def choice_param(name, default, choices):
    """A parameter with a fixed set of string values."""
    def check(v):
        if v not in choices:
            raise ValueError
        return v
    return Param(name, default, "one of " + ", ".join(map(str, choices)), check)


def bool_param(name, default):
    """A boolean parameter (``true``/``false``, ``1``/``0`` from the command line)."""
    def check(v):
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        text = str(v).lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueError
    return Param(name, default, "true or false", check)


@dataclass(frozen=True)
class Measure:
    """What one measure states about itself (the protocol's record).

    Attributes
    ----------
    name : str
        Its name in ``compare(measures=[...])``, ``to_dict()`` and ``--measures``.
    kind : {"similarity", "distance"}
        A similarity grows, a distance shrinks, as the representations agree more.
    invariances : str
        The transformations of either side that leave the value unchanged, in words.
    source : {"moments", "rows", "alignment"}
        ``"moments"``: ``compute(m, **params)`` with ``m`` a :class:`Moments` (exact over
        any number of rows, out of core, mergeable); ``"rows"``: ``compute(A, B,
        **params)`` with ``A``, ``B`` torch float64 tensors on the measure's device, a
        seeded sample of whole input samples; ``"alignment"``: ``compute(d, **params)``
        with ``d`` the ``to_dict()`` of :func:`actkit.compare` (the fitted maps' held-out
        errors).
    compute : callable
        ``from_moments``, ``from_rows`` or ``from_result``, as ``source`` says.
    paper : str
        The paper whose definition it follows.
    reference : str
        The implementation it equals (its test runs that code side by side).
    params : tuple of Param
    needs_split : bool
        A ``"moments"`` measure scored on held-out rows: ``m.parts`` is ``(fit, test)``.
    check : callable, optional
        ``check(params, widths, n_rows)`` raising :class:`ValidationError` for a value the
        parameters alone cannot judge (``k`` not below the rows, unequal widths, ...).
    cost : str
        Time and memory in words (docs/measures.md).
    convention : str
        Where the measure's convention departs from a well-known implementation, in words
        (``--list-measures`` prints it).
    """

    name: str
    kind: str
    invariances: str
    source: str
    compute: Callable = field(repr=False)
    paper: str = ""
    reference: str = ""
    params: tuple = ()
    needs_split: bool = False
    check: Callable | None = field(default=None, repr=False)
    cost: str = ""
    convention: str = ""

    def __post_init__(self):
        if self.kind not in ("similarity", "distance"):
            raise ValueError(f"measure {self.name}: kind must be similarity or distance")
        if self.source not in SOURCES:
            raise ValueError(f"measure {self.name}: source must be one of {SOURCES}")

    @property
    def moment_based(self) -> bool:
        """Computed from streaming moments (never sampled)."""
        return self.source == "moments"

    @property
    def sampled(self) -> bool:
        """Computed from a seeded row sample of at most ``max_rows`` rows."""
        return self.source == "rows"

    @property
    def higher_is_similar(self) -> bool:
        return self.kind == "similarity"

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params}

    def validate(self, params: dict | None = None) -> dict:
        """All parameters, defaults filled and each checked; a one-line
        :class:`ValidationError` naming the valid choices otherwise."""
        params = dict(params or {})
        known = {p.name: p for p in self.params}
        bad = [k for k in params if k not in known]
        if bad:
            choices = ", ".join(known) if known else "none"
            raise ValidationError(f"measure {self.name} has no parameter {bad[0]!r}; its "
                                  f"parameters: {choices}")
        out = {}
        for p in self.params:
            value = params.get(p.name, p.default)
            try:
                out[p.name] = p.check(value)
            except (TypeError, ValueError, OverflowError):
                raise ValidationError(f"measure {self.name}: {p.name} must be {p.valid}, "
                                      f"got {value!r}") from None
        return out

    def check_data(self, params: dict, widths: tuple, n_rows: int) -> None:
        """The measure's own checks of the data's shape (before any pass)."""
        if self.check is not None:
            self.check(params, widths, n_rows)

    def describe(self) -> dict:
        """Name, kind, invariances, out of core or sampled, reference: one ``--list-measures`` row."""
        how = {"moments": "out of core", "rows": "sampled", "alignment": "held-out fit"}[self.source]
        return {"name": self.name, "kind": self.kind, "invariances": self.invariances,
                "computed": how, "params": ", ".join(f"{p.name}={p.default}" for p in self.params),
                "paper": self.paper, "reference": self.reference, "cost": self.cost,
                "convention": self.convention}


@dataclass(frozen=True)
class Moments:
    """What a moment-based measure is computed from (all float64).

    Attributes
    ----------
    n : float
        Rows (a weighted count when resampled).
    mean_a, mean_b : ndarray of shape (p,), (q,)
    Saa, Sbb : ndarray of shape (p, p), (q, q)
        Centred scatter matrices ``sum_i (a_i - mean_a)(a_i - mean_a)^T`` (not divided by n).
    Sab : ndarray of shape (p, q)
        Centred cross scatter ``sum_i (a_i - mean_a)(b_i - mean_b)^T``.
    dtype : str
        The rows' dtype (``"float32"`` or ``"float64"``): it sets the rank cut of the CCA
        family (:func:`rank_cut`).
    norms : dict, optional
        The debiased CKA's row-norm sums about the means, ``dx_i = |a_i - mean_a|^2``,
        ``dy_i = |b_i - mean_b|^2``: ``{"dx2": sum dx^2, "dy2": sum dy^2, "dxdy": sum dx dy}``
        (only ``dxdy`` depends on the pairing of the rows).
    parts : tuple of (Moments, Moments), optional
        ``(fit, test)``: the same rows split by input sample, for a measure scored on
        held-out rows (``Measure.needs_split``).
    """

    n: float
    mean_a: np.ndarray
    mean_b: np.ndarray
    Saa: np.ndarray
    Sbb: np.ndarray
    Sab: np.ndarray
    dtype: str = "float64"
    norms: dict | None = None
    parts: tuple | None = None

    @classmethod
    def from_sums(cls, n, sum_a, sum_b, aa, bb, ab, *, shift_a=0.0, shift_b=0.0, dtype="float64",
                  raw_norms=None):
        """From uncentred sums about fixed shifts (additive over blocks, so a bootstrap
        reweights per-sample sums and calls this).

        Parameters
        ----------
        n : float
        sum_a, sum_b : ndarray of shape (p,), (q,)
            ``sum_i (a_i - shift_a)``, ``sum_i (b_i - shift_b)``.
        aa, bb, ab : ndarray of shape (p, p), (q, q), (p, q)
            ``sum_i (a_i - shift_a)(a_i - shift_a)^T`` etc.
        raw_norms : dict, optional
            :class:`~actkit.stats.CrossMoments`' debiased terms about the same shifts
            (``sum_dx, sum_dy, sum_dx2, sum_dy2, sum_dxdy, x_dx, x_dy, y_dx, y_dy``).
        """
        n = float(n)
        sa, sb = np.asarray(sum_a, np.float64), np.asarray(sum_b, np.float64)
        Saa = aa - np.outer(sa, sa) / n
        Sbb = bb - np.outer(sb, sb) / n
        Sab = ab - np.outer(sa, sb) / n
        with small_linalg():      # BLAS dots at one thread: the same bits at any budget
            norms = None if raw_norms is None else _norms_about_means(n, sa, sb, aa, bb, ab, raw_norms)
        return cls(n, np.asarray(shift_a, np.float64) + sa / n, np.asarray(shift_b, np.float64) + sb / n,
                   Saa, Sbb, Sab, str(np.dtype(dtype)), norms)

    @classmethod
    def from_cross(cls, cm, *, dtype="float64"):
        """From a :class:`~actkit.stats.CrossMoments` with both side scatters."""
        raw = ({k: getattr(cm, k) for k in ("sum_dx", "sum_dy", "sum_dx2", "sum_dy2", "sum_dxdy",
                                            "x_dx", "x_dy", "y_dx", "y_dy")}
               if cm.debiased_terms else None)
        return cls.from_sums(cm.n, cm.sx, cm.sy, cm.xx, cm.yy, cm.xy, shift_a=cm.shift_x,
                             shift_b=cm.shift_y, dtype=dtype, raw_norms=raw)

    def with_parts(self, fit, test) -> Moments:
        return replace(self, parts=(fit, test))

    @property
    def widths(self) -> tuple:
        return (self.Saa.shape[0], self.Sbb.shape[0])


def _norms_about_means(n, sa, sb, aa, bb, ab, raw):
    """Rebase the row-norm sums from the shifts to the means: with u = sa / n the offset of
    the mean from the shift, dx'_i = dx_i - 2 x_i.u + |u|^2 (x_i about the shift)."""
    u, v = sa / n, sb / n
    cu, cv = u @ u, v @ v
    # sum dx' = tr Saa; the squares and the cross term need the fourth-order sums
    dx2 = (raw["sum_dx2"] - 4 * u @ raw["x_dx"] + 2 * cu * raw["sum_dx"] + 4 * u @ aa @ u
           - 4 * cu * (u @ sa) + n * cu * cu)
    dy2 = (raw["sum_dy2"] - 4 * v @ raw["y_dy"] + 2 * cv * raw["sum_dy"] + 4 * v @ bb @ v
           - 4 * cv * (v @ sb) + n * cv * cv)
    dxdy = (raw["sum_dxdy"] - 2 * v @ raw["y_dx"] + cv * raw["sum_dx"] - 2 * u @ raw["x_dy"]
            + 4 * u @ ab @ v - 2 * cv * (u @ sa) + cu * raw["sum_dy"] - 2 * cu * (v @ sb) + n * cu * cv)
    return {"dx2": float(dx2), "dy2": float(dy2), "dxdy": float(dxdy)}
