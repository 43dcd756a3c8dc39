"""``python -m actkit.zoo train | list | corpus``: the only door to the zoo's training half."""

from __future__ import annotations

import argparse
import sys

from actkit import zoo
from actkit._pipes import run_pipe_safe
from actkit.errors import ActkitError
from actkit.zoo import MODELS, format_models, zoo_dir
from actkit.zoo._corpus import build_corpus


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; its exit status (141, quietly, when the reader of a pipe has gone)."""
    return run_pipe_safe(_run, argv)


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actkit.zoo", description=zoo.__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_train = sub.add_parser("train", help="retrain zoo models (deterministic given the seeds)")
    p_train.add_argument("--only", nargs="+", metavar="NAME", choices=MODELS, help="models to train")
    p_train.add_argument("--out", default=None, help="zoo folder to write (default: the shipped zoo)")
    p_train.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p_train.add_argument("--corpus", default=None, help="text corpus (default: the shipped one)")
    sub.add_parser("list", help="list the zoo's models")
    p_corpus = sub.add_parser("corpus", help="rebuild the text corpus from pydoc_data")
    p_corpus.add_argument("path")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "train":
            from actkit.zoo.training import train_zoo  # imports torch (~1.5 s, measured): not for list / corpus

            meta = train_zoo(args.out, only=args.only, threads=args.threads, corpus=args.corpus)
            print(f"zoo written to {args.out or zoo_dir()} in {meta['last_run_seconds']} s")
        elif args.cmd == "corpus":
            print(f"{build_corpus(args.path)} lines written to {args.path}")
        else:
            print(format_models())
    except ActkitError as exc:
        print(f"actkit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
