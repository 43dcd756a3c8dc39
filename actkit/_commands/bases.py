"""``actkit bases STORE --layer L --basis B1 --basis B2 ... [--labels F] [--json F] [--html F]``

Which basis of a layer gives interpretable units (docs/bases.md): only parsing and a call to
:func:`actkit.compare_bases`.
"""

from __future__ import annotations


import actkit
from actkit._commands._preflight import refuse_existing_json, write_json_and_html
from actkit.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("bases", help="score the units of several bases of a layer side by side (neurons, PCA, ICA, "
                                     "dictionaries, SAEs, a random-rotation control): token purity, token and "
                                     "context R^2, label AUROC, k-sparse probing, with bootstrap intervals",
                       description="One unit-report pass per basis with the token scores folded in (plus one pass "
                                   "over the held-out rows): per unit the token purity of its top-k rows, the "
                                   "held-out R^2 of its activation from the token and from the (previous token, "
                                   "token) pair, the label AUROC; per basis their median, mean, 90th percentile and "
                                   "share above a threshold with bootstrap intervals by input sample; with --labels "
                                   "the labels with a unit of their own and SAEBench's k-sparse probing; a verdict "
                                   "per pair of bases. The layer's neurons are always compared.")
    p.add_argument("store", metavar="STORE", help="store (.h5) that records its inputs (or --inputs)")
    p.add_argument("--layer", help="layer (needed when the store holds several)")
    p.add_argument("--basis", metavar="PATH", action="append", default=[],
                   help="a basis besides the neurons (repeat): a store written by actkit whiten / ica / dictionary "
                        "from STORE, an SAE folder, or an actkit-codes/1 file of STORE's layer")
    p.add_argument("-k", "--k", dest="k", type=int, default=20, help="top rows per unit (the token purity's k)")
    p.add_argument("--labels", metavar="SPEC",
                   help="one label per row or per input sample, as actkit evaluate reads them (labels.npy, labels.txt, "
                        "FILE:COLUMN, a recorded label column): label AUROC and k-sparse probing")
    p.add_argument("--max-rows", type=int, default=None, metavar="N",
                   help="score the token R^2 on whole input samples up to N rows (default: all rows)")
    p.add_argument("--eval-fraction", type=float, default=0.2, help="held-out share of input samples")
    p.add_argument("--bootstrap", type=int, default=200, metavar="N",
                   help="resamples of the input samples for the intervals (0: none)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the intervals")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the resamples, the rotation and the probes")
    p.add_argument("--no-control", action="store_true", help="leave out the random-rotation control")
    p.add_argument("--inputs", metavar="PATH",
                   help="re-attach the inputs of a store that did not record them (their fingerprint must match)")
    p.add_argument("--device", default="cpu", help="torch device of an SAE basis")
    p.add_argument("--json", metavar="OUT.json", help="write the comparison (BasisComparison.to_dict()) as JSON")
    p.add_argument("--html", metavar="OUT.html", help="write the comparison's page: the table, the verdicts, each "
                                                      "basis's score histograms and its best and worst units' cards")
    p.add_argument("--overwrite", action="store_true", help="replace an existing page at --html (only a page "
                                                           "actkit wrote) or comparison at --json")
    p.add_argument("--scheduler", metavar="ADDR", help="run the passes on Dask: local:N, threads, or a scheduler "
                                                      "address")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _check(args) -> None:
    """What the parser and the preflight do not check, named as the user gave it."""
    from actkit._device import resolve_device  # the device check extract makes, before any work
    from actkit.inference import bootstrap_floor_error  # issue 39's floor of the bootstrap

    if not 0 < args.confidence < 1:
        raise InputError(f"--confidence must be in (0, 1), got {args.confidence:g}")
    if args.bootstrap < 0:
        raise InputError(f"--bootstrap must be a non-negative integer, got {args.bootstrap}")
    message = bootstrap_floor_error(args.bootstrap, args.confidence, asked="--bootstrap {}")
    if message:
        raise InputError(message)
    if args.max_rows is not None and args.max_rows < 2:
        raise InputError(f"--max-rows must be an integer >= 2, got {args.max_rows}")
    resolve_device(args.device)
    refuse_existing_json(args)


def run(args) -> int:
    _check(args)
    result = actkit.compare_bases(args.store, args.layer, bases=list(args.basis), k=args.k, labels=args.labels,
                                  max_rows=args.max_rows, eval_fraction=args.eval_fraction, bootstrap=args.bootstrap,
                                  confidence=args.confidence, random_state=args.seed,
                                  controls=() if args.no_control else ("random_rotation",),
                                  progress=False if args.quiet else None, inputs=args.inputs, device=args.device,
                                  scheduler=args.scheduler)
    print(result)
    write_json_and_html(result, args)
    return 0
