"""``actkit whiten STORE --layer L --out OUT.h5 [--method pca|zca] [--n-components K]``

PCA/ZCA-whitens one layer of a store (streaming float64 mean and covariance) and writes the
whitened rows and the fitted ``mean``, ``whitening`` and ``dewhitening`` matrices to a new
store. Only parsing and calls to :class:`actkit.Whitener`.
"""

from __future__ import annotations

from actkit._commands._analysis_io import on_cluster, add_common_arguments, check_n_components, open_layer, write_derived


def register(sub) -> None:
    p = sub.add_parser("whiten", help="PCA/ZCA-whiten a store layer into a new store",
                       description="Whiten one layer of a store (streaming mean and covariance, "
                                   "float64) and write the whitened rows and parameters to OUT.")
    add_common_arguments(p)
    p.add_argument("--method", choices=["pca", "zca"], default="pca", help="PCA (k outputs) or ZCA (D outputs)")
    p.add_argument("--n-components", type=int, default=None,
                   help="principal directions kept (default: the numerical rank)")
    p.add_argument("--eps", type=float, default=1e-10,
                   help="eigenvalues below eps x the largest count as zero (default 1e-10)")
    p.set_defaults(func=on_cluster(_run))


def _run(args, runner) -> int:
    from actkit import Whitener  # actkit.whitening (scikit-learn): ~1 s at import (measured); at the top actkit --help would pay it

    store, layer = open_layer(args)
    check_n_components(args.n_components, layer)
    w = Whitener(method=args.method, n_components=args.n_components, eps=args.eps, block_rows=args.block_rows,
                 verbose=not args.quiet, scheduler=runner).fit(layer)
    write_derived(args, layer, w,
                  settings={"method": args.method, "n_components": args.n_components, "eps": args.eps})
    return 0
