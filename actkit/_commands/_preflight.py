"""Checks every command's options get before it loads a model or a store (``actkit.cli`` runs
:func:`preflight` right after parsing): numbers in their range, and every output path
(``--out``, ``--json``, ``--plot``, ``--html``, ``--work-dir``, the output folders of demo and
reproduce) writable and not someone else's. Writable is proven, not guessed: a file is made and
removed in each output's folder (:func:`actkit.store.unwritable_reason`; the rule for a file
already there: :func:`actkit.store.check_writable_file`), so ``/proc``,
``/sys`` and a read-only mount are refused here, not after the work. One line, exit 2, within
a second, nothing left behind.

One table per kind of option, keyed by the option's ``dest``: a command that adds an option of
a known name gets its check without code of its own.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from actkit.errors import InputError

# dest -> (lowest allowed, highest allowed or None, what it is); ints unless in FRACTIONS/FLOATS
AT_LEAST = {
    **dict.fromkeys(("batch_size", "max_samples", "context_length", "max_tokens", "max_length", "block_rows",
                     "n_components", "max_iter", "n_epochs", "k", "ica_n_components", "ica_max_iter",
                     "n_rotations", "max_train_rows", "diameter_max_rows", "threads"), 1),
    **dict.fromkeys(("fit_rows", "n_splits", "max_bin"), 2),
    **dict.fromkeys(("seed", "ica_seed", "ica_fit_rows"), 0),
}
#: how an integer option's bound is said, where not "a positive integer" (as the docs quote it)
WORDS = {"block_rows": "a positive number of rows",
         "checkpoint_every": "a number of seconds >= 0 (0: after every batch)"}
#: floats: dest -> (low, high, low inclusive, high inclusive)
FLOATS = {
    "eval_fraction": (0.0, 1.0, False, False),
    "eps": (0.0, math.inf, False, False),
    "tol": (0.0, math.inf, False, False),
    "ica_tol": (0.0, math.inf, False, False),
    "checkpoint_every": (0.0, math.inf, True, False),
}
#: floats a command gives another meaning (dest -> commands it applies to)
FLOAT_COMMANDS = {"alpha": ("dictionary",)}
FLOATS_BY_COMMAND = {"alpha": (0.0, math.inf, True, False)}

#: the first bytes of a file of each figure format a ``--plot`` may name
#: (:data:`actkit._atomic.FIGURE_FORMATS`, written from the suffix)
IMAGE_MAGIC = {"png": (b"\x89PNG",), "pdf": (b"%PDF",), "svg": (b"<?xml", b"<svg"), "jpg": (b"\xff\xd8",)}

#: commands whose ``--out`` is a folder of their own (made if absent)
FOLDER_OUT = ("demo", "reproduce")

#: commands whose ``--out`` is a store (export's is checked by actkit.export.check_export_out;
#: extract checks its own folder, here only a file of the user's already there; demo and
#: reproduce write folders of their own)
STORE_OUT = ("whiten", "ica", "dictionary", "import", "consolidate")


def option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_numbers(args) -> None:
    """Every numeric option of ``args`` in its range (:data:`AT_LEAST`, :data:`FLOATS`)."""
    command = getattr(args, "command", None)
    for dest, value in vars(args).items():
        if value is None or isinstance(value, bool):
            continue
        if dest in AT_LEAST and isinstance(value, int):
            low = AT_LEAST[dest]
            if value < low:
                what = WORDS.get(dest) or {0: "a non-negative integer", 1: "a positive integer"}.get(low, f">= {low}")
                raise InputError(f"{option(dest)} must be {what}, got {value}")
            continue
        bounds = FLOATS.get(dest)
        if dest in FLOAT_COMMANDS:
            bounds = FLOATS_BY_COMMAND[dest] if command in FLOAT_COMMANDS[dest] else None
        if bounds is not None and isinstance(value, (int, float)):
            lo, hi, lo_in, hi_in = bounds
            ok = not math.isnan(value) and (value >= lo if lo_in else value > lo) and \
                (value <= hi if hi_in else value < hi)
            if not ok:
                left, right = "[" if lo_in else "(", "]" if hi_in else ")"
                upper = "inf" if hi == math.inf else f"{hi:g}"
                what = WORDS.get(dest) or f"in {left}{lo:g}, {upper}{right}"
                raise InputError(f"{option(dest)} must be {what}, got {value:g}")


def is_json_file(path) -> bool:
    """An existing file holding one JSON document (what ``--json`` writes)."""
    try:
        with open(path, encoding="utf-8") as fh:
            json.load(fh)
    except (OSError, ValueError):
        return False
    return True


def is_image_file(path) -> bool:
    """An existing file whose first bytes are those of the image format its suffix names."""
    from actkit._atomic import FIGURE_FORMATS  # actkit._atomic (numpy): ~0.05 s at import (measured); only --plot needs it

    starts = IMAGE_MAGIC.get(FIGURE_FORMATS.get(Path(path).suffix.lower()), ())
    try:
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip()
    except OSError:
        return False
    return any(head.startswith(s) for s in starts)


def check_plot(path, flag: str = "--plot") -> None:
    from actkit._atomic import FIGURE_FORMATS  # actkit._atomic (numpy): ~0.05 s at import (measured); only --plot needs it

    suffix = Path(path).suffix.lower()
    if suffix not in FIGURE_FORMATS:
        raise InputError(f"{flag} {path}: the suffix must name an image format "
                         f"({', '.join(FIGURE_FORMATS)}), got {suffix or 'none'}")
    from actkit.store import check_writable_file  # actkit.store (h5py): ~0.1 s at import (measured); only --plot needs it

    check_writable_file(path, flag, looks_ours=is_image_file)


def check_work_dir(path, flag: str = "--work-dir") -> None:
    """A folder to keep working files in: an existing folder a file can be made in, or a new
    one whose parent exists and is writable (both proven by making a file)."""
    from actkit.store import unwritable_reason  # actkit.store (h5py): ~0.1 s at import (measured); only an output path needs it

    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{flag} {path} is a file, not a folder")
        why = unwritable_reason(path / "probe")
        if why:
            raise InputError(f"cannot write into {flag} {path}: {why}")
        return
    why = unwritable_reason(path)
    if why:
        raise InputError(f"cannot create {flag} {path}: {why}")


def plot_targets(plot, names) -> list[str]:
    """The files a ``--plot`` of several panels is saved to, one per name (``OUT.NAME.png``;
    ``plot`` itself for one name), each checked as :func:`check_plot` checks ``--plot``; call
    it once the names are known, before the work."""
    names = list(names)
    base, ext = os.path.splitext(str(plot))
    targets = [str(plot)] if len(names) == 1 else [f"{base}.{n}{ext or '.png'}" for n in names]
    for target in targets:
        check_plot(target)
    return targets


def check_store_out(path, flag: str = "--out") -> None:
    """A store output: a file in a writable folder; an existing file there must be an actkit
    store (whether it may be replaced is the store's own decision: --overwrite, or the same
    request finished already)."""
    from actkit.store import check_writable_file, is_actkit_store  # actkit.store (h5py): ~0.1 s at import (measured); only a store output needs it

    check_writable_file(path, flag, looks_ours=is_actkit_store)


def check_outputs(args) -> None:
    """Every output path of ``args`` (``--out``, ``--json``, ``--plot``, ``--html``,
    ``--work-dir``)."""
    command = getattr(args, "command", None)
    if isinstance(getattr(args, "json", None), str):
        from actkit.store import check_writable_file  # actkit.store (h5py): ~0.1 s at import (measured); only an output path needs it

        check_writable_file(args.json, "--json", looks_ours=is_json_file)
    if isinstance(getattr(args, "plot", None), str):
        check_plot(args.plot)
    if isinstance(getattr(args, "html", None), str):
        from actkit.pages import check_page_path  # actkit.pages (numpy through actkit._atomic): ~0.1 s at import (measured); only --html needs it

        check_page_path(args.html, overwrite=bool(getattr(args, "overwrite", False)))
    if getattr(args, "work_dir", None):
        check_work_dir(args.work_dir)
    out = getattr(args, "out", None)
    if out and command in STORE_OUT:
        check_store_out(out)
    elif out and command == "extract" and Path(out).is_file():  # a file of the user's already there
        check_store_out(out)
    elif out and command == "extract":  # its folder (a folder as --out: extract's own line)
        _check_folder_of(out)
    elif command in FOLDER_OUT:
        check_work_dir(out if out is not None else _default_demo_out(args), "--out")
    elif out and command == "export":
        from actkit.export import FORMATS, check_export_out  # actkit.export: ~0.1 s at import (measured); only actkit export

        if args.format in FORMATS:
            check_export_out(out, args.format, args.overwrite)
    named = [(f, getattr(args, f[2:], None)) for f in ("--json", "--plot", "--html")]
    named = [(f, os.path.abspath(v)) for f, v in named if isinstance(v, str)]
    for i, (f, v) in enumerate(named):
        for g, w in named[i + 1:]:
            if v == w:
                raise InputError(f"{f} and {g} name the same file")


def refuse_existing_json(args) -> None:
    """``--json`` follows ``--html``'s rule where a command writes both (units, bases): an
    existing file is replaced only with ``--overwrite``."""
    if args.json and os.path.exists(args.json) and not args.overwrite:
        raise InputError(f"--json {args.json} exists; pass --overwrite to replace it (as for --html)")


def write_json_and_html(result, args) -> None:
    """Write ``result`` (a typed result with ``to_json`` / ``to_html``) where ``--json`` and
    ``--html`` ask, each "wrote" line on stderr."""
    if args.json:
        result.to_json(args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.html:
        result.to_html(args.html, overwrite=args.overwrite)
        print(f"wrote {args.html}", file=sys.stderr)


def _default_demo_out(args) -> str:
    from actkit.demo import default_out  # actkit.demo (numpy): ~0.07 s at import (measured); only actkit demo without --out

    return default_out(args.quick)


def _check_folder_of(path, flag: str = "--out") -> None:
    """The folder a new file ``path`` would be made in takes a file."""
    from actkit.store import unwritable_reason  # actkit.store (h5py): ~0.1 s at import (measured); only an output path needs it

    if not Path(path).is_dir():  # a folder given as --out is the command's own line
        why = unwritable_reason(path)
        if why:
            raise InputError(f"cannot write {flag} {path}: {why}")


def preflight(args) -> None:
    """All the checks above, before the command runs."""
    check_numbers(args)
    check_outputs(args)
