"""Pages (issue 41): one self-contained HTML file per result, opened in a real browser.

The data is embedded as JSON that cannot close its ``<script>`` element, every string of it
is shown as text, a Content-Security-Policy lets nothing else load or run, and ``--html``
refuses a bad path before any work. The browser tests open each page from ``file://`` in
Debian's headless chromium (tests/_browser.py): no console error, no request to anything but
the page, sorting and filtering change what is shown, and hostile strings from the inputs
(a layer name, a label) show as text and run nothing, with the CSP switched off too.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

import actkit
from actkit.errors import InputError
from actkit.pages import check_page_path, is_actkit_page, page_json, render_page
from tests._browser import Visit, chromium_fixture
from tests.cli_helpers import cli_error, run_cli
from tests.test_cli_compare import _store  # one store-writing helper for the compare tests

pytestmark = pytest.mark.usefixtures("torch_one_thread")

HOSTILE = ['<script>alert(1)</script>', '<img src=x onerror="window.__pwned=1">',
           '</script><script>window.__pwned=1</script>', '<!-- x', 'a & b \u2028 \u2029 "q"']
IMG = '<img src=x onerror="window.__pwned=1">'


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.texts, self._in = [], {}, None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag

    def handle_data(self, data):
        if self._in:
            self.texts.setdefault(self._in, []).append(data)

    def handle_endtag(self, tag):
        self._in = None


def _sha(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# ------------------------------------------------------------------ the page, without a browser
def test_embedded_json_is_inert_and_reads_back_equal():
    data = {"strings": HOSTILE, "n": 1.5, "nan": float("nan"), "arr": np.arange(3, dtype=np.float32)}
    text = page_json(data)
    assert not re.search("[<>&\u2028\u2029]", text)
    back = json.loads(text)
    assert back["strings"] == HOSTILE and back["nan"] is None and back["arr"] == [0.0, 1.0, 2.0]


def test_a_page_is_one_file_whose_policy_allows_only_its_own_script_and_style():
    html = render_page("compare", {"title": "t", "pairs": [], "maps": []}, title=HOSTILE[0])
    p = _Tags()
    p.feed(html)
    scripts = [a for t, a in p.tags if t == "script"]
    assert all("src" not in a for a in scripts) and len(scripts) == 2
    assert not [t for t, a in p.tags if t in ("link", "iframe", "object", "embed", "base")]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html) and "@import" not in html
    csp = next(a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    code = "".join(p.texts["script"][-1:])
    style = "".join(p.texts["style"])
    assert csp.startswith("default-src 'none'; ") and f"script-src {_sha(code)};" in csp
    assert f"style-src {_sha(style)};" in csp and "img-src data:;" in csp and "unsafe" not in csp
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html.split("</title>")[0]   # the title, escaped


def test_the_templates_are_files_of_the_package_not_strings_in_python():
    from importlib import resources

    folder = resources.files("actkit.pages").joinpath("templates")
    names = {p.name for p in folder.iterdir()}
    assert {"page.html", "page.css", "common.js", "compare.js", "evaluate.js"} <= names
    literals = []       # the string constants of the Python code, docstrings left out
    for p in resources.files("actkit.pages").iterdir():
        if p.name.endswith(".py"):
            tree = ast.parse(p.read_text())
            docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                    and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            literals += [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                         and id(n) not in docs]
    assert literals and not [x for x in literals if re.search(r"<(table|tr|td|div|script|style|p|ul|li)\b", x)]
    js = "".join(folder.joinpath(n).read_text() for n in names if n.endswith(".js"))
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js and "eval(" not in js


def test_the_path_check(tmp_path):
    page = tmp_path / "r.html"
    with pytest.raises(InputError, match="must end with .html or .htm"):
        check_page_path(tmp_path / "r.txt")
    with pytest.raises(InputError, match="does not exist"):
        check_page_path(tmp_path / "nope" / "r.html")
    with pytest.raises(InputError, match="is a folder"):
        (tmp_path / "d.html").mkdir()
        check_page_path(tmp_path / "d.html")
    (tmp_path / "mine.html").write_text("<!DOCTYPE html><p>my notes</p>")
    for overwrite in (False, True):   # never someone else's file, --overwrite or not
        with pytest.raises(InputError, match="not a page actkit wrote"):
            check_page_path(tmp_path / "mine.html", overwrite=overwrite)
    assert check_page_path(page) == page and check_page_path(tmp_path / "r.HTM")
    page.write_text(render_page("compare", {"pairs": []}, "t"))
    assert is_actkit_page(page) and not is_actkit_page(tmp_path / "mine.html")
    with pytest.raises(InputError, match="pass --overwrite"):
        check_page_path(page)
    assert check_page_path(page, overwrite=True) == page


# ------------------------------------------------------------------ stores and results
@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two stores of 120 samples x 4 tokens; one layer is named like an HTML injection."""
    tmp = tmp_path_factory.mktemp("pages")
    rng = np.random.default_rng(0)
    n, d = 480, 6
    index = np.stack([np.repeat(np.arange(120), 4), np.tile(np.arange(4), 120)], 1)
    S = rng.laplace(size=(n, d))
    l1 = S @ rng.normal(size=(d, d))
    a = _store(tmp / "a.h5", {IMG: l1, "l2": np.tanh(S)}, index)
    b = _store(tmp / "b.h5", {IMG: l1 @ rng.normal(size=(d, d)) + 0.3 * rng.normal(size=(n, d)),
                              "l2": np.tanh(S)[:, ::-1]}, index)
    return tmp, a, b


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """Embeddings whose labels are hostile strings (the task names on the page)."""
    tmp = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(1)
    n, k = 600, 8
    S = rng.standard_normal((n, k)) * (rng.random((n, k)) < 0.3)
    X = (S @ rng.normal(size=(k, k)).T).astype(np.float32)
    names = ["ctrl", "<script>alert(1)</script>", IMG, "plain & simple"]
    y = np.array([names[0]] * n, object)
    for j in range(1, 4):
        y[S[:, j] > 0.3] = names[j]
    np.save(tmp / "emb.npy", X)
    (tmp / "labels.txt").write_text("\n".join(y) + "\n")
    return tmp, X, y


def test_compare_to_frame_holds_every_measure_with_its_interval_and_p():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 5)).astype(np.float32)
    B = A @ rng.standard_normal((5, 5)).astype(np.float32) + 0.2 * rng.standard_normal((300, 5)).astype(np.float32)
    res = actkit.compare(A, B, permutations=9, bootstrap=40, ica_restarts=1, measures="procrustes", progress=False)
    frame, d = res.to_frame(), res.to_dict()
    assert list(frame.columns) == ["kind", "value", "ci_low", "ci_high", "p", "null_mean", "null_sd", "note"]
    assert frame.index.name == "measure"
    for name in ("permutation", "rigid", "linear", "ica", "linear_cka", "mean_cca", "procrustes"):
        assert frame.loc[name, "value"] == pytest.approx(d[name])
        assert frame.loc[name, "ci_low"] == pytest.approx(d[f"{name}_ci_low"])
        assert frame.loc[name, "ci_high"] == pytest.approx(d[f"{name}_ci_high"])
    assert frame.loc["linear_cka", "p"] == pytest.approx(d["linear_cka_p"])
    assert np.isnan(frame.loc["rigid", "p"])            # errors are bootstrapped, not permuted
    assert frame.loc["rigid", "kind"] == "error" and frame.loc["procrustes", "kind"] == "distance"
    assert frame.attrs["notes"] == d["notes"]
    html = res._repr_html_()
    assert "<table" in html and "procrustes" in html


def test_layer_map_and_evaluation_frames_and_their_notebook_tables(stores, labelled):
    _, a, b = stores
    lm = actkit.compare_layers(actkit.open_store(a), actkit.open_store(b), permutations=9, progress=False)
    frame = lm.to_frame()
    assert frame.shape == (2, 2) and frame.index.name == "layer_a" and frame.columns.name == "layer_b"
    np.testing.assert_allclose(frame.to_numpy(), lm.matrix)
    np.testing.assert_allclose(lm.to_frame("p").to_numpy(), lm.p)
    assert list(frame.index) == lm.layers_a
    html = lm._repr_html_()
    assert IMG not in html and "&lt;img src=x onerror=" in html        # escaped
    _, X, y = labelled
    res = actkit.evaluate_postprocessing(X, y, classifier="logistic", n_rotations=1, n_splits=2, progress=False)
    assert isinstance(res, actkit.evaluation.EvaluateResult)           # the name for it
    frame, d = res.to_frame(), res.to_dict()
    assert list(frame.columns[:4]) == ["task", "version", "auroc", "auroc_sd"]
    assert len(frame) == 4 * (len(res.tasks) + 1)
    mean = frame[frame.task == "(mean)"].set_index("version")
    for v in ("base", "pca", "pca+ica", "pca+rand"):
        assert mean.loc[v, "auroc"] == pytest.approx(d[v]["auroc"])
        for t in res.tasks:
            row = frame[(frame.task == t.name) & (frame.version == v)].iloc[0]
            assert row["sparsity"] == pytest.approx(d[v]["tasks"][t.name]["sparsity"])
    html = res._repr_html_()
    assert "<script>" not in html


def test_to_frame_without_pandas_is_one_line(monkeypatch):
    import sys

    from actkit._frames import pandas
    from actkit.errors import ActkitError

    monkeypatch.setitem(sys.modules, "pandas", None)          # as if not installed
    with pytest.raises(ActkitError, match=r"^to_frame\(\) needs pandas, which is not installed: pip install pandas$"):
        pandas()


def test_bad_html_paths_are_one_line_before_any_work(tmp_path, capsys):
    missing = tmp_path / "no-such-store.h5"      # never opened: the path check comes first
    (tmp_path / "notes.html").write_text("<!DOCTYPE html><p>mine</p>")
    for bad, words in [(tmp_path / "r.txt", "must end with .html"), (tmp_path / "no" / "r.html", "does not exist"),
                       (tmp_path / "notes.html", "not a page actkit wrote")]:
        for command in (["compare", missing, missing], ["evaluate", missing, "--labels", "x.txt"]):
            assert words in cli_error(capsys, *command, "--html", bad)
    assert "not a page actkit wrote" in cli_error(capsys, "compare", missing, missing, "--html",
                                                  tmp_path / "notes.html", "--overwrite")
    assert (tmp_path / "notes.html").read_text() == "<!DOCTYPE html><p>mine</p>"
    assert "name the same file" in cli_error(capsys, "compare", missing, missing, "--html", tmp_path / "x.html",
                                             "--json", tmp_path / "x.html")


# ------------------------------------------------------------------ in the browser
@pytest.fixture(scope="module")
def chromium():
    yield from chromium_fixture()


def _clean(visit):
    assert visit.errors() == [], visit.errors()
    assert visit.foreign_requests() == [], visit.foreign_requests()
    assert visit.ran() == []


def _column(page, table, n):
    return page.eval_on_selector_all(f"{table} tbody tr", f"rows => rows.map(r => r.children[{n}].textContent)")


def test_compare_page_in_the_browser(stores, chromium, capsys, tmp_path):
    tmp, a, b = stores
    html = tmp_path / "compare.html"
    code, out, err = run_cli(capsys, "compare", a, b, "--html", html, "--bootstrap", "40", "--permutations", "19",
                             "--json", tmp_path / "c.json", "--quiet")
    assert code == 0, err
    saved = json.loads((tmp_path / "c.json").read_text())
    for bypass in (False, True):       # the escaping alone keeps the injected layer name inert
        v = Visit(chromium, html, bypass_csp=bypass)
        _clean(v)
        page = v.page
        assert page.title() == f"actkit compare: {a} -> {b}"
        sections = page.eval_on_selector_all("section h2", "hs => hs.map(h => h.textContent)")
        assert IMG in sections and "l2" in sections and "All pairs" in sections
        assert page.eval_on_selector_all(f"img:not([src^='data:'])", "x => x.length") == 0
        rows = saved[IMG]
        table = "#pair-0 table.measures"
        names = _column(page, table, 0)
        assert names[:4] == ["permutation", "rigid", "linear", "ica"] and "linear_cka" in names
        values = dict(zip(names, _column(page, table, 2)))
        assert float(values["rigid"]) == pytest.approx(rows["rigid"], abs=1e-4)
        interval = dict(zip(names, _column(page, table, 3)))["linear_cka"]
        assert interval == f"[{rows['linear_cka_ci_low']:.3f}, {rows['linear_cka_ci_high']:.3f}]"
        assert float(dict(zip(names, _column(page, table, 4)))["mean_cca"]) == pytest.approx(rows["mean_cca_p"], abs=1e-3)
        page.click(f"{table} th[data-key='value']")          # sort by value, smallest first
        first = _column(page, table, 0)[0]
        numeric = {k: float(x) for k, x in values.items() if x}
        assert first == min(numeric, key=numeric.get) and _column(page, table, 0) != names
        page.click(f"{table} th[data-key='value']")          # again: largest first
        assert _column(page, table, 0)[0] == max(numeric, key=numeric.get)
        k = saved[IMG]["ica_n_components"]
        assert page.eval_on_selector_all("#pair-0 svg.heatmap rect.cell", "x => x.length") == k * k
        v.close()
    shot = tmp_path / "compare.png"
    v = Visit(chromium, html)
    v.page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20000
    v.close()


def test_layer_map_and_matrix_pages_in_the_browser(stores, chromium, capsys, tmp_path):
    _, a, b = stores
    code, _, err = run_cli(capsys, "compare", a, b, "--layer-matrix", "--permutations", "19", "--html",
                           tmp_path / "map.html", "--quiet")
    assert code == 0, err
    v = Visit(chromium, tmp_path / "map.html", bypass_csp=True)
    _clean(v)
    assert v.page.eval_on_selector_all("svg.heatmap rect.cell", "x => x.length") == 4
    ticks = v.page.eval_on_selector_all("svg.heatmap text.tick", "x => x.map(t => t.textContent)")
    assert IMG in ticks and "l2" in ticks
    v.close()
    code, _, err = run_cli(capsys, "compare", a, b, a, "--html", tmp_path / "many.html", "--quiet")
    assert code == 0, err
    v = Visit(chromium, tmp_path / "many.html")
    _clean(v)
    assert v.page.eval_on_selector_all("svg.heatmap", "x => x.length") == 2       # one matrix per layer
    v.close()


def test_evaluate_page_in_the_browser(labelled, chromium, capsys, tmp_path):
    tmp, X, y = labelled
    html = tmp_path / "evaluate.html"
    code, _, err = run_cli(capsys, "evaluate", tmp / "emb.npy", "--labels", tmp / "labels.txt", "--classifier",
                           "logistic", "--n-splits", "2", "--n-rotations", "1", "--html", html, "--json",
                           tmp_path / "e.json", "--quiet")
    assert code == 0, err
    saved = json.loads((tmp_path / "e.json").read_text())
    v = Visit(chromium, html, bypass_csp=True)
    _clean(v)
    page = v.page
    tasks = _column(page, "#tasks table", 0)
    assert sorted(tasks) == sorted(t["name"] for t in saved["tasks"])
    assert "<script>alert(1)</script>" in tasks and IMG in tasks      # shown as text
    auroc = dict(zip(tasks, _column(page, "#tasks table", 1)))
    for name, cell in auroc.items():
        assert float(cell.split(" ")[0]) == pytest.approx(saved["pca+ica"]["tasks"][name]["auroc"], abs=1e-3)
    page.fill("#tasks input[type=search]", "script")
    assert _column(page, "#tasks table", 0) == ["<script>alert(1)</script>"]
    page.fill("#tasks input[type=search]", "")
    page.click("#tasks th[data-key='auroc']")
    shown = [float(c.split(" ")[0]) for c in _column(page, "#tasks table", 1)]
    assert shown == sorted(shown, reverse=True)          # a score sorts best first
    mean = _column(page, "#mean table", 0)
    assert mean == ["Base", "PCA", "PCA+ICA", "PCA+Rand"]
    assert page.eval_on_selector("figure img", "i => i.complete && i.naturalWidth > 100")
    v.close()


def hostile_page(path):
    """A compare page whose every string is hostile (and a figure whose source tries to
    break out of its attribute), written to ``path``."""
    rows = [{"measure": s, "kind": s, "value": 0.5, "note": s} for s in HOSTILE]
    data = {"title": HOSTILE[2], "subtitle": HOSTILE[1], "pairs": [{"label": s, "rows": rows, "notes": HOSTILE,
            "details": {s: s}, "source_correlation": None} for s in HOSTILE],
            "maps": [{"measure": HOSTILE[0], "layers_a": HOSTILE[:2], "layers_b": HOSTILE[1:3],
                      "matrix": [[0.1, 0.2], [0.3, None]], "p": None, "caption": HOSTILE[1]}],
            "figures": [{"title": HOSTILE[1], "src": "x\" onerror=\"window.__pwned=1", "caption": HOSTILE[0]}],
            "conventions": {HOSTILE[0]: HOSTILE[1]}}
    path.write_text(render_page("compare", data, title=HOSTILE[2]))
    return path


def test_a_hostile_string_anywhere_in_the_data_stays_text(chromium, tmp_path):
    """Every string the compare page shows, each made hostile, with the CSP off: nothing runs,
    no element is made from it."""
    path = hostile_page(tmp_path / "hostile.html")
    v = Visit(chromium, path, bypass_csp=True)
    _clean(v)
    text = v.page.inner_text("body")
    assert all(s.split("\u2028")[0] in text for s in HOSTILE[:4])
    assert v.page.eval_on_selector_all("img", "x => x.length") == 0        # the bad figure left out
    assert v.page.evaluate("document.title") == HOSTILE[2]
    v.close()


# ------------------------------------------------------------------ the pages say what the terminal says
def test_the_compare_page_withholds_ica_digits_where_the_table_does(chromium, tmp_path):
    """Gaussian sources: ICA is not identifiable (the halves of the restarts disagree), the
    terminal's table prints ``not identifiable‡`` for the ICA cell and so does the page, with
    no digit of the ICA error or efficiency anywhere in it."""
    import warnings

    from scipy.stats import ortho_group

    from actkit.alignment import format_table
    from actkit.pages import compare_page
    from actkit.pages._views import WITHHELD

    rng = np.random.default_rng(1)
    A = rng.normal(size=(2000, 6)) @ rng.normal(size=(6, 6))
    B = A @ ortho_group.rvs(6, random_state=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, progress=False)
    d = res.to_dict()
    assert d["ica_identifiable"] is False
    assert WITHHELD in format_table([d], ["pair"])
    page = compare_page(res, tmp_path / "c.html", labels=["pair"])
    html = page.read_text()
    for key in ("ica", "ica_efficiency", "ica_std", "ica_efficiency_std"):
        if d.get(key) is not None:
            assert f"{d[key]!r}"[:8] not in html, key
    v = Visit(chromium, page)
    _clean(v)
    cells = v.page.eval_on_selector_all("table.measures tbody tr", "rs => rs.map(r => [r.children[0].textContent, "
                                                                   "r.children[2].textContent])")
    shown = dict(cells)
    assert shown["ica"] == WITHHELD and shown["ica_efficiency"] == WITHHELD
    assert shown["permutation"] == f"{d['permutation']:.4f}"
    v.close()


def test_the_layer_map_colours_span_the_maps_own_range(chromium, tmp_path):
    """Cells of 0.68 to 0.72 get four colours (a scale from 0 made them one), and the colour
    bar's ends are the map's smallest and largest values."""
    data = {"title": "map", "subtitle": "", "pairs": [], "figures": [],
            "maps": [{"measure": "linear_cka", "layers_a": ["a1", "a2"], "layers_b": ["b1", "b2"],
                      "matrix": [[0.68, 0.6933], [0.7067, 0.72]], "p": None, "caption": ""}]}
    (tmp_path / "m.html").write_text(render_page("compare", data, title="map"))
    v = Visit(chromium, tmp_path / "m.html")
    _clean(v)
    fills = v.page.eval_on_selector_all("svg.heatmap rect.cell", "x => x.map(r => r.getAttribute('fill'))")
    assert len(set(fills)) == 4
    ends = v.page.eval_on_selector_all("svg.heatmap text.colorbar-hi, svg.heatmap text.colorbar-lo",
                                       "x => x.map(t => t.textContent)")
    assert ends == ["0.7200", "0.6800"]
    v.close()


def test_the_evaluate_verdict_says_equal_where_the_values_print_the_same():
    from actkit.evaluation import EvaluationResult

    class Values:
        def __init__(self, ica, rand):
            self.d = {"pca+ica": {"auroc": ica, "sparsity": 0.4, "concentration": 0.3},
                      "pca+rand": {"auroc": rand, "sparsity": 0.3, "concentration": 0.3}}

        def to_dict(self):
            return self.d

    line = EvaluationResult.verdict(Values(0.70812, 0.70791))
    assert "auroc 0.708 vs 0.708 (equal)" in line and "sparsity 0.400 vs 0.300 (higher)" in line
    assert "concentration 0.300 vs 0.300 (equal)" in line
    assert "(not higher)" in EvaluationResult.verdict(Values(0.6, 0.7))
