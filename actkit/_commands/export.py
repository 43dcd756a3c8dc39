"""``actkit export STORE --format parquet|hf-datasets|saelens --out PATH [--layer L] [--labels FILE]``

One layer of a store, with its row index (and a label per sample), streamed in row blocks
into a parquet file or a Hugging Face ``datasets`` folder; ``saelens``: the cached-activations
dataset SAELens's trainer reads (``--hook-name``, ``--context-size``). Only parsing and a call to
:func:`actkit.export.export_store`.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="write a layer as parquet or a Hugging Face dataset",
                       description="Write one layer of a store (columns sample, position, activation and, "
                                   "with --labels, label) as a parquet file or a folder that "
                                   "datasets.load_from_disk opens, streamed in row blocks.")
    p.add_argument("store", metavar="STORE", help="store (.h5) or embedding file")
    p.add_argument("--format", required=True, choices=["hf-datasets", "parquet", "saelens"], help="what to write")
    p.add_argument("--out", required=True, metavar="PATH", help="parquet file or dataset folder to write")
    p.add_argument("--layer", help="layer to export (needed when the store holds several)")
    p.add_argument("--labels", metavar="FILE",
                   help="one label per sample: a 1-D .npy array or a text file with one label a line")
    p.add_argument("--hook-name", metavar="NAME",
                   help="saelens: the activation column's name, SAELens's hook_name (default: the layer's name)")
    p.add_argument("--context-size", type=int, default=128, metavar="C",
                   help="saelens: store rows per dataset row, SAELens's context_size (the last rows "
                        "short of a whole context are left out)")
    p.add_argument("--overwrite", action="store_true", help="replace PATH if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.export import export_store  # actkit.export (h5py, pyarrow): ~0.1 s at import (measured); at the top actkit --help would pay it

    print(export_store(args.store, args.out, format=args.format, layer=args.layer, labels=args.labels,
                       overwrite=args.overwrite, progress=not args.quiet,
                       hook_name=args.hook_name, context_size=args.context_size))
    return 0
