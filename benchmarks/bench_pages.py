"""Size and speed of the units page (issue 41), measured in the browser.

A text unit report of ``--units`` units x ``--k`` examples (top, lowest and three quantile
bands of each unit, the histogram, a logit table, a label and a matched unit): built by
``actkit.units`` on a synthetic store whose rows are tokens of the shipped texts, written with
``UnitReport.to_html``, and opened from ``file://`` in headless chromium (tests/_browser.py):

* page size (bytes on disk; target: under 25 MB at 1,000 units x 20 examples);
* time to interactive: from navigation to the index and the first cards drawn
  (``window.actkitReadyMs``, the page's own ``performance.now()``, and the wall time seen
  from here; target: within 3 s);
* responsiveness: a search (through every unit's examples and logit tokens; 120 ms of it the
  page's wait for the end of typing) and a sort click, until the index shows the result;
  scrolling to the end of the card list until the next cards are drawn (lazily, a few at a
  time; the slowest of three batches).

Run (numbers in docs/pages.md)::

    python benchmarks/bench_pages.py --units 1000 --k 20
    python benchmarks/bench_pages.py --units 100 --k 20 --samples 300    # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class CorpusInputs:
    """Recorded text inputs (the RecordedInputs interface) from word pieces of the shipped
    texts: every sample is ``length`` consecutive words, GPT-2 style (a leading ``Ġ``), its
    text the words each after a space (each token's span: the space and the word)."""

    kind = "text"
    has_text = True

    def __init__(self, n_samples, length):
        words = (REPO / "data/zoo/inputs/text.txt").read_text().split()
        self.vocab = sorted({"\u0120" + w for w in words})
        at = {w: i for i, w in enumerate(self.vocab)}
        flat = [at["\u0120" + w] for w in words]
        need = n_samples * length
        self.ids = np.resize(np.asarray(flat, np.int64), need).reshape(n_samples, length)
        self.n_samples = n_samples
        self.special = np.zeros(len(self.vocab), bool)
        self.tokenizer = {"name": "words of data/zoo/inputs/text.txt"}
        self.fingerprint = "bench-pages"

    def token_ids(self, sample):
        return self.ids[sample]

    def tokens(self, sample):
        return [self.vocab[i] for i in self.ids[sample]]

    def text(self, sample):
        return "".join(" " + self.vocab[i][1:] for i in self.ids[sample])

    def token_spans(self, sample):
        ends = np.cumsum([len(self.vocab[i]) for i in self.ids[sample]])
        return np.stack([ends - [len(self.vocab[i]) for i in self.ids[sample]], ends], 1)


def make_report(folder, units, k, samples, length, seed=0):
    """A unit report of ``units`` units (every piece of the page filled in)."""
    from actkit.store import LayerSpec, create_store
    from actkit import match_units, units as unit_report

    rng = np.random.default_rng(seed)
    inputs = CorpusInputs(samples, length)
    n = samples * length
    index = np.stack([np.repeat(np.arange(samples), length), np.tile(np.arange(length), samples)], 1)
    flat = inputs.ids.ravel()
    V = len(inputs.vocab)

    def write(path, X, params=None):
        w = create_store(path, [LayerSpec("h", n, units, index=index)], n_samples=samples, request={"p": str(path)},
                         inputs_fingerprint="bench-pages", params=params)
        for start in range(0, n, 4096):
            w.append("h", X[start:start + 4096])
        w.checkpoint(samples)
        w.finalize()
        return path

    X = (rng.laplace(size=(n, units)) * 0.3).astype(np.float32)
    X[np.arange(n), flat % units] += 4.0                       # unit j likes the words with id = j mod units
    a = write(folder / "a.h5", X, params={"unembedding": rng.normal(size=(V, units))})
    perm = rng.permutation(units)
    b = write(folder / "b.h5", (X[:, perm] + 0.5 * rng.standard_normal(X.shape)).astype(np.float32))
    labels = np.array(["news", "fiction", "code", "<b>other</b>"])[rng.integers(0, 4, samples)].repeat(length)
    t = time.perf_counter()
    report = unit_report(a, k=k, inputs=inputs, labels=labels, context=8, progress=False)
    report = match_units(report, b, permutations=49, progress=False).report
    return report, time.perf_counter() - t


# timed inside the page (its own clock): typing into the search box until the index shows the
# result (120 ms of it the page's wait for the end of typing), and a click on a header until the
# index is sorted (the click runs the sort and redraws the index before it returns; the cards
# follow after it)
SEARCH = """([q, want]) => new Promise(done => {
  const box = document.getElementById('unit-search'), body = document.querySelector('#index tbody');
  const t = performance.now();
  box.value = q; box.dispatchEvent(new Event('input'));
  (function check() {
    if (body.children.length === want) done(performance.now() - t); else setTimeout(check, 2);
  })();
})"""
MORE = """() => new Promise(done => {
  const list = document.getElementById('card-list'), n = list.children.length, t = performance.now();
  document.querySelector('#cards .sentinel').scrollIntoView();
  (function check() { if (list.children.length > n) done(performance.now() - t); else setTimeout(check, 2); })();
})"""
SORT = """() => { const t = performance.now(); document.querySelector("#index th[data-key='skewness']").click();
  return performance.now() - t; }"""


def measure(path, repeats=3):
    """Open the page ``repeats`` times; the best and median of each timing (ms)."""
    from tests._browser import Visit, browser

    runs = []
    with browser() as b:
        for _ in range(repeats):
            t = time.perf_counter()
            v = Visit(b, path)
            wall = 1000 * (time.perf_counter() - t)
            page = v.page
            ready = page.evaluate("window.actkitReadyMs")
            rows = page.eval_on_selector_all("#index tbody tr", "x => x.length")
            search = page.evaluate(SEARCH, ["qqzz", 0])   # in no example: the whole search text is scanned
            page.evaluate(SEARCH, ["", rows])
            sort = page.evaluate(SORT)
            more = max(page.evaluate(MORE) for _ in range(3))   # the next batch of cards, scrolled to
            cards = page.eval_on_selector_all("#card-list article.card", "x => x.length")
            assert v.errors() == [] and v.foreign_requests() == [], (v.errors(), v.foreign_requests())
            runs.append({"ready_ms": ready, "open_wall_ms": wall, "search_ms": search, "sort_ms": sort,
                         "more_cards_ms": more, "cards_after_scroll": cards, "index_rows": rows})
            v.close()
    keys = [k for k in runs[0] if k.endswith("_ms")]
    return {**{f"{k}_best": round(min(r[k] for r in runs), 1) for k in keys},
            **{f"{k}_median": round(float(np.median([r[k] for r in runs])), 1) for k in keys},
            "index_rows": runs[0]["index_rows"], "cards_after_scroll": runs[0]["cards_after_scroll"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--samples", type=int, default=1200, help="input samples of the synthetic store")
    ap.add_argument("--length", type=int, default=16, help="tokens per sample")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the numbers here")
    ap.add_argument("--keep", metavar="PAGE.html", help="keep the page there (to measure it again with --page)")
    ap.add_argument("--page", metavar="PAGE.html", help="measure this page (kept by --keep) instead of building one")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        if args.page:
            path, out = Path(args.page), {"page": args.page}
        else:
            report, build = make_report(Path(tmp), args.units, args.k, args.samples, args.length)
            t = time.perf_counter()
            path = report.to_html(Path(args.keep or Path(tmp) / "units.html"), overwrite=True)
            out = {"units": len(report), "k": args.k, "rows": args.samples * args.length, "report_s": round(build, 2),
                   "to_html_s": round(time.perf_counter() - t, 2)}
        size = os.path.getsize(path)
        out.update({"page_bytes": size, "page_mb": round(size / 1e6, 2), **measure(path, args.repeats),
                    "load": os.getloadavg()[0]})
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
