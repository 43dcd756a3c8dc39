"""``actkit consolidate RUN.h5 --out SINGLE.h5``: a sharded store (torchrun) as one file.

Only parsing and a call to :func:`actkit.store.consolidate`.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("consolidate", help="copy a sharded store (torchrun extraction) into one ordinary file",
                       description="Copy a store whose layers are virtual datasets over RUN.h5.shards/ into one "
                                   "self-contained file (same attributes, rows, index and parameters).")
    p.add_argument("store", metavar="RUN.h5", help="the store written by a torchrun extraction")
    p.add_argument("--out", required=True, metavar="SINGLE.h5", help="the file to write")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--quiet", action="store_true", help="accepted as every command accepts it (this one shows no progress)")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.store import consolidate  # actkit.store (h5py): ~0.1 s at import (measured); at the top actkit --help would pay it

    print(consolidate(args.store, args.out, overwrite=args.overwrite))
    return 0
