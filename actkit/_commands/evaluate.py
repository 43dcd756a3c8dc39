"""``actkit evaluate EMBEDDINGS --labels SPEC [--control NAME] [--group SPEC] [--json F] [--plot F]``

Does ICA post-processing help downstream? The protocol of Nelson et al. (Tables 3, 4, 6):
Base / PCA / PCA+ICA / PCA+Rand scored by cross-validated AUROC (LightGBM or a logistic
probe), Hoyer sparsity and concentration. Only parsing and a call to
:func:`actkit.evaluate_postprocessing`.
"""

from __future__ import annotations

import sys

import actkit
from actkit._commands._analysis_io import check_block_rows
from actkit.errors import InputError, LayerError


def register(sub) -> None:
    p = sub.add_parser(
        "evaluate", help="does ICA post-processing help? Base / PCA / PCA+ICA / PCA+Rand on labelled embeddings",
        description="Classify every label against a control (or one-vs-rest) with four versions of the "
                    "embeddings: Base, PCA-whitened, PCA+ICA and PCA+random rotation (whitening and ICA fitted "
                    "on training folds only), and report cross-validated mean AUROC, Hoyer sparsity and the "
                    "concentration of the between-class variance in the top 25% of features (Nelson et al., "
                    "Tables 3, 4 and 6; docs/postprocessing.md).")
    p.add_argument("embeddings", metavar="EMBEDDINGS",
                   help="a store (.h5) or an embedding file (.npy, .safetensors, .parquet)")
    p.add_argument("--labels", required=True, metavar="SPEC",
                   help="labels.npy or labels.txt (one label per row); FILE:COLUMN of a .parquet/.arrow file or "
                        "datasets folder; or COLUMN of the EMBEDDINGS parquet or a label column recorded in the "
                        "store (actkit extract --label-column)")
    p.add_argument("--control", metavar="NAME", help="the control label every other label is classified against "
                                                     "(default: one-vs-rest)")
    p.add_argument("--group", metavar="SPEC", help="replicate groups (e.g. guides), read like --labels: each "
                                                   "group is a task, a label's numbers average over its groups")
    p.add_argument("--layer", help="layer of the store (default: its only layer)")
    p.add_argument("--key", help="tensor of a .safetensors embedding file")
    p.add_argument("--column", help="list-of-floats column of a .parquet embedding file")
    p.add_argument("--n-components", type=int, default=None, help="whitened dimensions kept (default: all)")
    p.add_argument("--n-rotations", type=int, default=3, help="Haar-random rotations of PCA+Rand (mean ± sd)")
    p.add_argument("--classifier", choices=["lightgbm", "logistic"], default="lightgbm",
                   help="lightgbm: the paper's Table 6 hyperparameters; logistic: L2 logistic regression probe")
    p.add_argument("--n-splits", type=int, default=5, help="stratified cross-validation folds")
    p.add_argument("--max-train-rows", type=int, default=5000,
                   help="fit each task's classifier on at most this many of the fold's training rows, up to half "
                        "positives, the negatives shared by the tasks against one control (default 5000; 0: all)")
    p.add_argument("--ica-fit-rows", type=int, default=50000,
                   help="fit FastICA on at most this many training rows of each fold (0: all)")
    p.add_argument("--ica-max-iter", type=int, default=200, help="FastICA iterations at most")
    p.add_argument("--seed", type=int, default=0, help="seeds folds, subsets, FastICA and rotations")
    p.add_argument("--max-bin", type=int, default=63,
                   help="LightGBM feature histogram bins (default 63, 2.8x faster fits than LightGBM's own 255 "
                        "AUROC within 0.004 on planted data, docs/postprocessing.md; the paper gives none)")
    p.add_argument("--threads", type=int, default=None,
                   help="classifier fits run at once, one thread each, and the whitening/FastICA thread budget "
                        "(default: actkit's thread policy, the CPUs not busy; same scores at any count)")
    p.add_argument("--block-rows", type=int, default=None, help="rows read per block (default: ~32 MiB)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="one panel per metric, the four versions side by side")
    p.add_argument("--html", metavar="FILE.html", help="write one self-contained page: the table (every task, "
                                                       "sortable) and the figure (docs/pages.md)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing page at --html (only a page "
                                                           "actkit wrote)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.evaluation import read_labels  # actkit.evaluation: ~0.1 s at import (measured); at the top actkit --help would pay it
    from actkit.matrix_files import is_matrix_file, open_source  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    check_block_rows(args.block_rows)
    for flag in ("threads", "n_splits", "n_rotations", "max_train_rows", "ica_fit_rows", "ica_max_iter",
                 "n_components", "max_bin"):
        value = getattr(args, flag)
        low = 0 if flag in ("max_train_rows", "ica_fit_rows") else 2 if flag == "max_bin" else 1
        if value is not None and value < low:
            raise InputError(f"--{flag.replace('_', '-')} must be >= {low}, got {value}")
    store = open_source(args.embeddings, key=args.key, column=args.column,
                        layer=args.layer if is_matrix_file(args.embeddings) else None)
    if args.layer is None:
        if len(store.layers) != 1:
            raise LayerError(f"{args.embeddings} has {len(store.layers)} layers "
                             f"({', '.join(store.layers[:12])}); pick one with --layer")
        args.layer = store.layers[0]
    layer = store[args.layer]
    y = read_labels(args.labels, source=args.embeddings, layer=layer)
    groups = read_labels(args.group, source=args.embeddings, layer=layer, what="--group") if args.group else None
    result = actkit.evaluate_postprocessing(
        layer, y, control=args.control, groups=groups, n_components=args.n_components,
        n_rotations=args.n_rotations, classifier=args.classifier, n_splits=args.n_splits,
        max_train_rows=args.max_train_rows or None, ica_fit_rows=args.ica_fit_rows or None,
        ica_max_iter=args.ica_max_iter, max_bin=args.max_bin, random_state=args.seed, n_jobs=args.threads,
        progress=False if args.quiet else None)
    if not args.quiet:
        print(result.format_table())
    if args.json:
        from actkit._atomic import write_json_atomic  # actkit._atomic (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it

        report = result.to_dict()
        report["source"] = {"embeddings": str(args.embeddings), "layer": args.layer, "labels": args.labels,
                            "group": args.group}
        write_json_atomic(args.json, report, indent=2)
        if not args.quiet:
            print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        from actkit.report import plot_postprocessing  # actkit.report: ~1 s at import (measured); at the top actkit --help would pay it

        plot_postprocessing(result, args.plot, title=f"{args.embeddings}, labels {args.labels}")
        if not args.quiet:
            print(f"wrote {args.plot}", file=sys.stderr)
    if args.html:
        from actkit.pages import evaluate_page  # actkit.pages (actkit.report): ~1 s at import (measured); only --html needs it

        evaluate_page(result, args.html, overwrite=args.overwrite, title=f"actkit evaluate: {args.embeddings}",
                      subtitle=f"layer {args.layer}, labels {args.labels}" + (f", groups {args.group}" if args.group else ""))
        if not args.quiet:
            print(f"wrote {args.html}", file=sys.stderr)
    return 0
