"""The units page (issue 41): ``UnitReport.to_html``, ``actkit units --html`` and the
notebook view, opened in headless chromium (tests/_browser.py).

The index lists every unit; sorting, the search (example text, logit tokens) and the filters
(dead, shared, label-selective) change what it shows, checked against the report's own data;
a card shows its highlighted token, its histogram (one bar per bin), its bands, logit lens,
label and matched unit; cards are drawn lazily; image examples show the picture with the
patch boxed; hostile tokens and labels show as text and run nothing, the CSP off too.
"""

from __future__ import annotations


import numpy as np
import pytest

from actkit.pages import units_data
from actkit import match_units, units
from tests._browser import Visit, chromium_fixture
from tests.cli_helpers import cli_error, run_cli
from tests.test_units import TextInputs, _index, _store

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def chromium():
    yield from chromium_fixture()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """40 units over 150 samples x 12 tokens; unit j fires on token j % 30, half of the units
    are echoed (permuted, noisy) by a second store, and one label rides with unit 0; the
    vocabulary and the label names hold markup."""
    tmp = tmp_path_factory.mktemp("units-page")
    rng = np.random.default_rng(0)
    n_samples, length, U, V = 150, 12, 40, 30
    ids = rng.integers(0, V, size=(n_samples, length))
    vocab = [f"w{i}" for i in range(V)]
    vocab[3], vocab[4], vocab[5] = SCRIPT, IMG, "</script><b>x"
    flat = ids.ravel()
    X = rng.laplace(size=(flat.size, U)) * 0.3
    for j in range(U):
        X[flat == (j % V), j] += 4
    X[:, U - 1] = 0.0                                   # a dead unit
    W = rng.normal(size=(V, U))
    a = _store(tmp / "a.h5", X, _index(n_samples, length), params={"unembedding": W})
    Y = rng.normal(size=X.shape)
    Y[:, : U // 2] = X[:, U // 2 - 1::-1] + 0.3 * rng.normal(size=(flat.size, U // 2))
    Y[:, : U // 2: 2] *= -1                             # every other echo negated: the index sorts by |corr|
    b = _store(tmp / "b.h5", Y, _index(n_samples, length))
    names = np.array(["alpha", "<b>beta</b>", IMG])
    labels = names[rng.integers(1, 3, n_samples)].repeat(length)
    labels[flat == 0] = "alpha"
    r = units(a, k=8, inputs=TextInputs(list(ids), vocab), labels=labels, context=4, progress=False)
    r = match_units(r, b, permutations=39, progress=False).report  # a new report, with each unit's match
    return tmp, r, a, b


def _rows(page):
    return page.eval_on_selector_all("#index table.index tbody tr", "rs => rs.map(r => r.children[0].textContent)")


def test_the_page_form_keeps_every_token_and_number(report):
    _, r, _, _ = report
    d = r.to_dict()
    p = units_data(d)
    S = p["strings"]
    assert len(S) == len(set(S))
    for u, q in zip(d["units"], p["units"]):
        for e, f in zip(u["top"], q["top"]):
            assert [S[i] for i in f["t"]] == e["text"]["tokens"] and f["h"] == e["text"]["highlight"]
            assert f["v"] == pytest.approx(e["value"], rel=1e-5)
        assert q["hist"]["counts"] == u["hist"]["counts"]
        assert q["hist"]["edges"] == pytest.approx(u["hist"]["edges"], rel=1e-5)
        if u["logits"]:
            assert [S[t[1]] for t in q["logits"]["promoted"]] == [t[1] for t in u["logits"]["promoted"]]


def test_units_page_in_the_browser(report, chromium, tmp_path):
    _, r, _, _ = report
    d = r.to_dict()
    path = r.to_html(tmp_path / "units.html")
    for bypass in (False, True):
        v = Visit(chromium, path, bypass_csp=bypass)
        assert v.errors() == [] and v.foreign_requests() == [] and v.ran() == []
        page = v.page
        assert _rows(page) == [str(u["unit"]) for u in d["units"]]              # every unit, the report's order
        page.click("#index th[data-key='skewness']")                           # sort: largest first
        skews = [u["skewness"] for u in d["units"]]
        order = sorted(range(len(skews)), key=lambda i: -skews[i])
        assert _rows(page) == [str(d["units"][i]["unit"]) for i in order] != [str(u["unit"]) for u in d["units"]]
        page.click("#index th[data-key='match_corr']")                         # matches: by |corr|, largest first
        by_abs = sorted((u for u in d["units"] if u["match"]), key=lambda u: -abs(u["match"]["corr"]))
        shown = _rows(page)[:len(by_abs)]
        assert [abs(next(u for u in d["units"] if str(u["unit"]) == x)["match"]["corr"]) for x in shown] == \
            [abs(u["match"]["corr"]) for u in by_abs]
        assert any(u["match"]["corr"] < 0 for u in by_abs[:5])  # a negative correlation among the strongest
        # the search: units with the word in an example or the logit table
        word = "w17"

        def has(u):
            exs = u["top"] + u["bottom"] + [e for b in u["bands"] for e in b["examples"]]
            toks = {t for e in exs for t in e["text"]["tokens"]}
            toks |= {t[1] for side in ("promoted", "suppressed") for t in (u["logits"] or {}).get(side, [])}
            return word in toks or any(word in t for t in toks)

        page.fill("#unit-search", word)
        v.wait(f"() => document.querySelectorAll('#index tbody tr').length === {sum(map(has, d['units']))}")
        assert set(_rows(page)) == {str(u["unit"]) for u in d["units"] if has(u)}
        page.fill("#unit-search", SCRIPT.lower())
        v.wait("() => document.querySelectorAll('#index tbody tr').length > 0")
        page.fill("#unit-search", "")
        v.wait(f"() => document.querySelectorAll('#index tbody tr').length === {len(d['units'])}")
        for key, want in [("dead", [u for u in d["units"] if u["dead"]]),
                          ("shared", [u for u in d["units"] if (u["match"] or {}).get("shared")]),
                          ("selective", [u for u in d["units"] if u["label"] and u["label"]["auroc"] >= 0.9])]:
            page.check(f"#filter-{key}")
            assert sorted(_rows(page), key=int) == sorted((str(u["unit"]) for u in want), key=int), key
            assert 0 < len(want) < len(d["units"]), key
            page.uncheck(f"#filter-{key}")
        assert len(_rows(page)) == len(d["units"])
        v.close()


def test_a_card_shows_its_token_histogram_bands_lens_label_and_match(report, chromium, tmp_path):
    _, r, _, _ = report
    d = r.to_dict()
    path = r.to_html(tmp_path / "units.html")
    v = Visit(chromium, path, bypass_csp=True)
    page = v.page
    # lazy: a first batch of cards, more on scrolling
    first = page.eval_on_selector_all("#card-list article.card", "x => x.length")
    assert 0 < first < len(d["units"])
    page.eval_on_selector("#cards .sentinel", "s => s.scrollIntoView()")
    v.wait(f"() => document.querySelectorAll('#card-list article.card').length > {first}")
    u = next(u for u in d["units"] if u["unit"] == 3)                          # fires on the <script> token
    page.click(f"#index tbody tr:nth-child({[x['unit'] for x in d['units']].index(3) + 1})")
    card = "#card-focus article.card[data-unit='3']"
    page.wait_for_selector(card)
    hi = page.eval_on_selector_all(f"{card} .examples:first-of-type .tok.hi", "x => x.map(t => t.textContent)")
    assert hi == [e["text"]["tokens"][e["text"]["highlight"]] for e in u["top"]] == [SCRIPT] * len(u["top"])
    bars = page.eval_on_selector_all(f"{card} svg.histogram rect.bar", "x => x.length")
    assert bars == len(u["hist"]["counts"])
    bands = page.eval_on_selector_all(f"{card} .examples h4", "x => x.map(h => h.textContent)")
    assert sum(t.startswith("Band") for t in bands) == len(u["bands"])
    lens = page.eval_on_selector_all(f"{card} .logits tbody tr", "rs => rs.map(r => r.children[0].textContent)")
    assert lens[0] == u["logits"]["promoted"][0][1]
    text = page.inner_text(card)
    assert u["label"]["name"] in text and f"unit {u['match']['unit']}" in text and "correlation" in text
    assert "|corr|" in text and "(shared: p < 0.05 and |corr| >= 0.5)" in text
    assert f">3 SD {100 * u['beyond_3sd']:.1f}%" in text  # a dense unit: the share beyond 3 SD, not "active 100%"
    assert page.eval_on_selector_all("img", "x => x.length") == 0 and v.ran() == []
    page.locator(card).screenshot(path=str(tmp_path / "card.png"))
    assert (tmp_path / "card.png").stat().st_size > 10000
    dead = next(x for x in d["units"] if x["dead"])
    page.click(f"#index tbody tr:nth-child({[x['unit'] for x in d['units']].index(dead['unit']) + 1})")
    page.wait_for_selector(f"#card-focus article.card[data-unit='{dead['unit']}']")
    assert "never active" in page.inner_text(f"#card-focus article.card[data-unit='{dead['unit']}']")
    v.close()


class ImageInputs:
    """Recorded image inputs (the RecordedInputs interface): 8x8 RGB pictures."""

    kind = "image"

    def __init__(self, n):
        rng = np.random.default_rng(3)
        self.pictures = rng.integers(0, 255, size=(n, 8, 8, 3), dtype=np.uint8)
        self.n_samples = n
        self.fingerprint = "inputs-1"

    def image(self, sample):
        return self.pictures[sample]


def test_image_examples_show_the_picture_with_the_patch_boxed(chromium, tmp_path):
    """A ViT-like layer: a CLS token, then a 4 x 4 grid of patches; unit 0 fires on patch 5."""
    rng = np.random.default_rng(4)
    n, positions = 30, 17
    X = rng.normal(size=(n * positions, 3)) * 0.1
    X[np.arange(n) * positions + 1 + 5, 0] = 5
    path = _store(tmp_path / "img.h5", X, _index(n, positions))
    r = units(path, k=3, inputs=ImageInputs(n), order="index", progress=False)
    ex = r.unit(0)["top"][0]["image"]
    assert ex["cell"] == [1, 1]
    v = Visit(chromium, r.to_html(tmp_path / "img.html"))
    assert v.errors() == [] and v.foreign_requests() == []
    page = v.page
    v.wait("() => Array.from(document.querySelectorAll(\"article[data-unit='0'] .pic img\")).every(i => i.complete)")
    box = page.eval_on_selector("#card-list article[data-unit='0'] .pic .patch",
                                "p => { const r = p.getBoundingClientRect(), q = p.parentNode.getBoundingClientRect();"
                                " return [(r.top - q.top) / q.height, (r.left - q.left) / q.width, r.height / q.height] }")
    assert box == pytest.approx([0.25, 0.25, 0.25], abs=0.03)     # row 1, column 1 of 4 x 4
    v.close()


def test_cli_units_html_and_the_notebook_view(report, chromium, tmp_path, capsys):
    _, r, a, _ = report
    out = tmp_path / "u.html"
    code, _, err = run_cli(capsys, "units", a, "--no-inputs", "-k", "3", "--html", out, "--quiet")
    assert code == 0, err
    v = Visit(chromium, out)
    assert v.errors() == [] and len(_rows(v.page)) == 40
    v.close()
    assert "exists (an actkit page): pass --overwrite" in cli_error(capsys, "units", a, "--no-inputs", "--html", out)
    assert "must end with .html" in cli_error(capsys, "units", a, "--no-inputs", "--html", tmp_path / "u.json")
    view = r._repr_html_()
    assert "<table" in view and "<iframe srcdoc=" in view and SCRIPT not in view
    host = tmp_path / "notebook.html"
    host.write_text("<!DOCTYPE html><html><body>" + view + "</body></html>")
    ctx = chromium.new_context()
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host.resolve().as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for()
    assert frame.locator("#index tbody tr").count() == 6            # the first six units
    assert frame.locator("article.card[data-unit]").count() >= 1 and errors == []
    ctx.close()


# ---------------------------------------------------------------------------- real text
WS_SHOWN = {"\t": "\u2192"}


def _lines(text):
    import re

    return re.sub(r"\r\n|[\n\r\u2028\u2029]", "\u21b5", text)


def _visible(text):
    return "".join("\u21b5" if c in "\n\r\u2028\u2029" else WS_SHOWN.get(c, "\u2423") for c in text)


def _drawn(text):
    """What the page draws of a text example (docs/pages.md): the context's characters, line
    breaks as ↵, a space token as ␣, a token without characters as its piece."""
    from actkit.pages._units import pieces

    out = "\u2026" if text["start"] > 0 else ""
    for p in pieces(text["context"], text["token_spans"]):
        if len(p) == 1:
            out += _lines(p[0])
        elif p[0] == "":
            out += text["tokens"][p[1]]
        elif not p[0].strip():
            out += _visible(p[0])
        else:
            out += _lines(p[0])
    return out


@pytest.fixture(scope="module")
def real_text(tmp_path_factory):
    """Pythia-tiny (the zoo's, a byte-level BPE) on lines with quotes, emoji, CJK, Arabic,
    markup and U+2028; a second store of the same rows where unit 0 fires on space tokens and
    unit 1 inside the word InterpolationSyntaxError."""
    import actkit
    from actkit.store import LayerSpec, create_store
    from tests.test_units_text import LINES, ZOO

    tmp = tmp_path_factory.mktemp("units-text")
    corpus = tmp / "lines.txt"
    corpus.write_text("\n".join(LINES * 2) + "\n", encoding="utf-8")
    path = actkit.extract(str(ZOO / "pythia-tiny-seed0"), str(corpus), tmp / "p.h5", layers=["gpt_neox.layers.1"],
                          unembedding=True, progress=False)
    s = actkit.open_store(path)
    layer = s["gpt_neox.layers.1"]
    X, index = np.asarray(layer[:]), layer.index
    rec = s.inputs
    ids = np.array([rec.token_ids(int(a))[int(p)] for a, p in index])
    space = np.array([not rec.vocab[i].strip() for i in ids])
    assert space.sum() >= 5
    X[:, 0] = np.where(space, 10.0, 0.0) + 0.01 * X[:, 0]
    word = [i for i, line in enumerate(LINES * 2) if line.startswith("InterpolationSyntaxError")]
    X[:, 1] = np.where(np.isin(index[:, 0], word) & np.isin(index[:, 1], [6, 7]), 10.0, 0.0) + 0.01 * X[:, 1]
    spaced = tmp / "spaces.h5"
    w = create_store(spaced, [LayerSpec("h", X.shape[0], X.shape[1], index=index)], n_samples=s.n_samples,
                     request={"p": "spaces"}, inputs_fingerprint=s.inputs_fingerprint, inputs=rec.as_record())
    w.append("h", X.astype(np.float32))
    w.checkpoint(s.n_samples)
    w.finalize()
    return path, spaced


def _unit_text(u):
    """A unit's searchable text as the page gathers it: its examples' contexts, the token
    strings of its examples, top tokens and logit tables."""
    exs = u["top"] + u["bottom"] + [e for b in u["bands"] for e in b["examples"]]
    parts = [e["text"]["context"] for e in exs] + [t for e in exs for t in e["text"]["tokens"]]
    parts += [t["token"] for t in (u["top_tokens"] or {}).get("tokens", [])]
    parts += [t[1] for side in ("promoted", "suppressed") for t in (u["logits"] or {}).get(side, []) if t[1]]
    return "\u0000".join(parts).lower()


def test_real_text_draws_its_characters_shaded_and_searchable(real_text, chromium, tmp_path):
    """The page draws each context as its characters (quotes, emoji, CJK, Arabic as they are),
    each token shaded by the unit's value (the value on hover); a word over several tokens is
    found, case aside; markup in the corpus is text; nothing runs, with the CSP off too."""
    path, _ = real_text
    r = units(path, k=5, context=4, k_tokens=50, progress=False)
    d = r.to_dict()
    page_path = r.to_html(tmp_path / "text.html")
    for bypass in (False, True):
        v = Visit(chromium, page_path, bypass_csp=bypass)
        assert v.errors() == [] and v.foreign_requests() == [] and v.ran() == []
        page = v.page
        # the index's top token: the most frequent token of the unit's highest rows, with its count
        tops = page.eval_on_selector_all("#index tbody tr", "rs => rs.map(r => r.children[2].textContent)")
        want_tops = []
        for u in d["units"]:
            t = u["top_tokens"]["tokens"][0]
            seen = "".join("\u21b5" if c in "\n\r\u2028\u2029" else "\u2192" if c == "\t" else "\u2423" if c.isspace()
                           else c for c in t["token"])
            want_tops.append(f"{seen} ({t['count']}/{u['top_tokens']['rows']})")
        assert tops == want_tops
        page.fill("#unit-search", "<script>")
        hostile = {str(u["unit"]) for u in d["units"] if "<script>" in _unit_text(u)}
        v.wait(f"() => document.querySelectorAll('#index tbody tr').length === {len(hostile)}")
        assert hostile and set(_rows(page)) == hostile
        page.fill("#unit-search", "")
        v.wait(f"() => document.querySelectorAll('#index tbody tr').length === {len(d['units'])}")
        # a card: every example drawn as its characters (markup as text; emoji, beyond U+FFFF,
        # cut where the page counts UTF-16 code units)
        emoji = next(u for u in d["units"] if "\U0001F600" in _unit_text(u) and str(u["unit"]) not in hostile)
        for u in (emoji, next(u for u in d["units"] if str(u["unit"]) in hostile)):
            page.click(f"#index tbody tr:nth-child({[x['unit'] for x in d['units']].index(u['unit']) + 1})")
            card = f"#card-focus article.card[data-unit='{u['unit']}']"
            page.wait_for_selector(card)
            drawn = page.eval_on_selector_all(f"{card} .ex .ctx", "x => x.map(c => c.textContent)")
            exs = u["top"] + [e for b in u["bands"] for e in b["examples"]] + u["bottom"]
            assert drawn == [_drawn(e["text"]) for e in exs]
        assert any("<script>" in t for t in drawn)
        titles = page.eval_on_selector_all(f"{card} .ex .tok", "x => x.map(t => t.title)")
        values = [a for e in exs for a in e["text"]["acts"]]
        assert len(titles) >= len(exs) and all(" = " in t for t in titles)
        shaded = page.eval_on_selector_all(f"{card} .ex .tok", "x => x.filter(t => t.style.backgroundColor).length")
        assert shaded > len(exs) and max(map(abs, values)) > 0
        assert page.eval_on_selector_all(f"{card} .toptokens tbody tr", "x => x.length") == \
            min(8, len(u["top_tokens"]["tokens"]))
        v.close()
    # every context reached the page's data as its characters, whatever they are
    want = [[e["text"]["context"] for e in u["top"] + [x for b in u["bands"] for x in b["examples"]] + u["bottom"]]
            for u in d["units"]]
    v = Visit(chromium, page_path)
    got = v.page.evaluate("() => JSON.parse(document.getElementById('actkit-data').textContent).units.map(u => "
                          "u.top.concat([].concat(...u.bands.map(b => b.examples)), u.bottom)"
                          ".map(e => e.c))")
    assert got == want
    flat = "".join(c for u in want for c in u)
    assert sum(char in flat for char in "\u201c\U0001F600\u4e2d\u0627<") >= 3
    v.close()


def test_a_word_over_tokens_is_found_and_a_space_token_is_visible(real_text, chromium, tmp_path):
    """Unit 1 of the planted store fires inside InterpolationSyntaxError, a word of several
    tokens: the search finds it, case aside. Unit 0 fires on space tokens only: each top
    example's highlighted token is drawn as ␣ (not an invisible sliver), a character wide."""
    _, spaced = real_text
    r = units(spaced, k=6, context=8, order="index", max_units=3, progress=False)
    d = r.to_dict()
    word = "interpolationSYNTAXerror"
    want = {str(u["unit"]) for u in d["units"] if word.lower() in _unit_text(u)}
    assert "1" in want
    assert not any(word.lower() in t.lower() for u in d["units"] for e in u["top"] for t in e["text"]["tokens"])
    u = r.unit(0)
    assert all(not e["text"]["context"][slice(*e["text"]["span"])].strip() for e in u["top"])
    v = Visit(chromium, r.to_html(tmp_path / "spaces.html"))
    card = "#card-list article.card[data-unit='0'] .examples:first-of-type"
    hi = v.page.eval_on_selector_all(f"{card} .tok.hi", "x => x.map(t => [t.textContent, t.getBoundingClientRect().width])")
    assert len(hi) == len(u["top"])
    for text, width in hi:
        assert set(text) <= {"\u2423", "\u21b5", "\u2192"} and text and width >= 6
    v.page.fill("#unit-search", word)      # the cards then follow the index: unit 1's alone
    v.wait(f"() => document.querySelectorAll('#index tbody tr').length === {len(want)}")
    assert set(_rows(v.page)) == want
    v.close()


def test_32_vit_units_at_k8_fit_in_20000_pixels(chromium, tmp_path):
    """ViT-tiny (zoo, seed 0), its last layer on 64 shapes images, 32 ICA sources at k = 8:
    image examples are a grid of thumbnails (top, bands, lowest), each with its patch boxed;
    the page with every card drawn is under 20,000 px tall (measured in chromium)."""
    import actkit
    from actkit import zoo

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), tmp_path / "v.h5",
                       layers=["encoder.layer.3"], max_samples=64, progress=False)
    ica = actkit.FastICA(n_components=32, random_state=0).fit(actkit.open_store(v)["encoder.layer.3"])
    r = units(v, basis=ica, k=8, progress=False)
    d = r.to_dict()
    assert len(d["units"]) == 32
    assert d["units"][0]["top_tokens"]["tokens"][0]["token"].startswith(("patch (", "CLS"))
    visit = Visit(chromium, r.to_html(tmp_path / "vit.html"))
    page = visit.page
    for _ in range(40):
        if page.eval_on_selector_all("#card-list article.card", "x => x.length") == 32:
            break
        page.eval_on_selector("#cards .sentinel", "s => s.scrollIntoView()")
        page.wait_for_timeout(100)
    assert page.eval_on_selector_all("#card-list article.card", "x => x.length") == 32
    visit.wait("() => Array.from(document.images).every(i => i.complete)")
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height < 20000, height
    thumbs = page.eval_on_selector_all("#card-list article.card:first-child figure.thumb", "x => x.length")
    u = d["units"][0]
    assert thumbs == len(u["top"]) + len(u["bottom"]) + sum(len(b["examples"]) for b in u["bands"])
    boxes = page.eval_on_selector_all("#card-list article.card:first-child .thumbs .patch", "x => x.length")
    assert boxes == sum(1 for e in u["top"] + u["bottom"] + [x for b in u["bands"] for x in b["examples"]]
                        if e["image"]["box"] is not None)
    assert visit.errors() == []
    visit.close()
    print(f"32 ViT units at k = 8: {height} px")
