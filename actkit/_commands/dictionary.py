"""``actkit dictionary STORE --layer L --out OUT.h5 --n-components K [--k N | --code l1 --alpha A]
[--restarts R] [--json OUT.json]``

Sparse dictionary learning on one layer (streaming passes), then the sparse code of every
row written to a new store with the ``dictionary`` (n_components x features, unit-norm atoms).
With ``--restarts R`` the dictionary is fitted R times (seeds ``--seed`` + r), the fit of
lowest reconstruction error is written, and :func:`actkit.dictionary_stability` of the R
fits is printed and recorded in the output's provenance (``fit.stability``) and ``--json``.
Only parsing and calls to :class:`actkit.SparseDictionary` and
:func:`actkit.dictionary_stability`.
"""

from __future__ import annotations


from actkit._commands._analysis_io import add_common_arguments, on_cluster, open_layer, write_derived
from actkit.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("dictionary", help="sparse dictionary learning of a store layer into a new store",
                       description="Learn an (overcomplete) dictionary with top-k or L1 sparse codes "
                                   "and write every row's code and the dictionary to OUT.")
    add_common_arguments(p)
    p.add_argument("--n-components", type=int, required=True, help="number of atoms")
    p.add_argument("--code", choices=["topk", "l1"], default="topk",
                   help="sparse code: topk keeps the k largest responses, l1 solves a lasso per row")
    p.add_argument("--k", type=int, default=None, help="active atoms per row (topk; default features/10)")
    p.add_argument("--alpha", type=float, default=None, help="L1 penalty (l1; default 1.0)")
    p.add_argument("--positive", action="store_true", help="non-negative codes")
    p.add_argument("--n-epochs", type=int, default=1, help="passes over all rows after the warm-up")
    p.add_argument("--seed", type=int, default=0, help="random_state of the dictionary (initial atoms, row subsample)")
    p.add_argument("--device", default="cpu", help="torch device of the code/statistics steps, e.g. cuda")
    p.add_argument("--restarts", type=int, default=1,
                   help="fit R times (seeds --seed, ..., --seed + R - 1), keep the fit of lowest reconstruction "
                        "error and report whether the fits find the same atoms (dictionary_stability)")
    p.add_argument("--json", metavar="OUT.json", help="write the stability report (to_dict) as JSON")
    p.set_defaults(func=on_cluster(_run))


def _run(args, runner) -> int:
    from actkit import SparseDictionary, dictionary_stability  # actkit.dictionary (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it

    store, layer = open_layer(args)
    if args.n_components < 1:
        raise InputError(f"--n-components must be positive, got {args.n_components}")
    if args.k is not None and not 1 <= args.k <= args.n_components:
        raise InputError(f"--k={args.k} must be between 1 and --n-components={args.n_components}")
    if args.restarts < 1:
        raise InputError(f"--restarts must be at least 1, got {args.restarts}")
    kw = {"batch_size": args.block_rows} if args.block_rows else {}
    fits = [SparseDictionary(args.n_components, code=args.code, k=args.k, alpha=args.alpha, positive=args.positive,
                             n_epochs=args.n_epochs, random_state=args.seed + r, device=args.device,
                             verbose=not args.quiet, scheduler=runner, **kw).fit(layer)
            for r in range(args.restarts)]
    settings = {"n_components": args.n_components, "code": args.code, "k": args.k, "alpha": args.alpha,
                "positive": args.positive, "n_epochs": args.n_epochs, "seed": args.seed, "device": args.device}
    sd = fits[0]
    report = None
    if args.restarts > 1 or args.json:
        stab = dictionary_stability(fits)
        sd = fits[stab.best]
        report = {**stab.to_dict(), "seeds": [args.seed + r for r in range(args.restarts)],
                  "best_seed": args.seed + stab.best}
        if args.restarts > 1:  # the written store is another one only with restarts (not with --json)
            settings["restarts"] = args.restarts
        sd.stability_ = report
        if not args.quiet:
            print(stab.summary())
            print(f"  writing fit {stab.best} (seed {report['best_seed']}, reconstruction error "
                  f"{sd.reconstruction_error_:.4g}) to {args.out}")
    write_derived(args, layer, sd, settings=settings)
    if args.json:
        from actkit._atomic import write_json_atomic  # actkit._atomic (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it

        write_json_atomic(args.json, report, indent=2, allow_nan=False)
    return 0
