"""The ``actkit`` command line: argument parsing only, every action calls the public API.

Each sub-command lives in ``actkit/_commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# sub-command modules, in the order ``actkit --help`` lists them
COMMANDS = [
    "extract",
    "layers",
    "info",
    "whiten",
    "ica",
    "dictionary",
    "compare",
    "demo",
    "reproduce",
]


def build_parser() -> argparse.ArgumentParser:
    from actkit import __version__

    parser = argparse.ArgumentParser(
        prog="actkit",
        description="Extract pretrained-model activations to HDF5 stores and analyse them.",
    )
    parser.add_argument("--version", action="version", version=f"actkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"actkit._commands.{name}")
        except ModuleNotFoundError as exc:  # command not built yet in this checkout
            if exc.name == f"actkit._commands.{name}":
                continue
            raise
        module.register(sub)
    return parser


def _user_errors():
    """Exactly the user mistakes: :class:`~actkit.errors.ActkitError` and its subclasses (any
    other exception is a bug in actkit and shows its traceback)."""
    from actkit.errors import ActkitError

    return (ActkitError,)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("actkit: interrupted", file=sys.stderr)
        return 130
    except _user_errors() as exc:
        if os.environ.get("ACTKIT_DEBUG"):
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"actkit: error: {message}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
