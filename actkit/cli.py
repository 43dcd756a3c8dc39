"""The ``actkit`` command line: argument parsing only, every action calls the public API.

Each sub-command lives in ``actkit/_commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings

from actkit import __version__
from actkit._pipes import run_pipe_safe
from actkit._signals import STATUS, SigtermGuard, Terminated  # noqa: F401  (actkit.cli.Terminated: the name it had)
from actkit._threads import quiet_waiting, use_threads
from actkit.errors import ActkitError

# sub-command modules, in the order ``actkit --help`` lists them
COMMANDS = [
    "extract",
    "layers",
    "info",
    "verify",
    "whiten",
    "ica",
    "dictionary",
    "sae_eval",
    "compare",
    "evaluate",
    "import_matrix",
    "consolidate",
    "export",
    "sweep",
    "demo",
    "reproduce",
    "units",
    "bases",
    "zoo",
]


def build_parser() -> argparse.ArgumentParser:
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
    for name, subparser in sub.choices.items():
        if name in THREADED:
            subparser.add_argument(
                "--threads", type=_positive_int, default=None, metavar="N",
                help="CPU threads for torch, BLAS and actkit's own workers, split so they never "
                     "multiply (default: OMP_NUM_THREADS, else the CPUs this process may use; "
                     "results do not depend on it)")
        if name in READS_STORES:
            subparser.add_argument(
                "--no-verify", action="store_true",
                help="read the stores without checking each block read against its checksum (by default "
                     "every read is checked, as actkit verify does: a corrupt block is an error, never data)")
        subparser.formatter_class = HelpFormatter
        _show_defaults(subparser)
    return parser


# the commands that compute (every command runs under the thread policy; these take --threads)
THREADED = ("extract", "whiten", "ica", "dictionary", "sae-eval", "compare", "import", "consolidate", "verify", "demo",
            "reproduce", "units", "bases")


# the commands that read stores (these take --no-verify)
READS_STORES = ("whiten", "ica", "dictionary", "compare", "evaluate", "export", "sweep", "units", "bases")


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps text to the terminal, except lines that start with a space (kept as written:
    tables such as ``reproduce``'s list of experiments)."""

    def _fill_text(self, text, width, indent):
        out, para = [], []

        def flush():
            if para:
                out.append(super(HelpFormatter, self)._fill_text(" ".join(para), width, indent))
                para.clear()

        for line in text.splitlines():
            if line.startswith(" ") or not line.strip():
                flush()
                out.append(indent + line)
            else:
                para.append(line.strip())
        flush()
        return "\n".join(out)


def _show_defaults(parser) -> None:
    """Every option's help ends with its default (when it has one and does not say it)."""
    for action in parser._actions:
        if action.help in (None, argparse.SUPPRESS) or action.option_strings == [] and action.nargs in ("+", "*"):
            continue
        default = action.default
        if default is None or default is False or default is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if "default" not in action.help.lower():
            action.help += " (default: %(default)s)"


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings as ``actkit: warning: ...``, one line each, each distinct message once."""
    text = " ".join(str(message).split())
    if text in _SHOWN:
        return
    _SHOWN.add(text)
    print(f"actkit: warning: {text}", file=sys.stderr if file is None else file)


_SHOWN: set = set()


def _user_errors():
    """Exactly the user mistakes: :class:`~actkit.errors.ActkitError` and its subclasses (any
    other exception is a bug in actkit and shows its traceback)."""
    return (ActkitError,)


def main(argv: list[str] | None = None, *, exiting: bool | None = None) -> int:
    """Run one command; its exit status. Output into a pipe whose reader has gone (``| head``)
    ends the command quietly with status 141, as it does any Unix pipe writer. ``exiting``
    (default: when ``argv`` is None, as the ``actkit`` program calls it): the process ends
    after this call, so a SIGTERM after the command's end says its line and exits 143 too
    (:meth:`actkit._signals.SigtermGuard.restore`)."""
    return run_pipe_safe(lambda a: _run(a, argv is None if exiting is None else exiting), argv)


def _run(argv, exiting: bool = False) -> int:
    guard, command = SigtermGuard(), None
    try:
        guard.install()  # first: a SIGTERM from here on ends the command with one line, exit 143
        quiet_waiting()  # before torch / numpy load their thread pools
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
        command = args.command
        guard.line = _terminated_line(command)
        code = _command(args)
        guard.end()
        return _terminated(command) if guard.signalled else code  # signalled: swallowed, and it went on
    except BaseException as exc:  # noqa: BLE001 - sorted here; a bug's traceback is raised again
        guard.end()
        return _failed(exc, guard.signalled, command)
    finally:
        guard.restore(exiting=exiting)


def _failed(exc: BaseException, signalled: bool, command) -> int:
    """The exit status of a command that raised ``exc`` (its one line said); a bug's is raised."""
    if signalled:  # whatever the SIGTERM became on its way up (wrapped by a library, or a bug's)
        return _terminated(command)
    if isinstance(exc, KeyboardInterrupt):
        print(f"actkit: interrupted{_resumable(command)}", file=sys.stderr)
        return 130
    if not isinstance(exc, _user_errors()) or os.environ.get("ACTKIT_DEBUG"):
        raise exc
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"actkit: error: {message}", file=sys.stderr)
    return getattr(exc, "exit_code", 2)


def _command(args) -> int:
    """The command of ``args``, with its output checks first, under the thread policy."""
    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    _SHOWN.clear()
    try:
        from actkit._commands._preflight import preflight  # ~3 ms at import (measured); --help starts without it

        preflight(args)  # numbers and output paths: before any model or store is loaded
        with use_threads(getattr(args, "threads", None)), _read_checks(args):
            return int(args.func(args) or 0)
    finally:
        warnings.showwarning = shown


def _resumable(command) -> str:
    """What a stopped command's line adds: how to resume (the commands that resume)."""
    return "; rerun the same command to resume" if command in ("extract", "compare") else ""


def _terminated_line(command) -> str:
    return f"actkit: terminated (SIGTERM){_resumable(command)}"


def _terminated(command) -> int:
    print(_terminated_line(command), file=sys.stderr)
    return STATUS


def _read_checks(args):
    """``--no-verify``: the stores this command opens skip the checksum checks of their reads."""
    if not getattr(args, "no_verify", False):
        return contextlib.nullcontext()
    from actkit.store import unverified_reads  # actkit.store (h5py): ~0.1 s at import (measured); --help starts without it

    return unverified_reads()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
