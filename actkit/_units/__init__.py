"""What a unit responds to, for any basis of a layer: the layer's own neurons or channels, PCA
components, ICA sources, dictionary atoms and SAE latents (docs/units.md). The public names
are actkit's own: ``actkit.units``, ``actkit.match_units``, ``actkit.UnitReport``,
``actkit.UnitMatch`` (this package is private, so that ``actkit.units`` is the function).

* :func:`units` -- one streaming pass over the layer (top-k and bottom-k rows, samples of
  each unit's active rows and of its tail for the quantile bands, histograms, moments: a
  reduction of declared states, so it runs on Dask too), the example rows turned back into
  their inputs (text tokens in context, image patches), the logit lens through a stored
  unembedding and the label selectivity; a :class:`UnitReport`.
* :func:`match_units` -- the units of two stores over the same inputs correlated over all rows
  (streamed cross moments), matched one-to-one (Hungarian on |correlation|) with a
  permutation p-value and a bootstrap interval by input sample; a :class:`UnitMatch`.
* :func:`compare_bases` -- several bases of one layer (neurons, PCA, ICA, dictionaries, SAEs and
  a random-rotation control) scored the same way per unit (token purity, token and context
  R^2, label AUROC, k-sparse probing), with bootstrap intervals by input sample; a
  :class:`BasisComparison`.
"""

from actkit._units._api import ORDERS, units
from actkit._units._bases import compare_bases
from actkit._units._comparison import BasisComparison
from actkit._units._match import UnitMatch, check_match, check_options, match_units
from actkit._units._report import SCHEMA, UnitReport

__all__ = ["ORDERS", "SCHEMA", "BasisComparison", "UnitMatch", "UnitReport", "check_match", "check_options",
           "compare_bases", "match_units", "units"]
