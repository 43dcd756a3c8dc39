"""Progress on a terminal (tqdm bars) and in a log (a timestamped line at a modest rate).

tqdm's ``disable=None`` hides a bar when stderr is not a terminal, so a long run whose
stderr goes to a log file used to print nothing for many minutes. Here, with
``progress=None`` and stderr not a terminal, the same call gives :class:`LogProgress`: one
line every :data:`LOG_INTERVAL` seconds (none for a pass that ends sooner), e.g.
``actkit: compare: moments: 45% (54,000 of 120,000 rows) after 1m00s``. :func:`heartbeat`
does the same around a step without a row count (a FastICA fit).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from tqdm.auto import tqdm

__all__ = ["progress_bar", "heartbeat", "LogProgress", "LOG_INTERVAL"]

#: seconds between two log lines (progress in a log file)
LOG_INTERVAL = 60.0


def _to_log(progress) -> bool:
    """Log lines instead of a bar: progress not forced and stderr not a terminal."""
    if progress is not None:
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return not (isatty is not None and isatty())
    except ValueError:          # a closed stream
        return False


def _clock(seconds):
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s"


class LogProgress(contextlib.AbstractContextManager):
    """tqdm's ``update`` / context-manager interface, writing a line per ``interval`` s."""

    def __init__(self, total, desc, unit="row", interval=None):
        self.total, self.desc, self.unit = total, desc, unit
        self.interval = LOG_INTERVAL if interval is None else interval
        self.n = 0
        self.t0 = self.last = time.monotonic()

    def update(self, n=1):
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            done = (f"{100 * self.n / self.total:.0f}% ({self.n:,} of {self.total:,} {self.unit}s)"
                    if self.total else f"{self.n:,} {self.unit}s")
            print(f"actkit: {self.desc}: {done} after {_clock(now - self.t0)}", file=sys.stderr,
                  flush=True)

    def close(self):
        """Nothing to flush: each line is written whole."""

    def __exit__(self, *exc):
        return False


def progress_bar(total, desc, progress, unit="row"):
    """A tqdm bar (``progress`` True, or None on a terminal), log lines (None elsewhere),
    or nothing (False)."""
    if _to_log(progress):
        return LogProgress(total, desc, unit)

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                disable=None if progress is None else not progress)


class heartbeat:
    """Context manager: while its block runs, a log line every :data:`LOG_INTERVAL` s
    (``actkit: <desc>: still running after 2m00s``) when ``progress`` is None and stderr
    is not a terminal; nothing otherwise."""

    def __init__(self, desc, progress):
        self.desc = desc
        self.on = _to_log(progress)
        self._stop = threading.Event()
        self._thread = None

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.wait(LOG_INTERVAL):
            print(f"actkit: {self.desc}: still running after {_clock(time.monotonic() - t0)}",
                  file=sys.stderr, flush=True)

    def __enter__(self):
        if self.on:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        return False
