"""``actkit sweep MODEL --revisions step1000,... --inputs PATH --layers L1,... --against final|previous|MODEL2``

(or ``--checkpoints DIR1,DIR2,... [--steps N1,N2,...]`` for local checkpoint folders).
Extract each revision once into ``--work-dir`` (complete stores are reused), compare as asked
with every method of ``compare`` and print compare's table (one row per step and layer); with
``--json`` / ``--plot`` also write the results and a plot of each metric against the training
step (nothing is written unasked). Only parsing and calls to :func:`actkit.sweep.sweep` and
:func:`actkit.sweep.plot_sweep`.
"""

from __future__ import annotations

import sys
import tempfile

from actkit._commands._compare_args import _ica_rows_arg, _restarts_arg
from actkit._commands.compare import _split_list, _write_json


def register(sub) -> None:
    p = sub.add_parser("sweep", help="compare a model across its training revisions (checkpoints)",
                       description="Extract the same layers of a model at several training revisions on the "
                                   "same inputs (each once, reused on reruns) and compare each with the final "
                                   "revision, the previous one, or a second model at the same revision.")
    p.add_argument("model", nargs="?", metavar="MODEL", help="hub id or folder (with --revisions)")
    p.add_argument("--revisions", help="comma-separated hub revisions, e.g. step1000,step2000,step143000")
    p.add_argument("--checkpoints", help="comma-separated local checkpoint folders (instead of --revisions)")
    p.add_argument("--steps", help="training step of each revision / folder (default: from names like "
                                   "step1000 or checkpoint-500)")
    p.add_argument("--inputs", required=True, help="inputs every revision is run on (text/jsonl/images/npy)")
    p.add_argument("--layers", required=True, help="comma-separated layers (see `actkit layers MODEL`)")
    p.add_argument("--against", default="final",
                   help="final (each revision vs the last), previous (vs the one before), or a second "
                        "MODEL compared at each revision (default final)")
    p.add_argument("--work-dir", help="keep the extracted stores here; a rerun or an added revision extracts "
                                      "only what is missing (default: a temporary folder, deleted afterwards)")
    p.add_argument("--json", metavar="OUT.json", help="write the results as JSON (default: print only)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="line plot of each metric against the step (default: print only)")
    p.add_argument("--methods", default="permutation,rigid,linear,ica",
                   help="comma-separated subset of permutation,rigid,linear,ica")
    p.add_argument("--pool", default="none", choices=["none", "mean", "last", "cls"], help="token pooling")
    p.add_argument("--max-samples", type=int, help="use the first N inputs")
    p.add_argument("--batch-size", type=int, default=32, help="extraction batch size")
    p.add_argument("--device", default="cpu", help="torch device of extraction and FastICA")
    p.add_argument("--eval-fraction", type=float, default=0.2, help="held-out share of the samples")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of FastICA")
    p.add_argument("--ica-restarts", type=_restarts_arg, default=3, metavar="R",
                   help="FastICA fits per side (default 3); their spread (ica_std) is the plot's band")
    p.add_argument("--ica-max-rows", type=_ica_rows_arg, default="auto", help="FastICA rows per side")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.sweep import plot_sweep, sweep  # actkit.sweep (actkit.alignment): ~1 s at import (measured); at the top actkit --help would pay it

    tmp = None if args.work_dir else tempfile.TemporaryDirectory(prefix="actkit-sweep-")
    steps = [int(s) for s in _split_list(args.steps)] if args.steps else None
    try:
        result = sweep(args.model, args.inputs, layers=_split_list(args.layers),
                       revisions=_split_list(args.revisions) if args.revisions else None,
                       checkpoints=_split_list(args.checkpoints) if args.checkpoints else None,
                       steps=steps, against=args.against, work_dir=args.work_dir or tmp.name,
                       extract_kwargs=dict(pool=args.pool, batch_size=args.batch_size, device=args.device,
                                           max_samples=args.max_samples),
                       progress=not args.quiet,
                       echo=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
                       methods=_split_list(args.methods), eval_fraction=args.eval_fraction,
                       random_state=args.seed, ica_restarts=args.ica_restarts, ica_max_rows=args.ica_max_rows,
                       device=args.device)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(sweep_table(result))
    if args.json:
        _write_json(args.json, result)
    if args.plot:
        plot_sweep(result, args.plot)
    written = [p for p in (args.json, args.plot) if p]
    if written:
        print(f"wrote {' and '.join(written)}", file=sys.stderr)
    return 0


def sweep_table(result: dict) -> str:
    """What ``actkit compare`` prints, one row per compared step and layer: the same cells
    (``not identifiable‡`` and no digits where the ICA fit is not reproducible), marks and
    footnotes (:func:`actkit.report.format_table`)."""
    from actkit.report import format_table  # actkit.report: ~1 s at import (measured); at the top actkit --help would pay it

    rows = result["comparisons"]
    labels = [f"{r['step']} vs {r['reference']}: {r['layer']}" for r in rows]
    return format_table(rows, labels, title="held-out error / diam(B)")
