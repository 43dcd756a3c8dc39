"""The pages open from ``file://`` offline in Firefox too (issue 41), not only in Chromium
(tests/test_pages.py, tests/test_units_page.py): Debian's headless ``firefox-esr`` driven over
WebDriver BiDi (tests/_firefox.py). Each page loads with no console error and no request
leaving the file, its scripts draw what the data says, and the hostile strings in its data
show as text and run nothing.
"""

from __future__ import annotations

import json

import pytest

from tests._firefox import Firefox
from tests.cli_helpers import run_cli
from tests.test_pages import HOSTILE, IMG, hostile_page, labelled, stores  # noqa: F401  (fixtures)
from tests.test_units_page import SCRIPT, report  # noqa: F401  (fixture)

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]


@pytest.fixture(scope="module")
def firefox():
    try:
        ff = Firefox()
    except RuntimeError as exc:
        pytest.fail(f"the pages are tested in Firefox too, and it could not be used: {exc}")
    yield ff
    ff.close()


def _clean(page):
    assert page.errors == [], page.errors
    assert page.external_requests() == [], page.external_requests()
    assert page.js("window.__actkit_ran") == [] and page.js("window.__pwned") is None


def test_compare_page_in_firefox(stores, firefox, capsys, tmp_path):
    _, a, b = stores
    html = tmp_path / "compare.html"
    code, _, err = run_cli(capsys, "compare", a, b, "--html", html, "--bootstrap", "40", "--permutations", "19",
                           "--json", tmp_path / "c.json", "--quiet")
    assert code == 0, err
    saved = json.loads((tmp_path / "c.json").read_text())
    page = firefox.open(html)
    _clean(page)
    assert page.js("document.title") == f"actkit compare: {a} -> {b}"
    sections = page.js("Array.from(document.querySelectorAll('section h2'), h => h.textContent)")
    assert IMG in sections and "l2" in sections                # the injected layer name, as text
    names = page.js("Array.from(document.querySelectorAll('#pair-0 table.measures tbody tr'), "
                    "r => r.children[0].textContent)")
    assert names[:4] == ["permutation", "rigid", "linear", "ica"] and "linear_cka" in names
    k = saved[IMG]["ica_n_components"]
    assert page.js("document.querySelectorAll('#pair-0 svg.heatmap rect.cell').length") == k * k


def test_evaluate_page_in_firefox(labelled, firefox, capsys, tmp_path):
    tmp, _, _ = labelled
    html = tmp_path / "evaluate.html"
    code, _, err = run_cli(capsys, "evaluate", tmp / "emb.npy", "--labels", tmp / "labels.txt", "--html", html,
                           "--quiet")
    assert code == 0, err
    page = firefox.open(html)
    _clean(page)
    text = page.js("document.body.innerText")
    assert "<script>alert(1)</script>" in text and IMG in text
    assert page.js("Array.from(document.querySelectorAll('figure img'), i => i.complete && i.naturalWidth > 100)")


def test_units_page_in_firefox(report, firefox, tmp_path):
    _, r, _, _ = report
    html = r.to_html(tmp_path / "units.html")
    page = firefox.open(html)
    _clean(page)
    rows = page.js("document.querySelectorAll('#index table.index tbody tr').length")
    assert rows == len(r.to_dict()["units"])
    assert page.js("document.querySelectorAll('#card-list article.card').length") > 0   # cards drawn
    tops = page.js("Array.from(document.querySelectorAll('#card-list article.card .tok.hi'), t => t.textContent)")
    assert tops, "no highlighted token in the cards"
    assert SCRIPT in page.js("document.body.innerText")                                  # a hostile token, as text


def test_a_hostile_string_anywhere_stays_text_in_firefox(firefox, tmp_path):
    path = hostile_page(tmp_path / "hostile.html")
    page = firefox.open(path)
    _clean(page)
    text = page.js("document.body.innerText")
    assert all(s.split("\u2028")[0] in text for s in HOSTILE[:4])
    assert page.js("document.querySelectorAll('img').length") == 0
    assert page.js("document.title") == HOSTILE[2]
