"""The alignment errors of Nelson et al. (Table 1) and the ICA efficiency as measures: each
is fitted by :func:`actkit.compare` on the fit rows and scored on the held-out input samples
(docs/definitions.md, section 1), so these read the value off compare's result
(``source="alignment"``)."""

from __future__ import annotations

from actkit.measures._protocol import Measure

__all__ = ["MEASURES", "from_result"]

_PAPER = "Nelson et al., Table 1 (held-out error of the fitted map / diam(B_eval))"
_REF = "actkit.compare (docs/definitions.md, section 1)"
_COST = "one pass for the moments, one over the held-out rows"


def from_result(name):
    """``compute(d)``: the value ``name`` of a :meth:`CompareResult.to_dict` ``d``."""
    def compute(d, **params):
        value = d.get(name)
        return float("nan") if value is None else float(value)
    compute.__name__ = f"{name}_from_result"
    return compute


MEASURES = (
    Measure("permutation", "distance", "signed permutations of the units, translation", "alignment",
            from_result("permutation"), paper=_PAPER, reference=_REF, cost=_COST),
    Measure("rigid", "distance", "orthogonal transforms, translation", "alignment",
            from_result("rigid"), paper=_PAPER, reference=_REF, cost=_COST),
    Measure("linear", "distance", "invertible affine maps of A", "alignment", from_result("linear"),
            paper=_PAPER, reference=_REF, cost=_COST),
    Measure("ica", "distance", "signed permutations of independent components, translation",
            "alignment", from_result("ica"), paper=_PAPER, reference=_REF,
            cost=_COST + ", two FastICA fits (restarts) per pair"),
    Measure("ica_efficiency", "similarity", "as ica", "alignment", from_result("ica_efficiency"),
            paper="Nelson et al.: (err_permutation - err_ica) / (err_permutation - err_rigid)",
            reference=_REF, cost="permutation, rigid and ica together"),
)
