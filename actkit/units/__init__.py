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
* :func:`compare_bases` -- several bases of one layer (neurons, PCA, ICA, dictionaries, SAEs and
  a random-rotation control) scored the same way per unit (token purity, token and context
  R^2, label AUROC, k-sparse probing), with bootstrap intervals by input sample; a
  :class:`BasisComparison`.
"""

from actkit.units._api import ORDERS
from actkit.units._api import units as _api_units
from actkit.units._bases import compare_bases
from actkit.units._comparison import BasisComparison
from actkit.units._match import UnitMatch, check_match, match_units
from actkit.units._report import SCHEMA, UnitReport

__all__ = ["ORDERS", "SCHEMA", "BasisComparison", "UnitMatch", "UnitReport", "check_match", "compare_bases",
           "match_units", "units"]


class _CallableModule(__import__("types").ModuleType):
    """``actkit.units`` is both this package and the function: calling the package calls
    :func:`actkit.units._api.units` (its signature and docstring are ``units.__call__``'s)."""

    def __call__(self, *args, **kwargs):
        return _api_units(*args, **kwargs)

    __call__.__doc__ = _api_units.__doc__


__import__("sys").modules[__name__].__class__ = _CallableModule
#: the package itself, callable: ``actkit.units``, ``from actkit.units import units`` and
#: ``import actkit.units`` give the same object, whatever was imported first
units = __import__("sys").modules[__name__]
