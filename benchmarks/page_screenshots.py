"""The screenshots of docs/pages.md (and docs/compare.md), made the way the tests open pages:
headless chromium from ``file://`` (tests/_browser.py), no network.

* ``docs/compare-page.png``: ``actkit compare`` of the two shipped Pythia-tiny seeds (two
  layers, 99 permutations, 200 bootstrap resamples) with the layer map;
* ``docs/evaluate-page.png``: ``actkit evaluate`` on planted sparse factors (tests/test_evaluate.py's);
* ``docs/units-page.png``, ``docs/units-card.png``: the ICA units of Pythia-tiny seed 0's final
  hidden state on the shipped texts, with the logit lens and their matches in seed 1's ICA;
* ``docs/units-vit-card.png``: the most skewed of 32 ICA units of ViT-tiny seed 0's last layer
  on the zoo's shapes images, each example the recorded image with its patch boxed.

The stores record their inputs (token ids and the tokenizer), so each example is shown as the
text it came from.

Run::

    python benchmarks/page_screenshots.py --out docs
    python benchmarks/page_screenshots.py --out docs --pages vit   # only the ViT card
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
    ap.add_argument("--pages", choices=["all", "vit"], default="all")
    args = ap.parse_args(argv)
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="screens-") as tmp:
        tmp = Path(tmp)
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
