"""May a file be written at a path? :func:`check_writable_file`, the one rule for every output.

Every output file a command or a writer makes (``--json``, ``--plot``, ``--html`` pages, a
store's ``--out``) is checked before any work: the folder takes a new file
(:func:`~actkit.store._create.unwritable_reason`, proven by making one), and a file already
there is replaced only if it is an output of the same kind that actkit wrote (``looks_ours``),
and, where the kind asks for it (pages), only with ``--overwrite``. One line
(:class:`~actkit.errors.InputError`) otherwise; nothing is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from actkit.errors import InputError
from actkit.store._create import unwritable_reason

__all__ = ["check_writable_file"]


def check_writable_file(path, flag: str, *, looks_ours=None, overwrite=None, ours="an output of this kind actkit wrote",
                        theirs="outputs", folder="give a file name", other="path", named="") -> Path:
    """Check that ``path`` may receive a new file; return it as a :class:`~pathlib.Path`.

    Parameters
    ----------
    path : str or Path
    flag : str
        How the user named it (``--json``; ``path`` for a Python call), first word of every line.
    looks_ours : callable, optional
        ``looks_ours(path) -> bool``: a file already there is one actkit wrote of this kind (an
        earlier output); None: any file may be replaced.
    overwrite : bool, optional
        None: such a file is replaced freely; False: refused (``pass --overwrite``); True: replaced.
    ours, theirs, folder, other, named : str
        The words of the lines (defaults: any output; :func:`actkit.pages.check_page_path` says
        "a page actkit wrote", "pages", "give a file name ending with .html", "name", "an
        actkit page").
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a folder; {folder}")
    why = unwritable_reason(path)
    if why:
        raise InputError(f"cannot write {flag} {path}: {why}")
    if path.exists() or path.is_symlink():
        if not path.is_file() or (looks_ours is not None and not looks_ours(path)):
            raise InputError(f"{flag} {path} exists and is not {ours}; actkit replaces only its own {theirs}: "
                             f"move it away or choose another {other}")
        if overwrite is False:
            raise InputError(f"{flag} {path} exists ({named}): pass --overwrite to replace it")
        if not os.access(path, os.W_OK):
            raise InputError(f"cannot write {flag} {path}: the file is not writable")
    return path
