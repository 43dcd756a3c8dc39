"""Results people can look at: one self-contained HTML page per result.

``compare_page(results, path)``  the compare table (every measure, its interval and p-value,
                                 the notes), the ICA source correlations, a layer map
``evaluate_page(result, path)``  the four versions of ``actkit evaluate``: table and figure
``units_page(report, path)``     a unit report (``actkit units``): an index of every unit and
                                 one card per unit, drawn when it comes into view
``bases_page(comparison, path)``  bases compared (``actkit bases``): the table with intervals,
                                 the verdicts, score histograms, the best and worst units' cards
``render_page``, ``write_page``  any kind's page from its data (``templates/<kind>.js``)
``check_page_path``              what ``--html`` accepts (``.html``/``.htm``, writable, no
                                 file there but an actkit page, and that only with overwrite)

Each page is one file: the CSS, the JavaScript and the data (as inert JSON) inline, figures as
inline SVG (drawn by the page's script) or PNG ``data:`` URIs; a Content-Security-Policy lets
nothing else load or run. The templates are package files (``actkit/pages/templates``), plain
JavaScript with no build step; every string of the data is shown as text.
"""

from __future__ import annotations

from actkit._lazy import lazy_attributes
from actkit.pages._render import MARK, SUFFIXES, check_page_path, is_actkit_page, page_json, render_page, write_page

# the pages themselves import actkit.report (matplotlib, scikit-learn: ~1 s): only when asked
# for, so that ``--html``'s path check (check_page_path) stays instant
_LAZY = {"compare_page": "actkit.pages._write", "evaluate_page": "actkit.pages._write",
         "compare_data": "actkit.pages._views", "evaluate_data": "actkit.pages._views",
         "layer_map_data": "actkit.pages._views", "figure_uri": "actkit.pages._views",
         "units_page": "actkit.pages._units", "units_data": "actkit.pages._units", "units_preview": "actkit.pages._units",
         "bases_page": "actkit.pages._bases", "bases_data": "actkit.pages._bases", "bases_preview": "actkit.pages._bases"}

__getattr__, __dir__, _lazy_all = lazy_attributes(__name__, _LAZY)
__all__ = sorted([*_lazy_all, "MARK", "SUFFIXES", "check_page_path", "is_actkit_page", "page_json", "render_page",
                  "write_page"])
