"""``actkit ica STORE --layer L --out OUT.h5 [--n-components K] [--fit-rows N]``

The ICA post-processing of embeddings: PCA-whitening then a FastICA rotation, fitted on all
rows (streaming) or on a random subset of rows, then applied to every row (streaming). The
output store holds the sources and ``mean``, ``whitening``, ``unmixing`` (= components_,
whitening included) and ``mixing``. Only parsing and calls to :class:`actkit.FastICA`.
"""

from __future__ import annotations

import warnings

from actkit._commands._analysis_io import (on_cluster, add_common_arguments, check_n_components, fit_rows, open_layer,
                                           write_derived)


def register(sub) -> None:
    p = sub.add_parser("ica", help="whitening + FastICA of a store layer into a new store",
                       description="PCA-whiten one layer and rotate it with FastICA; write the "
                                   "independent components of every row and the parameters to OUT.")
    add_common_arguments(p)
    p.add_argument("--n-components", type=int, default=None,
                   help="forces the number of sources (default: all where the fit rows support them by "
                        "the rows rule max(50 k, k^2/4), else the k' they support, with a note)")
    p.add_argument("--fit-rows", type=int, default=None,
                   help="fit on this many random rows (default: all rows, streaming)")
    p.add_argument("--algorithm", choices=["parallel", "deflation"], default="parallel",
                   help="parallel: all sources at once (Picard-O solver); deflation: one after another")
    p.add_argument("--fun", choices=["logcosh", "exp", "cube"], default="logcosh", help="contrast function")
    p.add_argument("--max-iter", type=int, default=200, help="FastICA iterations at most")
    p.add_argument("--tol", type=float, default=1e-4,
                   help="parallel: stop when the largest gradient entry is below this; deflation: "
                        "sklearn's |<w_new, w>| - 1 criterion")
    p.add_argument("--seed", type=int, default=0, help="random_state of FastICA and of --fit-rows")
    p.add_argument("--device", default="cpu", help="torch device of the solver, e.g. cuda")
    p.set_defaults(func=on_cluster(_run))


def _run(args, runner) -> int:
    from actkit import FastICA  # actkit.ica (scikit-learn, scipy): ~1 s at import (measured); at the top actkit --help would pay it

    store, layer = open_layer(args)
    check_n_components(args.n_components, layer)
    X = fit_rows(layer, args.fit_rows, args.seed, args.block_rows)
    _check_rows(int(X.shape[0]), args.n_components)
    ica = FastICA(n_components="auto" if args.n_components is None else args.n_components, algorithm=args.algorithm, fun=args.fun, max_iter=args.max_iter,
                  tol=args.tol, random_state=args.seed, device=args.device, block_rows=args.block_rows,
                  verbose=not args.quiet, scheduler=runner).fit(X)
    write_derived(
        args, layer, ica,
        settings={"n_components": args.n_components, "fit_rows": args.fit_rows, "algorithm": args.algorithm,
                  "fun": args.fun, "max_iter": args.max_iter, "tol": args.tol, "seed": args.seed},
    )
    return 0


def _check_rows(n, k):
    """A forced ``--n-components`` the fit rows do not support: warn (the default chooses
    the supported k' itself, with its own warning)."""
    from actkit.ica import ica_min_rows  # actkit.ica (scikit-learn, scipy): ~1 s at import (measured); at the top actkit --help would pay it

    if k is not None and n < ica_min_rows(k):
        warnings.warn(f"{n} fit rows for {k} components ({n / k:.0f} per component); FastICA needs about "
                      f"{ica_min_rows(k)} (max(50 k, k^2/4)) or it finds spurious sources (single outlying "
                      f"rows): give it more rows (--fit-rows, more inputs) or fewer components", UserWarning)
