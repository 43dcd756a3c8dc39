"""``actkit import FILE --out STORE.h5 [--layer embeddings] [--key K] [--column C]``

An embedding matrix someone already saved (``.npy``, ``.safetensors``, ``.parquet``) written
as an ordinary one-layer store with provenance. Only parsing and a call to
:func:`actkit.matrix_files.import_matrix`.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("import", help="write an embedding file (.npy, .safetensors, .parquet) as a store",
                       description="Copy a 2-D float matrix (one row per sample) from a .npy, .safetensors "
                                   "or .parquet file into an HDF5 store with one layer.")
    p.add_argument("file", metavar="FILE", help="embedding file: .npy, .safetensors (--key) or .parquet (--column)")
    p.add_argument("--out", required=True, metavar="OUT.h5", help="store to write")
    p.add_argument("--layer", default="embeddings", help="name of the store's layer (default: embeddings)")
    p.add_argument("--key", help="tensor name in a .safetensors file (needed when it holds several)")
    p.add_argument("--column", help="list-of-floats column of a .parquet file (needed when it has several)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it holds another store")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.matrix_files import import_matrix  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    path = import_matrix(args.file, args.out, layer=args.layer, key=args.key, column=args.column,
                         overwrite=args.overwrite, progress=not args.quiet)
    print(path)
    return 0
