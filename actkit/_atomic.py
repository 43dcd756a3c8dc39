"""The one atomic writer: a file or folder appears at its path complete, or not at all.

Every output actkit writes is built under a temporary name of its own and renamed into place:
a store, an export, a saved SAE, and every JSON report, progress cursor, page and figure
(:func:`write_atomic`). The temporary is a hidden folder beside the output,
``.NAME.????????.partial`` (:class:`Temporary`; ``????????``: eight random characters of
``[a-z0-9_]``), made empty by ``mkdtemp`` and at once given the marker file
``.actkit-temporary``, which its process holds locked (``flock``) while it lives. So a run
killed at any moment (``kill -9``, no cleanup) leaves at most such a folder, recognised by its
name and by being empty or holding the marker, with a lock nobody holds: the next run of the
same command removes it (:func:`remove_stale_temporaries`). Nothing else is ever removed: a
user's file or folder, whatever its name, carries no marker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from actkit._json import json_default  # the one numpy-to-JSON rule (NaN as null), write_json_atomic's hook

__all__ = ["write_atomic", "write_text_atomic", "write_json_atomic", "save_figure_atomic",
           "json_default", "Temporary", "remove_stale_temporaries", "move_into_place", "TEMPORARY_MARKER"]

#: how a temporary's name ends: ``.NAME.????????.partial`` beside ``NAME``
TEMPORARY_SUFFIX = ".partial"
#: the file inside a temporary folder that says actkit made it (locked while its writer lives)
TEMPORARY_MARKER = ".actkit-temporary"
_RANDOM = re.compile(r"[a-z0-9_]{8}")  # tempfile's random part (``mkdtemp``)


def _lock(fd: int, *, wait: bool) -> bool:
    """An exclusive ``flock`` of ``fd`` (True), or False where another process holds it. Not
    POSIX (no ``fcntl``), or a filesystem without locks: True, nothing is locked."""
    try:
        import fcntl  # POSIX only: absent on Windows
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EINVAL: no locks here
        return True
    return True


class Temporary:
    """A hidden folder of this process's own beside ``path``, to build an output in.

    ``with Temporary(path) as tmp:`` makes ``.NAME.????????.partial`` (``NAME``: the name of
    ``path``) in the folder of ``path`` and removes it, with whatever is still in it, on exit;
    build the output at :meth:`file` and ``os.replace`` it onto ``path`` inside the block.
    The temporaries that killed runs left for ``path`` are removed first
    (:func:`remove_stale_temporaries`). The folder holds the marker
    :data:`TEMPORARY_MARKER`, locked while this object is open (so no other run takes it for
    stale), and removed last (so a kill during the removal leaves a folder still known).
    """

    def __init__(self, path):
        self.path = Path(path)
        self.folder: Path | None = None
        self._fd: int | None = None

    def open(self) -> "Temporary":
        remove_stale_temporaries(self.path)
        parent = self.path.parent if str(self.path.parent) else Path(".")
        while True:
            folder = Path(tempfile.mkdtemp(dir=parent, prefix=f".{self.path.name}.", suffix=TEMPORARY_SUFFIX))
            marker = folder / TEMPORARY_MARKER
            try:
                fd = os.open(marker, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileNotFoundError:  # another run removed it as an empty leftover: make another
                continue
            _lock(fd, wait=True)
            try:
                if os.stat(marker).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # another run took it for a leftover before the lock: make another
        os.write(fd, f"actkit is writing {self.path.name} here (process {os.getpid()}); a run killed before it "
                     "finished leaves this folder, and the next run of the same command removes it\n".encode())
        self.folder, self._fd = folder, fd
        return self

    def file(self, name: str | None = None) -> Path:
        """A path inside the folder (default: the name of ``path``)."""
        return self.folder / (name or self.path.name)

    def close(self) -> None:
        """Remove the folder and what is left in it (the marker last)."""
        if self.folder is None:
            return
        try:
            _remove_marker_last(self.folder)
        except OSError:  # what is left still carries the marker: the next run removes it
            pass
        finally:
            os.close(self._fd)
            self.folder = self._fd = None

    def __enter__(self) -> "Temporary":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def _remove_marker_last(folder: Path) -> None:
    for entry in os.scandir(folder):
        if entry.name == TEMPORARY_MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
    (folder / TEMPORARY_MARKER).unlink(missing_ok=True)
    folder.rmdir()


def remove_stale_temporaries(path) -> None:
    """Remove what runs killed while writing ``path`` left beside it: folders named
    ``.NAME.????????.partial`` that are empty or hold :data:`TEMPORARY_MARKER` unlocked (its
    process is gone). A live run's temporary (locked), a symbolic link and anything without
    the marker (a user's) are left alone."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    prefix = f".{path.name}."
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if (name.startswith(prefix) and name.endswith(TEMPORARY_SUFFIX)
                and _RANDOM.fullmatch(name[len(prefix):-len(TEMPORARY_SUFFIX)])):
            _remove_if_stale(parent / name)


def _remove_if_stale(folder: Path) -> None:
    if folder.is_symlink() or not folder.is_dir():
        return
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    if not entries:  # killed before its marker was in (or after it was removed)
        try:
            folder.rmdir()
        except OSError:  # not empty any more: a live run's
            pass
        return
    if TEMPORARY_MARKER not in entries:  # not actkit's
        return
    try:
        fd = os.open(folder / TEMPORARY_MARKER, os.O_RDONLY)
    except OSError:
        return
    try:
        if _lock(fd, wait=False):
            _remove_marker_last(folder)
    except OSError:
        pass
    finally:
        os.close(fd)


def move_into_place(src, dst) -> None:
    """Rename the finished ``src`` (a file or a folder, beside ``dst``) to ``dst``.

    A file at ``dst`` is replaced atomically; a folder at ``dst`` (which the caller has
    checked may be replaced) is first moved into a :class:`Temporary` and removed once ``src``
    is in place (put back if the rename fails). A kill in between leaves the old folder in a
    temporary the next run removes."""
    src, dst = Path(src), Path(dst)
    if not (dst.is_dir() and not dst.is_symlink()):
        os.replace(src, dst)
        return
    with Temporary(dst) as old:
        aside = old.file()
        os.replace(dst, aside)
        try:
            os.rename(src, dst)
        except BaseException:
            if not dst.exists():
                os.replace(aside, dst)
            raise


def write_atomic(path, write, *, fsync: bool = False) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, then move it into place.

    Parameters
    ----------
    path : str or os.PathLike
    write : callable
        ``write(tmp_path: str)`` writes the whole content (``tmp_path`` has the name of
        ``path``, in a :class:`Temporary` folder).
    fsync : bool, default=False
        Flush the file to disk before the rename (progress cursors of resumable runs).

    Returns
    -------
    Path
    """
    path = Path(path)
    with Temporary(path) as tmp:
        target = tmp.file()
        write(str(target))
        if fsync:
            with open(target, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(target, path)
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
        write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=fmt))
    finally:
        if close:
            plt.close(fig)
    return str(path)
