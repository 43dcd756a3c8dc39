"""SIGTERM ends a command: one line, exit status 143, whatever the command was doing.

The handler raises :class:`Terminated` in the main thread, as Ctrl-C raises
``KeyboardInterrupt``, so every ``finally`` and ``except BaseException`` cleanup runs (a store
writes its last cursor, a temporary folder is removed). But an exception raised by a signal
handler lands wherever the main thread happens to be, and some places swallow it: a generator
closed or an object finalised by the garbage collector (Python prints ``Exception ignored in
...`` with the exception's name and carries on), or a library's ``except`` that wraps it into
an error of its own or drops it. Once, under load, a SIGTERM printed ``actkit.cli.Terminated``
inside another message and the command went on to exit 0 (issue 48).

So the signal is recorded as well as raised (:class:`SigtermGuard`): until the command's
outcome is decided, a watcher thread raises it again in the main thread every
:data:`REDELIVER_S` seconds (after a first :data:`GRACE_S`, the time the first one has to
unwind); a swallowed one is not printed; and a command that returns, or fails with another
error, after a SIGTERM ends as terminated all the same.
"""

from __future__ import annotations

import signal
import sys
import threading

__all__ = ["Terminated", "SigtermGuard"]

#: seconds the first :class:`Terminated` has to reach the command's end before it is raised again
GRACE_S = 1.0
#: seconds between two more
REDELIVER_S = 0.25


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C so the same cleanup runs."""


class SigtermGuard:
    """``with SigtermGuard() as guard:`` SIGTERM raises :class:`Terminated` in the main thread,
    again and again until :meth:`end` (or the block's end), and ``guard.signalled`` records it.

    Only the main thread installs handlers (elsewhere the guard records nothing and changes
    nothing); the previous SIGTERM handler and ``sys.unraisablehook`` are put back by
    :meth:`restore` (on exit). Between :meth:`end` and :meth:`restore` a SIGTERM is ignored:
    the command is saying how it ended.
    """

    def __init__(self):
        self.signalled = False
        self._ending = False
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._installed = False
        self._previous = None
        self._hook = None

    def install(self) -> "SigtermGuard":
        """Install the handler (in the main thread; elsewhere nothing changes)."""
        if threading.current_thread() is threading.main_thread():
            self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def _handle(self, signum, frame) -> None:
        if self._ending:  # the outcome is decided: nothing more to stop
            return
        if not self.signalled:
            self.signalled = True
            self._watcher = threading.Thread(target=self._redeliver, name="actkit-sigterm", daemon=True)
            self._watcher.start()
        raise Terminated()

    def _redeliver(self) -> None:
        main = threading.main_thread().ident
        wait = GRACE_S
        while not self._stop.wait(wait):
            signal.pthread_kill(main, signal.SIGTERM)  # to the main thread: it wakes from a blocking call
            wait = REDELIVER_S

    def _unraisable(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, Terminated):  # swallowed by a finaliser: raised again soon
            return
        self._hook(unraisable)

    def end(self) -> None:
        """The command's outcome is decided: a SIGTERM from now on is ignored, none is raised again."""
        self._ending = True
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def restore(self) -> None:
        """Put back the previous SIGTERM handler and unraisable hook (after :meth:`end`)."""
        self.end()
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            sys.unraisablehook = self._hook
            self._installed = False

    def __enter__(self) -> "SigtermGuard":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()
