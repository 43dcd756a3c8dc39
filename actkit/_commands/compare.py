"""``actkit compare``: do two checkpoints learn the same representation, up to which map?

Forms::

    actkit compare STORE_A STORE_B [--layer-a L] [--layer-b L] [--json OUT] [--plot OUT.png]
    actkit compare STORE_1 STORE_2 STORE_3 ... [--metric rigid]       # pairwise matrix
    actkit compare MODEL_A MODEL_B --inputs PATH --layers L1,L2       # extract, then compare

Only parsing and calls to the public API (:func:`actkit.alignment.compare_stores`,
:func:`actkit.alignment.compare_many`, :func:`actkit.compare_layers`, :func:`actkit.extract`,
:mod:`actkit.report`): which alignments a metric needs, whether the stores hold the same
inputs and what the JSON holds are the API's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings

import actkit
from actkit._commands._analysis_io import add_scheduler_argument, cluster
from actkit._commands._compare_args import add_compare_arguments
from actkit._commands._preflight import plot_targets
from actkit._device import is_accelerator, resolve_device
from actkit.errors import ActkitError, InputError


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="alignment errors (permutation, rigid, linear, ICA), CKA and CCA between models",
        description="Compare the representations of two (or more) models on the same inputs: "
                    "held-out errors of the permutation, rigid, linear and ICA alignments "
                    "(Nelson et al., Table 1), ICA efficiency, linear CKA and mean CCA.")
    add_compare_arguments(p)
    add_scheduler_argument(p)
    p.set_defaults(func=run)


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
        return [(la, args.layer_b or la)]
    if args.layers:
        return [(x, x) for x in _split_list(args.layers)]
    return common_layers(store_a, store_b)


def _write_json(path, obj):
    from actkit._atomic import write_json_atomic  # actkit._atomic (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it

    write_json_atomic(path, obj, indent=2, allow_nan=False)


def _wrote(args):
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


def run(args) -> int:
    if args.list_measures:
        from actkit.measures import format_measure_table  # ~0.07 s at import (numpy, measured); at the top actkit --help would pay it

        print(format_measure_table())
        return 0
    if len(args.sources) < 2:
        raise ActkitError("compare needs at least two stores (or two models with --inputs)")
    if args.measures:
        from actkit.measures import check_max_rows, parse_measures  # ~0.07 s at import (numpy, measured); at the top actkit --help would pay it

        parse_measures(args.measures)        # an unknown name or a bad parameter: before any work
        check_max_rows(args.max_rows)
    methods = _split_list(args.methods) if args.methods else None
    _resampling_args(args)
    if args.layer_matrix and len(args.sources) != 2:
        raise InputError("--layer-matrix compares exactly two stores (the same one twice for the "
                         "self-similarity map)")
    if args.layer_matrix and args.inputs:
        raise InputError("--layer-matrix compares two stores; extract them first (actkit extract)")
    args.softmax_labels = _labels_ids(args.softmax_labels) if args.softmax_labels else None  # before any work
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


def _compare_kwargs(args, methods):
    """compare's arguments from the options (``methods``: None leaves the choice to the API)."""
    kw = dict(eval_fraction=args.eval_fraction, random_state=args.seed, alpha=args.alpha,
              ica_max_rows=args.ica_max_rows, ica_max_iter=args.ica_max_iter,
              ica_restarts=args.ica_restarts, ica_method=args.ica_method, ica_seed=args.ica_seed,
              ica_n_components=args.ica_n_components, ica_tol=args.ica_tol,
              diameter_max_rows=args.diameter_max_rows or None, device=args.device,
              measures=args.measures or None, max_rows=args.max_rows,
              progress=False if args.quiet else None, permutations=args.permutations,
              bootstrap=args.bootstrap, confidence=args.confidence, interval=args.interval)
    return kw if methods is None else {**kw, "methods": methods}


def _resampling_args(args):
    """``--permutations``, ``--bootstrap``, ``--confidence`` as numbers (one line naming the flag
    where one is not), then the API's rule for them (:func:`actkit.inference.check_resampling`)."""
    from actkit.inference import check_resampling  # numpy only (~0.07 s, measured); at the top actkit --help would pay it

    for flag, kind in (("permutations", int), ("bootstrap", int), ("confidence", float)):
        text = str(getattr(args, flag)).strip()
        try:
            setattr(args, flag, kind(text))
        except ValueError:
            what = "a non-negative integer" if kind is int else "a number in (0, 1)"
            raise InputError(f"--{flag} must be {what}, got {text!r}") from None
    check_resampling(args.permutations, args.bootstrap, args.confidence, args.interval, flags=True)


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
    from actkit.alignment import compare_stores  # actkit.alignment (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it
    from actkit.matrix_files import open_source  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    display = display or paths
    with contextlib.ExitStack() as stack:
        stores = [_drop_rows(args, stack.enter_context(open_source(p, key=args.key, column=args.column, strict=False,
                                                                   verify=args.verify))) for p in paths]
        if len(stores) > 2:
            return _run_store_matrix(args, stores, methods, display)
        if args.layer_matrix:
            return _run_layer_matrix(args, *stores, display)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # the results' notes, printed below
            pairs = compare_stores(*stores, _layer_pairs(args, *stores), names=display,
                                   softmax_labels=args.softmax_labels, scheduler=args.runner,
                                   **_compare_kwargs(args, methods))
        for (la, _), res in zip(pairs.pairs, pairs.results):
            _print_notes(la, [res])
        print(pairs.format(compact=args.compact))
        if args.json:
            _write_json(args.json, pairs.to_dict())
        if args.plot:
            from actkit.report import plot_captions, plot_compare  # actkit.report: ~1 s at import (measured); only --plot

            plot_compare(pairs.results, pairs.labels, args.plot)
            for line in plot_captions(pairs.results, pairs.labels):
                print(line)
        if args.html:
            pairs.to_html(args.html, overwrite=args.overwrite)
            _wrote(args)
        return 0


def _run_store_matrix(args, stores, methods, display):
    """More than two stores: for each layer, the pairwise matrix of --metric
    (:func:`actkit.alignment.compare_store_matrix`; printed; --json, --plot, --html written). Returns 0."""
    from actkit.alignment import compare_store_matrix  # actkit.alignment (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it

    layers = [la for la, _ in _layer_pairs(args, stores[0], stores[1])]
    targets = plot_targets(args.plot, layers) if args.plot else None  # before the work
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the results' notes, printed below
        out = compare_store_matrix(stores, layers, metric=args.metric, names=display, scheduler=args.runner,
                                   **_compare_kwargs(args, methods))
    for layer in layers:
        _print_notes(layer, out.results[layer].values())
    print(out.format())
    if targets:
        from actkit.report import save_matrix_plot  # actkit.report: ~1 s at import (measured); only --plot

        for layer, target in zip(layers, targets):
            save_matrix_plot(out.matrices[layer], list(display), target, metric=f"{args.metric} [{layer}]")
    if args.json:
        _write_json(args.json, out.to_dict())
    if args.html:
        out.to_html(args.html, overwrite=args.overwrite)
        _wrote(args)
    return 0


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
        from actkit.pages import compare_page  # actkit.pages (actkit.report): ~1 s at import (measured); only --html needs it

        compare_page([], args.html, layer_map=lm, title=f"actkit compare: {display[0]} x {display[1]}, layer map",
                     subtitle=f"{lm.measure} between every layer of A (rows) and every layer of B (columns)",
                     overwrite=args.overwrite)
        _wrote(args)
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
