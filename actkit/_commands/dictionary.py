"""``actkit dictionary STORE --layer L --out OUT.h5 --n-components K [--k N | --code l1 --alpha A]``

Sparse dictionary learning on one layer (streaming passes), then the sparse code of every
row written to a new store with the ``dictionary`` (n_components x features, unit-norm atoms).
Only parsing and calls to :class:`actkit.SparseDictionary`.
"""

from __future__ import annotations

from actkit._commands._analysis_io import cluster, add_common_arguments, open_layer, write_derived


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
    p.set_defaults(func=run)


def run(args) -> int:
    with cluster(args) as runner:  # --scheduler: every pass (and the transform) on Dask
        return _run(args, runner)


def _run(args, runner) -> int:
    from actkit import SparseDictionary
    from actkit.errors import InputError

    store, layer = open_layer(args)
    if args.n_components < 1:
        raise InputError(f"--n-components must be positive, got {args.n_components}")
    if args.k is not None and not 1 <= args.k <= args.n_components:
        raise InputError(f"--k={args.k} must be between 1 and --n-components={args.n_components}")
    kw = {"batch_size": args.block_rows} if args.block_rows else {}
    sd = SparseDictionary(args.n_components, code=args.code, k=args.k, alpha=args.alpha, positive=args.positive,
                          n_epochs=args.n_epochs, random_state=args.seed, device=args.device, verbose=not args.quiet,
                          scheduler=runner, **kw).fit(layer)
    write_derived(
        args, layer, sd,
        settings={"n_components": args.n_components, "code": args.code, "k": args.k, "alpha": args.alpha,
                  "positive": args.positive, "n_epochs": args.n_epochs, "seed": args.seed,
                  "device": args.device},
    )
    return 0
