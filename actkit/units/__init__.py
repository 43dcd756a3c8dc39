"""What a unit responds to, for any basis of a layer: the layer's own neurons or channels, PCA
components, ICA sources, dictionary atoms and SAE latents (docs/units.md).

* :func:`units` -- one streaming pass over the layer (top-k and bottom-k rows, a uniform
  sample of active rows for quantile bands, histograms, moments, share active: a mergeable
  reduction, so it runs on Dask too), the example rows turned back into their inputs (text
  tokens in context, image patches), the logit lens through a stored unembedding and the
  label selectivity; a :class:`UnitReport`.
* :func:`match_units` -- the units of two stores over the same inputs correlated over all rows
  (streamed cross moments), matched one-to-one (Hungarian on |correlation|) with a
  permutation p-value by input sample.
"""

from actkit.units._api import ORDERS, units
from actkit.units._match import UnitMatch, check_match, match_units
from actkit.units._report import SCHEMA, UnitReport

__all__ = ["ORDERS", "SCHEMA", "UnitMatch", "UnitReport", "check_match", "match_units", "units"]


class _CallableModule(__import__("types").ModuleType):
    """``actkit.units`` is both this package and the function: once the package is imported,
    Python binds the attribute ``actkit.units`` to it, so calling the package calls
    :func:`units`."""

    def __call__(self, *args, **kwargs):
        return units(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableModule
