"""``actkit sae-eval STORE --layer L --sae DIR [--json OUT.json]``

The standard SAE metrics (L0, FVU, MSE, mean cosine, dead and dense latents) of a SAELens or
sparsify SAE over every row of a store layer, in one streaming pass. Only parsing and a call
to :func:`actkit.sae_metrics`.
"""

from __future__ import annotations

import os
import sys

import actkit
from actkit.errors import InputError, LayerError

_ROWS = [("rows", "n_rows", "{:d}"), ("latents", "n_latents", "{:d}"), ("L0 (mean active latents)", "l0", "{:.3f}"),
         ("FVU", "fvu", "{:.4f}"), ("MSE (sum over features, mean over rows)", "mse", "{:.6g}"),
         ("mean cosine", "mean_cosine", "{:.4f}"), ("dead latents (never active)", "dead_latents", "{:d}"),
         ("dense latents (active on > 10% of rows)", "dense_latents", "{:d}")]


def register(sub) -> None:
    p = sub.add_parser("sae-eval", help="SAE metrics (L0, FVU, MSE, cosine, dead/dense latents) over a store",
                       description="Run a SAELens or EleutherAI sparsify SAE over every row of a store "
                                   "layer in one streaming pass and report L0, the fraction of variance "
                                   "unexplained, SAELens's MSE, the mean cosine of the reconstruction, "
                                   "and the dead and dense latents.")
    p.add_argument("store", metavar="STORE", help="store (.h5) or embedding file")
    p.add_argument("--layer", help="layer (needed when the store holds several)")
    p.add_argument("--sae", required=True, metavar="DIR",
                   help="SAE folder: cfg.json + sae_weights.safetensors (SAELens) or sae.safetensors (sparsify)")
    p.add_argument("--json", metavar="OUT.json", help="also write the metrics as JSON")
    p.add_argument("--device", default="cpu", help="torch device of the SAE, e.g. cuda")
    p.add_argument("--block-rows", type=int, default=None, metavar="N", help="rows per streamed block (default: about 64 MiB of codes per block)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit._atomic import write_json_atomic  # actkit._atomic (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it
    from actkit.matrix_files import open_source  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    from actkit._device import check_device  # a bad device is refused before any work

    if args.block_rows is not None and args.block_rows < 1:
        raise InputError(f"--block-rows must be a positive number of rows, got {args.block_rows}")
    check_device(args.device)
    sae = actkit.load_sae(args.sae, device=args.device)
    store = open_source(args.store)
    try:
        if args.layer is None:
            if len(store.layers) != 1:
                raise LayerError(f"{args.store} has {len(store.layers)} layers ({', '.join(store.layers[:12])}); "
                                 "pick one with --layer")
            args.layer = store.layers[0]
        if args.layer not in store.layers:
            raise LayerError(f"{args.store} has no layer {args.layer!r} (it has {', '.join(store.layers[:12])})")
        metrics = actkit.sae_metrics(sae, store[args.layer], block_rows=args.block_rows,
                                     progress=False if args.quiet else None)
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    metrics = {"store": os.path.abspath(args.store), "layer": args.layer, "sae": os.path.abspath(args.sae),
               "architecture": sae.spec_["architecture"], "format": sae.spec_["format"], **metrics}
    print(f"{args.store} [{args.layer}] with {args.sae} ({sae.spec_['format']} {sae.spec_['architecture']}):")
    for label, key, fmt in _ROWS:
        print(f"  {label:<42s} {fmt.format(metrics[key])}")
    if args.json:
        write_json_atomic(args.json, metrics, indent=2, allow_nan=True)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
