"""The one atomic writer: a file appears at its path complete, or not at all.

Every JSON report, progress cursor, metadata file and figure actkit writes goes through
:func:`write_atomic` (a temporary file in the same folder, then ``os.replace``), so a
killed run never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from actkit._json import json_default  # the one numpy-to-JSON rule (NaN as null), write_json_atomic's hook

__all__ = ["write_atomic", "write_text_atomic", "write_json_atomic", "save_figure_atomic",
           "json_default"]


def _umask_mode() -> int:
    """Permission bits ``open()`` would give a new file under the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path, write, *, fsync: bool = False, suffix: str = ".tmp") -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, then move it into place.

    Parameters
    ----------
    path : str or os.PathLike
    write : callable
        ``write(tmp_path: str)`` writes the whole content.
    fsync : bool, default=False
        Flush the file to disk before the rename (progress cursors of resumable runs).
    suffix : str, default=".tmp"
        Ending of the temporary name (matplotlib picks the format from it).

    Returns
    -------
    Path
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, _umask_mode())  # what open() gives; mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path, text: str, *, fsync: bool = False) -> Path:
    """Write ``text`` to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return write_atomic(path, write, fsync=fsync)


def write_json_atomic(path, obj, *, fsync: bool = False, newline: bool = True, **dumps) -> Path:
    """Write ``json.dumps(obj, default=json_default, **dumps)`` to ``path`` atomically."""
    dumps.setdefault("default", json_default)
    text = json.dumps(obj, **dumps) + ("\n" if newline else "")
    return write_text_atomic(path, text, fsync=fsync)


#: figure formats by suffix (anything else is written as PNG)
FIGURE_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg", ".jpg": "jpg", ".jpeg": "jpg"}


def save_figure_atomic(fig, path, *, dpi: int = 110, close: bool = True) -> str:
    """Save a matplotlib figure atomically (and close it), in the format its suffix names
    (:data:`FIGURE_FORMATS`; PNG otherwise)."""
    import matplotlib.pyplot as plt  # matplotlib: only for figures, ~0.5 s at import

    suffix = os.path.splitext(str(path))[1].lower()
    fmt = FIGURE_FORMATS.get(suffix, "png")
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight",
                                                   format=fmt), suffix="." + fmt)
    finally:
        if close:
            plt.close(fig)
    return str(path)
