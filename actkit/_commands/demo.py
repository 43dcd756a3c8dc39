"""``actkit demo [--out DIR] [--quick]``: Table 1 protocol on the shipped zoo, offline."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="extract both seeds of each zoo model, whiten + ICA, compare every alignment "
        "(Table 1 of Nelson et al.), offline",
        description="Extract both training seeds of each shipped zoo family (Pythia-, MAE-, "
        "ResNet- and ViT-tiny) on the shipped inputs, fit permutation / rigid / linear / "
        "whitening+ICA alignments seed0 -> seed1, print a Table-1-style table beside the "
        "paper's numbers, and write the stores, report.json and table1.png to --out.",
    )
    p.add_argument("--out", default=None,
                   help="output folder (default: ./actkit-demo, with --quick ./actkit-demo-quick); "
                   "a folder holding the other form's report is refused")
    p.add_argument("--quick", action="store_true",
                   help="reduced form (fewer inputs and ICA iterations; about 30 s)")
    p.add_argument("--device", default="cpu", help="extraction device (default: cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fit/eval split")
    p.add_argument("--ica-seed", type=int, default=0,
                   help="seed of the first FastICA start (restarts use the next seeds)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (the table and the files still)")
    p.set_defaults(func=run)


def run(args) -> int:
    from actkit.demo import default_out, format_table, run_demo  # actkit.demo (numpy): ~0.07 s at import (measured); at the top actkit --help would pay it

    out = args.out if args.out is not None else default_out(args.quick)
    report = run_demo(out, quick=args.quick, device=args.device, random_state=args.seed,
                      ica_seed=args.ica_seed, log=(lambda line: None) if args.quiet else (lambda line: print(line, flush=True)))
    print()
    print(report["title"] + (" [quick]" if report["quick"] else ""))
    print(format_table(report))
    bad = [r["name"] for r in report["rows"] if not r["ordering_holds"]]
    print()
    print("expected ordering perm >= ica >= rigid >= linear: "
          + ("holds for every row" if not bad else "does NOT hold for " + ", ".join(bad)))
    print(f"wrote {report['files']['report']}, {report['files']['figure']} and the stores in "
          f"{report['files']['stores']} ({report['seconds']:.0f} s)", file=sys.stderr)
    return 0
