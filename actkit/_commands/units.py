"""``actkit units STORE [--layer L] [--basis B] [-k K] [--json OUT.json] [--match OTHER.h5]``

What each unit of a layer responds to (docs/units.md): only parsing and calls to
:func:`actkit.units` and :func:`actkit.match_units`.
"""

from __future__ import annotations


import actkit
from actkit._commands._preflight import refuse_existing_json, write_json_and_html
from actkit.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("units", help="what each unit (neuron, PCA/ICA component, dictionary atom, SAE latent) "
                                     "responds to: top examples, histograms, logit lens, matched units",
                       description="One streaming pass over a store layer: each unit's top-k examples (shown as "
                                   "the text or image patch they came from), quantile-band examples, histogram, "
                                   "moments and share active; the logit lens when the store holds an "
                                   "unembedding; label selectivity with --labels; with --match, the units of "
                                   "another store over the same inputs matched one to one with a p-value.")
    p.add_argument("store", metavar="STORE", help="store (.h5) or embedding file")
    p.add_argument("--layer", help="layer (needed when the store holds several)")
    p.add_argument("--basis", metavar="PATH",
                   help="units other than the layer's neurons: a store written by actkit whiten / ica / dictionary "
                        "from STORE, an SAE folder, or an actkit-codes/1 file of STORE's layer")
    p.add_argument("-k", "--k", dest="k", type=int, default=20, help="top examples per unit")
    p.add_argument("--context", type=int, default=8, help="tokens shown either side of a text example's token")
    p.add_argument("--k-tokens", type=int, default=200, metavar="N",
                   help="rows per unit its top tokens are counted over (its N highest)")
    p.add_argument("--lens-raw", action="store_true",
                   help="the logit lens as direction @ W_U, without the final LayerNorm's gain folded in")
    p.add_argument("--labels", metavar="SPEC",
                   help="one label per row (or one per input sample), as actkit evaluate reads them (labels.npy, "
                        "labels.txt, FILE:COLUMN, a recorded label column): each unit's most selective label")
    p.add_argument("--order", choices=("skewness", "frequency", "variance", "kurtosis", "index"),
                   help="order of the units (default: skewness for ICA, frequency for SAE / dictionary codes, "
                        "variance for neurons and PCA)")
    p.add_argument("--max-units", type=int, default=None, metavar="N", help="show the first N units of the order")
    p.add_argument("--seed", type=int, default=0, help="seed of the samples the quantile bands come from")
    p.add_argument("--device", default="cpu", help="torch device of an SAE basis")
    inputs = p.add_mutually_exclusive_group()
    inputs.add_argument("--inputs", metavar="PATH",
                        help="re-attach the inputs of a store that did not record them (their fingerprint must match)")
    inputs.add_argument("--no-inputs", action="store_true", help="statistics without the examples' text or images")
    p.add_argument("--model", metavar="MODEL",
                   help="with --inputs: the model whose tokenizer / image processor prepared them (default: the "
                        "store's recorded model)")
    p.add_argument("--match", metavar="OTHER.h5", help="match the units with those of another store over the same inputs")
    p.add_argument("--layer-b", metavar="L", help="with --match: the other store's layer (default: --layer)")
    p.add_argument("--basis-b", metavar="PATH", help="with --match: the other store's basis (default: its neurons)")
    p.add_argument("--permutations", type=int, default=None, metavar="N",
                   help="with --match: re-pairings of whole input samples for the matched units' p-values (default: "
                        "200; at least 20, with fewer no p-value falls below 0.05)")
    p.add_argument("--min-corr", type=float, default=None, metavar="R",
                   help="with --match: a pair is shared when p < 0.05 and |corr| >= R (in [0, 1]; default: 0.5)")
    p.add_argument("--json", metavar="OUT.json", help="write the report (UnitReport.to_dict()) as JSON")
    p.add_argument("--html", metavar="OUT.html", help="write the report's page: an index of every unit (sortable, "
                                                      "searchable) and one card per unit (docs/pages.md)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing page at --html or report at --json "
                                                           "(only ones actkit wrote)")
    p.add_argument("--scheduler", metavar="ADDR", help="run the passes on Dask: local:N, threads, or a scheduler address")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _check(args) -> None:
    """The options' rules, before any work (one line each)."""
    for name in ("context", "max_units", "k_tokens"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "context" else 1):
            raise InputError(f"--{name.replace('_', '-')} must be a {'non-negative' if name == 'context' else 'positive'} "
                             f"integer, got {value}")
    without = [f for f, v in (("--layer-b", args.layer_b), ("--basis-b", args.basis_b),
                              ("--permutations", args.permutations), ("--min-corr", args.min_corr)) if v is not None]
    if without and not args.match:
        raise InputError(f"{', '.join(without)}: only with --match OTHER.h5 (the other store they are about); give "
                         "--match or leave them out")
    args.permutations = 200 if args.permutations is None else args.permutations
    args.min_corr = 0.5 if args.min_corr is None else args.min_corr
    if args.model and not args.inputs:
        raise InputError("--model names the model that prepared --inputs; give --inputs PATH too")
    refuse_existing_json(args)
    if args.match:
        from actkit._units import check_match, check_options  # the checks match_units makes, before any work

        check_options(args.permutations, 0.05, args.min_corr, 200, 0.95, flags=True)
        check_match(args.store, args.match, layer=args.layer, layer_b=args.layer_b, basis=args.basis,
                    basis_b=args.basis_b, device=args.device)


def _inputs(args):
    """What ``inputs=`` gets: False, None, the path, or (with --model) the inputs re-attached."""
    if args.no_inputs:
        return False
    if not args.model:
        return args.inputs
    from actkit.extractors import record_inputs  # hand-off: re-attaching inputs reads them as extraction does
    from actkit.matrix_files import open_source  # stores and embedding files: the analysis commands' one door

    store = open_source(args.store)
    try:
        return record_inputs(store, args.inputs, model=args.model)
    finally:
        store.close()


def run(args) -> int:
    from actkit._device import check_device  # a bad device is refused before any work

    check_device(args.device)
    _check(args)
    progress = False if args.quiet else None
    report = actkit.units(args.store, args.layer, basis=args.basis, k=args.k, context=args.context,
                          labels=args.labels, order=args.order, max_units=args.max_units, random_state=args.seed,
                          device=args.device, progress=progress, inputs=_inputs(args), scheduler=args.scheduler,
                          k_tokens=args.k_tokens, lens_raw=args.lens_raw)
    if args.match:
        match = actkit.match_units(report, args.match, layer_b=args.layer_b, basis_b=args.basis_b,
                                   permutations=args.permutations, min_corr=args.min_corr, random_state=args.seed,
                                   device=args.device, progress=progress, scheduler=args.scheduler)
        report = match.report
        print(match)
    print(report)
    write_json_and_html(report, args)
    return 0
