"""``actkit compare``: do two checkpoints learn the same representation, up to which map?

Forms::

    actkit compare STORE_A STORE_B [--layer-a L] [--layer-b L] [--json OUT] [--plot OUT.png]
    actkit compare STORE_1 STORE_2 STORE_3 ... [--metric rigid]       # pairwise matrix
    actkit compare MODEL_A MODEL_B --inputs PATH --layers L1,L2       # extract, then compare

Only parsing and calls to the public API (:func:`actkit.compare`,
:func:`actkit.alignment.compare_many`, :func:`actkit.extract`, :mod:`actkit.report`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import warnings

import actkit
from actkit._commands._analysis_io import add_scheduler_argument, cluster
from actkit._commands._preflight import plot_targets
from actkit._device import is_accelerator, resolve_device
from actkit.errors import ActkitError, InputError, StoreError


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="alignment errors (permutation, rigid, linear, ICA), CKA and CCA between models",
        description="Compare the representations of two (or more) models on the same inputs: "
                    "held-out errors of the permutation, rigid, linear and ICA alignments "
                    "(Nelson et al., Table 1), ICA efficiency, linear CKA and mean CCA.")
    _add_source_arguments(p)
    _add_output_arguments(p)
    _add_alignment_arguments(p)
    _add_row_and_uncertainty_arguments(p)
    add_scheduler_argument(p)
    p.set_defaults(func=run)


def _add_source_arguments(p) -> None:
    """compare's sources: stores, embedding files or models (with --inputs), their layers, the extraction's settings and the device."""
    p.add_argument("sources", nargs="*", metavar="STORE_OR_MODEL",
                   help="two or more stores (.h5) or embedding files (.npy, .safetensors, .parquet); "
                        "with --inputs, two or more models")
    p.add_argument("--key", help="tensor of .safetensors embedding files (needed when one holds several)")
    p.add_argument("--column", help="list-of-floats column of .parquet embedding files")
    p.add_argument("--layer-a", help="layer of the first store (default: layers in common)")
    p.add_argument("--layer-b", help="layer of the second store (default: same as --layer-a)")
    p.add_argument("--layers", help="comma-separated layers to compare (in every store); "
                                    "required with --inputs")
    p.add_argument("--inputs", help="compare models directly: extract both on these inputs "
                                    "(text/jsonl/image folder/npy), then compare each layer")
    p.add_argument("--pool", default="none", choices=["none", "mean", "last", "cls"],
                   help="with --inputs: token pooling of the extraction (default none)")
    p.add_argument("--max-samples", type=int, help="with --inputs: use the first N inputs (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="with --inputs: batch size")
    p.add_argument("--device", default="cpu",
                   help="torch device of the FastICA fits, of the row-based measures (--measures) "
                        "and, with --inputs, of the extraction (e.g. cuda)")


def _add_output_arguments(p) -> None:
    """compare's measures and outputs: --measures, --list-measures, --max-rows, --work-dir, --json, --plot, --html, --overwrite, --metric."""
    p.add_argument("--measures", metavar="NAMES",
                   help="more measures, each a column of the table and a key of --json: comma-"
                        "separated names with optional parameters, e.g. procrustes,rsa,mutual_knn:k=5,"
                        "shape_metric:alpha=0.5 (see --list-measures and docs/measures.md)")
    p.add_argument("--list-measures", action="store_true",
                   help="print every measure (name, kind, invariances, out of core or sampled, "
                        "parameters, reference, convention) and exit. The CCA family (mean_cca, "
                        "svcca, pwcca) averages over the min(rank A, rank B) canonical correlations; "
                        "google/svcca's code over min(Da, Db), so the two differ by 5e-4 to 2e-3 on "
                        "rank-deficient sides such as LayerNorm outputs (docs/measures.md)")
    p.add_argument("--max-rows", type=int, default=10000, metavar="N",
                   help="rows of the seeded sample (whole input samples) of the row-based measures "
                        "(default 10000)")
    p.add_argument("--work-dir", help="with --inputs: keep the extracted stores here "
                                      "(default: a temporary folder, deleted afterwards)")
    p.add_argument("--json", metavar="OUT.json", help="write the results (to_dict) as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="draw errors per method and layer and "
                                                     "the matched-source correlation matrix")
    p.add_argument("--html", metavar="OUT.html",
                   help="write one self-contained page: every measure with its interval and p-value, the "
                        "notes, the ICA source correlations, the layer map or pairwise matrix (docs/pages.md)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing page at --html (only a page actkit wrote)")
    p.add_argument("--metric", default="rigid",
                   help="more than two stores: the metric of the pairwise matrix (any key of "
                        "the JSON results, e.g. rigid, ica, linear_cka, mean_cca; default rigid)")


def _add_alignment_arguments(p) -> None:
    """the split and the alignments: --eval-fraction, the seeds, the ICA options, --alpha, --diameter-max-rows, --methods."""
    p.add_argument("--eval-fraction", type=float, default=0.2,
                   help="share of input samples held out for the errors (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split (and of row sampling)")
    p.add_argument("--ica-seed", type=int, default=0,
                   help="seed of the first FastICA start (starts use ica-seed..ica-seed+R-1; default 0)")
    p.add_argument("--ica-method", choices=["best", "consensus"], default="best",
                   help="best (default): each side keeps its fit of largest FastICA contrast, every "
                        "source matched, with a reproducibility check (ica_identifiable); consensus: "
                        "only sources pairs of restarts agree on are matched (docs/definitions.md)")
    p.add_argument("--alpha", type=_alpha_arg, default=0.0,
                   help="ridge penalty of the linear map (0: plain least squares), or 'gcv': chosen "
                        "by generalised cross-validation on the fit rows")
    p.add_argument("--ica-max-rows", type=_ica_rows_arg, default="auto",
                   help="FastICA fits on at most this many rows per side (default auto: "
                        "max(20000, 50 k, k^2/4) for k components, at most 1 GiB per side)")
    p.add_argument("--ica-n-components", "--ica-components", dest="ica_n_components", type=int, metavar="K",
                   help="forces the ICA components per side (default: min(Da, Db) where the "
                        "FastICA rows support it by max(50 k, k^2/4), else the k' they support, "
                        "with a note)")
    p.add_argument("--ica-max-iter", type=int, default=200,
                   help="FastICA iterations per side (default 200); non-convergence is noted")
    p.add_argument("--ica-restarts", type=_restarts_arg, default=5, metavar="R",
                   help="FastICA random starts per side (default 5); the error's spread over "
                        "the pairings is ica_std, the mean over single starts ica_classic; 1 = "
                        "the classic ICA alignment (one draw among FastICA's local optima)")
    p.add_argument("--ica-tol", type=float, default=1e-4,
                   help="FastICA tolerance (largest gradient entry; default 1e-4)")
    p.add_argument("--diameter-max-rows", type=int, default=10000,
                   help="diam(B) is exact up to this many held-out rows, else estimated on a "
                        "random subset of that size (recorded); 0 = always exact")
    p.add_argument("--methods", default=None,
                   help="comma-separated subset of permutation,rigid,linear,ica (default: all four for "
                        "two stores; with more, only what --metric needs)")


def _add_row_and_uncertainty_arguments(p) -> None:
    """the softmax distances, the resampling (--permutations, --bootstrap, --confidence, --interval), the layer map, the rows left out, --quiet and --verify."""
    p.add_argument("--softmax-labels", metavar="IDS",
                   help="also compute the softmax-model distances (d_KL, d_LLV, d_SVD) from the "
                        "stores' 'final_hidden' layer and 'unembedding' parameter, restricted "
                        "to these label (token) ids: comma-separated, or a file of ids")
    p.add_argument("--permutations", default="0", metavar="N",
                   help="permutation p-values of every measure: N re-pairings of B's input samples "
                        "against A's (whole samples of equal length: positions within a sample stay "
                        "paired; seeded by --seed; default 0: none); fewer than 19 cannot reach "
                        "p < 0.05 (noted)")
    p.add_argument("--bootstrap", default="0", metavar="M",
                   help="bootstrap intervals: M resamples of the input samples (errors: of the "
                        "held-out samples, maps fixed; default 0: none); at least 2 / (1 - "
                        "confidence) (40 at 0.95), under 100 noted as noisy; 1000 for numbers you report")
    p.add_argument("--confidence", default="0.95", metavar="C",
                   help="level of the bootstrap intervals, in (0, 1) (default 0.95)")
    p.add_argument("--interval", default="basic", metavar="{basic,percentile}",
                   help="bootstrap interval: basic (default; carries CKA's finite-sample bias) or "
                        "percentile (docs/compare.md, Uncertainty)")
    p.add_argument("--compact", action="store_true",
                   help="print values only, without the intervals and p-values of --bootstrap / "
                        "--permutations (the JSON keeps them)")
    p.add_argument("--layer-matrix", action="store_true",
                   help="two stores: the map of a measure between every layer of A and every "
                        "layer of B (a store against itself: the self-similarity map); prints "
                        "the matrix, --plot draws it, --json writes it; with --permutations, "
                        "cells with p > 0.05 are marked")
    p.add_argument("--drop-special-tokens", action="store_true",
                   help="leave the rows of the tokenizer's special tokens ([CLS], [SEP], BOS, EOS) out, found in "
                        "the stores' recorded inputs")
    p.add_argument("--drop-positions", metavar="P[,P...]",
                   help="leave the rows at these token positions of every sample out (0: the first, -1: the "
                        "last), e.g. 0,-1 for stores without recorded inputs")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--verify", action="store_true",
                   help="check the stores against their checksums first (reads every row once)")


def _split_list(text):
    return [x.strip() for x in str(text).split(",") if x.strip()]


def _positions_arg(text):
    try:
        return [int(x) for x in _split_list(text)]
    except ValueError:
        raise InputError(f"--drop-positions takes token positions like 0,-1, got {text!r}") from None


def _drop_rows(args, store):
    """``store`` without the rows --drop-special-tokens / --drop-positions leave out."""
    if not (args.drop_special_tokens or args.drop_positions):
        return store
    from actkit.store import RowsDropped  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    return RowsDropped(store, special_tokens=args.drop_special_tokens, positions=args.drop_positions)


def _layer_pairs(args, store_a, store_b):
    from actkit.store import common_layers  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    if args.layer_a or args.layer_b:
        la = args.layer_a or args.layer_b
        lb = args.layer_b or la
        return [(la, lb)]
    if args.layers:
        return [(x, x) for x in _split_list(args.layers)]
    return common_layers(store_a, store_b)


def _check_stores(stores, paths):
    fp = [s.inputs_fingerprint for s in stores]
    for path, f in zip(paths[1:], fp[1:]):
        if fp[0] and f and f != fp[0]:
            raise StoreError(f"{paths[0]} and {path} were extracted from different inputs "
                             f"(inputs fingerprints differ): compare stores of the same inputs")


def _check_layer_rows(la, lb, name_a, name_b):
    if la.shape[0] != lb.shape[0]:
        raise StoreError(f"layer {name_a} has {la.shape[0]} rows but {name_b} has "
                         f"{lb.shape[0]}: the stores do not hold the same inputs and tokens")


def _write_json(path, obj):
    from actkit._atomic import write_json_atomic  # actkit._atomic (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it

    write_json_atomic(path, obj, indent=2, allow_nan=False)


def _write_html(args, results=(), **page):
    """``--html``: the page of what was computed (:func:`actkit.pages.compare_page`)."""
    from actkit.pages import compare_page  # actkit.pages (actkit.report): ~1 s at import (measured); only --html needs it

    compare_page(results, args.html, overwrite=args.overwrite, **page)
    if not args.quiet:
        print(f"wrote {args.html}", file=sys.stderr)


def _labels_ids(text):
    import numpy as np  # numpy: ~0.05 s at import (measured); at the top actkit --help would pay it

    if os.path.isfile(text):
        with open(text) as f:
            text = f.read().replace("\n", ",")
    try:
        ids = [int(x) for x in _split_list(text)]
    except ValueError:
        raise InputError(f"--softmax-labels must be comma-separated integer ids or a file of "
                         f"them, got {text[:40]!r}") from None
    if len(ids) < 3:
        raise InputError("--softmax-labels needs at least 3 label ids")
    return np.asarray(ids)


def _softmax(args, store_a, store_b, path_a, path_b):
    from actkit.metrics import softmax_distances_from_stores  # ~0.1 s at import (h5py, measured); at the top actkit --help would pay it

    return softmax_distances_from_stores(store_a, store_b, _labels_ids(args.softmax_labels),
                                         random_state=args.seed)


def run(args) -> int:
    if args.list_measures:
        from actkit.measures import format_measure_table  # ~0.07 s at import (numpy, measured); at the top actkit --help would pay it

        print(format_measure_table())
        return 0
    if len(args.sources) < 2:
        raise ActkitError("compare needs at least two stores (or two models with --inputs)")
    if args.measures:
        from actkit.measures import parse_measures  # ~0.07 s at import (numpy, measured); at the top actkit --help would pay it

        parse_measures(args.measures)        # an unknown name or a bad parameter: before any work
        if args.max_rows < 2:
            raise ActkitError(f"--max-rows must be an integer >= 2, got {args.max_rows}")
    methods = _split_list(args.methods or ",".join(_ALL_METHODS))
    _resampling_args(args)
    if args.layer_matrix and len(args.sources) != 2:
        raise InputError("--layer-matrix compares exactly two stores (the same one twice for the "
                         "self-similarity map)")
    if args.layer_matrix and args.inputs:
        raise InputError("--layer-matrix compares two stores; extract them first (actkit extract)")
    if args.softmax_labels:
        _labels_ids(args.softmax_labels)      # refuse bad ids before any work

    if is_accelerator(args.device):
        resolve_device(args.device)   # a bad device fails before any work

    args.drop_positions = _positions_arg(args.drop_positions) if args.drop_positions else None
    if args.inputs and (args.drop_special_tokens or args.drop_positions):
        raise InputError("--drop-special-tokens and --drop-positions read stores; with --inputs, extract with "
                         "actkit extract --skip-special-tokens first")
    with cluster(args):   # --scheduler: the comparisons run on Dask (an extraction stays here)
        if args.inputs:
            return _run_models(args, methods)
        return _run_stores(args, args.sources, methods)


_ALL_METHODS = ("permutation", "rigid", "linear", "ica")


def _matrix_methods(metric, methods, explicit):
    """The alignment methods a pairwise matrix of ``metric`` needs fitted: the metric's own
    method, all three of ``ica_efficiency``, ICA for the matched-source correlations, none
    for the similarities and the diameter (they come from the moments). With ``--methods``
    given, those of it; a needed method it leaves out is a one-line error."""
    if metric in _ALL_METHODS:
        need = [metric]
    elif metric == "ica_efficiency":
        need = ["permutation", "rigid", "ica"]
    elif metric.startswith("ica_"):
        need = ["ica"]
    else:
        need = []
    if explicit:
        missing = [m for m in need if m not in methods]
        if missing:
            raise InputError(f"--metric {metric} needs the method(s) {', '.join(missing)}; add them to "
                             "--methods (or leave --methods out)")
    return [m for m in _ALL_METHODS if m in need]


def _compare_kwargs(args, methods):
    return dict(eval_fraction=args.eval_fraction, random_state=args.seed, alpha=args.alpha,
                ica_max_rows=args.ica_max_rows, ica_max_iter=args.ica_max_iter, methods=methods,
                ica_restarts=args.ica_restarts, ica_method=args.ica_method, ica_seed=args.ica_seed,
                ica_n_components=args.ica_n_components, ica_tol=args.ica_tol,
                diameter_max_rows=args.diameter_max_rows or None, device=args.device,
                measures=args.measures or None, max_rows=args.max_rows,
                progress=False if args.quiet else None, permutations=args.permutations,
                bootstrap=args.bootstrap, confidence=args.confidence, interval=args.interval)


def _resampling_args(args):
    """``--permutations``, ``--bootstrap``, ``--confidence``, ``--interval`` checked (one line
    naming the flag) and converted in place."""
    for flag in ("permutations", "bootstrap"):
        text = str(getattr(args, flag)).strip()
        if not text.isdigit():
            raise InputError(f"--{flag} must be a non-negative integer, got {text!r}")
        setattr(args, flag, int(text))
    try:
        conf = float(args.confidence)
    except ValueError:
        conf = float("nan")
    if not 0 < conf < 1:
        raise InputError(f"--confidence must be a number in (0, 1), got {args.confidence!r}")
    args.confidence = conf
    if args.interval not in ("basic", "percentile"):
        raise InputError(f"--interval must be basic or percentile, got {args.interval!r}")
    from actkit.inference import bootstrap_floor_error  # numpy only (~0.07 s, measured); at the top actkit --help would pay it

    message = bootstrap_floor_error(args.bootstrap, conf, "--bootstrap {}")
    if message:
        raise InputError(message)


def _alpha_arg(text):
    """``--alpha``: a float >= 0 or ``gcv``."""
    if text == "gcv":
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0 or 'gcv', got {text!r}")
    return value


def _int_at_least(text, low, also=""):
    """``int(text)`` if it is at least ``low``, else argparse's one-line error."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {also}an integer >= {low}, got {text!r}")
    return value


def _restarts_arg(text):
    return _int_at_least(text, 1)


def _ica_rows_arg(text):
    return text if text == "auto" else _int_at_least(text, 2, "'auto' or ")


def _print_notes(layer, results):
    """One ``note:`` line on stderr per distinct note of the results (``CompareResult.notes``)."""
    seen = []
    for res in results:
        for note in res.notes:
            if note not in seen:
                seen.append(note)
                print(f"note: {layer}: {note}", file=sys.stderr)


def _run_stores(args, paths, methods, display=None):
    """compare on stores (or embedding files) at ``paths``: more than two, a pairwise matrix per
    layer; two, the layer map (--layer-matrix) or the table of each layer pair. Returns 0."""
    from actkit.matrix_files import open_source  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    display = display or paths
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(open_source(p, key=args.key, column=args.column, strict=False,
                                                  verify=args.verify)) for p in paths]
        stores = [_drop_rows(args, st) for st in stores]
        if args.layer_matrix:
            fa, fb = (getattr(st, "inputs_fingerprint", "") for st in stores)
            if fa and fb and fa != fb:
                raise InputError(f"--layer-matrix: {paths[0]} and {paths[1]} share no inputs (their "
                                 f"inputs fingerprints differ): a layer map needs the same inputs")
        _check_stores(stores, paths)
        if len(stores) > 2:
            return _run_store_matrix(args, stores, paths, methods, display)
        store_a, store_b = stores
        if args.layer_matrix:
            return _run_layer_matrix(args, store_a, store_b, display)
        pairs = _layer_pairs(args, store_a, store_b)
        # before any alignment: bad label ids are refused before minutes of work
        sm = _softmax(args, store_a, store_b, paths[0], paths[1]) if args.softmax_labels else None
        results, labels = _compare_layer_pairs(args, store_a, store_b, pairs, paths, methods)
        _report_pairs(args, results, labels, display, sm)
        return 0


def _run_store_matrix(args, stores, paths, methods, display):
    """More than two stores: for each layer, the pairwise matrix of --metric (printed; --json,
    --plot, --html written). Returns 0."""
    from actkit.alignment import compare_many  # actkit.alignment (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it
    from actkit.report import format_matrix, save_matrix_plot  # actkit.report: ~1 s at import (measured); at the top actkit --help would pay it

    # only the matrix of --metric is reported: fit nothing else (no FastICA for rigid)
    methods = _matrix_methods(args.metric, methods, args.methods is not None)
    pairs = _layer_pairs(args, stores[0], stores[1])
    targets = plot_targets(args.plot, [la for la, _ in pairs]) if args.plot else None  # before the work
    out, maps = {}, []
    for i, (la, _) in enumerate(pairs):
        layers = [s[la] for s in stores]
        for lay, p in zip(layers[1:], paths[1:]):
            _check_layer_rows(layers[0], lay, f"{paths[0]}:{la}", f"{p}:{la}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the results' notes, printed below
            matrix, many = compare_many(layers, metric=args.metric, scheduler=getattr(args, "runner", None),
                                        **_compare_kwargs(args, methods))
        _print_notes(la, many.values())
        print(format_matrix(matrix, display, metric=f"{args.metric} [{la}]"))
        print()
        out[la] = {"metric": args.metric, "labels": list(display),
                   "matrix": [[None if v != v else float(v) for v in row] for row in matrix]}
        maps.append((actkit.alignment.LayerMap(matrix, list(display), list(display), measure=f"{args.metric} [{la}]"),
                     "stores (rows) x stores (columns)"))
        if targets:
            save_matrix_plot(matrix, list(display), targets[i], metric=f"{args.metric} [{la}]")
    if args.json:
        _write_json(args.json, out)
    if args.html:
        _write_html(args, maps=maps, title=f"actkit compare: {len(display)} stores, {args.metric}")
    return 0


def _compare_layer_pairs(args, store_a, store_b, pairs, paths, methods):
    """``actkit.compare`` of each (layer of A, layer of B) in ``pairs`` (with --scheduler, as
    tasks), each result's notes printed. Returns ``(results, labels)``."""
    results, labels = [], []
    remote = None
    if getattr(args, "runner", None) is not None:  # --scheduler: every layer pair is a task
        from actkit.alignment import compare_pairs  # actkit.alignment (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it

        for la, lb in pairs:
            _check_layer_rows(store_a[la], store_b[lb], f"{paths[0]}:{la}", f"{paths[1]}:{lb}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the results' notes, printed below
            remote = iter(compare_pairs([(store_a[la], store_b[lb]) for la, lb in pairs], compare_fn=actkit.compare,
                                        scheduler=args.runner, **_compare_kwargs(args, methods)))
    for la, lb in pairs:
        A, B = store_a[la], store_b[lb]
        _check_layer_rows(A, B, f"{paths[0]}:{la}", f"{paths[1]}:{lb}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the result's notes, printed below
            res = next(remote) if remote is not None else actkit.compare(A, B, **_compare_kwargs(args, methods))
        _print_notes(la, [res])
        results.append(res)
        labels.append(la if la == lb else f"{la} -> {lb}")
    return results, labels


def _report_pairs(args, results, labels, display, sm):
    """Print the table of two stores' results (and the ICA summary, the softmax distances
    ``sm``), then write --json, --plot (with its captions) and --html."""
    from actkit.report import (  # actkit.report: ~1 s at import (measured); at the top actkit --help would pay it
        format_table, ica_summary, plot_captions, plot_compare)

    print(format_table(results, labels, title=f"{display[0]} -> {display[1]}  "
                                              f"(held-out error / diam(B))",
                       compact=args.compact))
    for line in ica_summary(results, labels):
        print(line)
    payload = {}
    for lab, res in zip(labels, results):
        d = res.to_dict()
        d["store_a"], d["store_b"] = str(display[0]), str(display[1])
        payload[lab] = d
    if sm is not None:
        print("softmax distances (final_hidden, unembedding): " + "  ".join(
            f"{k}={v:.4g}" for k, v in sm.items() if isinstance(v, float)))
        payload["softmax"] = {k: v for k, v in sm.items() if isinstance(v, (float, int))}
    if args.json:
        _write_json(args.json, payload if len(payload) > 1 else next(iter(payload.values())))
    if args.plot:
        plot_compare(results, labels, args.plot)
        for line in plot_captions(results, labels):
            print(line)
    if args.html:
        _write_html(args, results, labels=labels, title=f"actkit compare: {display[0]} -> {display[1]}",
                    subtitle="held-out error / diam(B); similarities on all rows")


def _run_layer_matrix(args, store_a, store_b, display):
    """``--layer-matrix``: :func:`actkit.compare_layers`, printed, drawn, written."""
    from actkit.report import save_layer_map  # actkit.report: ~1 s at import (measured); at the top actkit --help would pay it

    layers_a = _split_list(args.layer_a) if args.layer_a else (
        _split_list(args.layers) if args.layers else None)
    layers_b = _split_list(args.layer_b) if args.layer_b else (
        _split_list(args.layers) if args.layers else None)
    from actkit.measures import parse_measures  # ~0.07 s at import (numpy, measured); at the top actkit --help would pay it

    chosen = parse_measures(args.measures or "linear_cka")
    if len(chosen) != 1:
        raise InputError(f"--layer-matrix draws one measure; --measures gave {len(chosen)}: "
                         f"{', '.join(m.name for m, _ in chosen)}")
    (m, params), = chosen
    lm = actkit.compare_layers(store_a, store_b, measure=m.name, **params, layers_a=layers_a,
                               layers_b=layers_b, permutations=args.permutations,
                               random_state=args.seed, progress=False if args.quiet else None)
    print(f"{display[0]} (rows) x {display[1]} (columns)")
    print(lm)
    if args.json:
        d = lm.to_dict()
        d["store_a"], d["store_b"] = str(display[0]), str(display[1])
        _write_json(args.json, d)
    if args.plot:
        save_layer_map(lm, args.plot, title=f"{lm.measure}: {display[0]} x {display[1]}")
    if args.html:
        _write_html(args, layer_map=lm, title=f"actkit compare: {display[0]} x {display[1]}, layer map",
                    subtitle=f"{lm.measure} between every layer of A (rows) and every layer of B (columns)")
    return 0


def _run_models(args, methods):
    from actkit.pipeline import extract_stores  # actkit.pipeline (torch): ~1 s at import (measured); at the top actkit --help would pay it

    if not args.layers:
        raise ActkitError("--inputs needs --layers L1,L2,... (see `actkit layers MODEL`)")
    layers = _split_list(args.layers)
    tmp = None if args.work_dir else tempfile.TemporaryDirectory(prefix="actkit-compare-")
    folder = args.work_dir or tmp.name
    try:
        stores = extract_stores(args.sources, args.inputs, folder, layers=layers,
                                echo=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
                                pool=args.pool, batch_size=args.batch_size, device=args.device,
                                max_samples=args.max_samples, progress=not args.quiet,
                                final_hidden=bool(args.softmax_labels) and "final_hidden" not in layers,
                                unembedding=bool(args.softmax_labels))
        args.layer_a = args.layer_b = None
        return _run_stores(args, stores, methods, display=args.sources)
    finally:
        if tmp is not None:
            tmp.cleanup()
