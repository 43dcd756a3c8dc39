"""``actkit reproduce NAME``: rerun the seeds' experiments, side by side with the papers."""

from __future__ import annotations

import argparse
import sys

from actkit.synthetic.reproduce import NAMES, reproduce


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help="reproduce the seeds' synthetic experiments (our numbers beside the papers')",
        description="Run one of the papers' experiments (or all), print our numbers beside "
                    "the paper's, write NAME.json and NAME.png, and exit 1 when a qualitative "
                    "claim of the paper does not hold in our run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="experiments:\n"
               "  bilipschitz      Nelson et al. Fig. 2 (error vs bi-Lipschitz constant)\n"
               "  disentanglement  Nelson et al. Table 2 (AE vs AE + ICA, InfoMEC)\n"
               "  table1           Nelson et al. Table 1 protocol on the shipped zoo\n"
               "  complete         Zhou & Klindt, complete vs undercomplete, grandmother cells\n"
               "  sparse           Zhou & Klindt, sparse latents and the spark condition\n"
               "  kl               Nielsen et al., KL counterexample and the d_LLV bound\n"
               "  all              every experiment above")
    p.add_argument("name", choices=NAMES, metavar="NAME", help="experiment: " + ", ".join(NAMES))
    p.add_argument("--quick", action="store_true", help="reduced sizes (what the tests run)")
    p.add_argument("--out", default="reproduce-out",
                   help="folder for the JSON results and PNG figures (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device for training (default: cpu)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (the verdicts still)")
    p.set_defaults(func=run)


def run(args) -> int:
    results = reproduce(args.name, quick=args.quick, out=args.out, device=args.device,
                        random_state=args.seed, echo=(lambda text: None) if args.quiet else (lambda text: print(text + "\n", flush=True)))
    failed = [r.name for r in results if not r.passed]
    print(f"wrote the results to {args.out}/", file=sys.stderr)
    if failed:
        print(f"claims NOT reproduced: {', '.join(failed)}")
        return 1
    print(f"all claims reproduced ({len(results)} experiment{'s' if len(results) > 1 else ''})")
    return 0
