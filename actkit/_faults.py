"""Deterministic fault injection for the torture tests (``tests/test_torture.py``).

``ACTKIT_FAULT="ACTION:POINT[:N]"`` makes the N-th (default first) time the code passes the
named point in this process fail with ``ACTION``:

``kill``
    ``SIGKILL`` of this process (a real ``kill -9``: no cleanup, no ``finally``).
``term``
    ``SIGTERM`` to this process (what ``kill`` and schedulers send).
``enospc``
    ``OSError(ENOSPC)``, as a full disk gives it.
``wait``
    Touch ``$ACTKIT_FAULT_RELEASE.waiting``, then wait until the file ``$ACTKIT_FAULT_RELEASE``
    exists (at most 10 minutes): a race between two real processes made deterministic.

Points: ``model-loaded``, ``store-created`` (the ``.partial`` file is written, the cursor is
not), ``rows`` (rows of one layer are about to be written), ``cursor`` (a resume cursor has
just been written), ``cursor-write`` (a cursor is being written), ``finalize`` (the store is
marked complete, not yet renamed), ``renamed`` (renamed, the cursor not yet removed),
``derived-rows`` (an analysis command is about to write a block of rows), ``shard-rows`` (a
Dask worker is about to write a block of rows into its shard), ``export-rows`` (``actkit export``
is about to read and write a block of rows).

Unset (the normal case) this costs one dictionary lookup per call.
"""

from __future__ import annotations

import errno
import os
import signal
import time

_counts: dict[str, int] = {}


def fault(point: str) -> None:
    """Fail here if ``ACTKIT_FAULT`` names this point (see the module docstring)."""
    spec = os.environ.get("ACTKIT_FAULT")
    if not spec:
        return
    action, _, rest = spec.partition(":")
    name, _, nth = rest.partition(":")
    if name != point:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] != int(nth or 1):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    elif action == "wait":
        release = os.environ["ACTKIT_FAULT_RELEASE"]
        open(release + ".waiting", "a").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:  # pragma: no cover - a typo in a test
        raise RuntimeError(f"unknown ACTKIT_FAULT action {action!r}")
