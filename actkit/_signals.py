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
error, after a SIGTERM ends as terminated all the same. A main thread that native code holds
(a ``torch.distributed`` rendezvous waiting for a rank that has gone) never returns to Python,
where a handler runs: the watcher learns of the signal from Python's wakeup file descriptor
(written by the C-level handler, in whatever thread), and :data:`DEADLINE_S` after it says
the line and ends the process itself, with the same status. Nothing is lost: every output is
crash-safe at any moment (a ``kill -9`` there resumes too).

Code that hands Python callbacks to a C library runs :func:`uninterrupted`: a store is laid out
through h5py's file-object driver, and a :class:`Terminated` raised inside one of its callbacks
left h5py's file half made, its cleanup at exit printing a traceback after the line. A SIGTERM
that arrives there is raised as the region ends (a few milliseconds later).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

__all__ = ["Terminated", "SigtermGuard", "STATUS", "end_at_exit", "uninterrupted"]

#: seconds the first :class:`Terminated` has to reach the command's end before it is raised again
GRACE_S = 1.0
#: seconds between two more
REDELIVER_S = 0.25
#: seconds after the signal at which a main thread that could not unwind is ended from the watcher
DEADLINE_S = 10.0
#: the exit status of a command ended by SIGTERM (128 + 15, what a shell reports for it)
STATUS = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C so the same cleanup runs."""


class _Deferral(threading.local):
    depth = 0  # uninterrupted() regions this thread is in
    pending = False  # a SIGTERM arrived in one


_DEFERRAL = _Deferral()


@contextlib.contextmanager
def uninterrupted():
    """A region of the main thread that a SIGTERM does not interrupt: one that arrives inside
    is raised (:class:`Terminated`) as the region ends normally (an error the region raises
    goes on as it is; the guard has recorded the signal)."""
    _DEFERRAL.depth += 1
    try:
        yield
    finally:
        _DEFERRAL.depth -= 1
    if _DEFERRAL.depth == 0 and _DEFERRAL.pending:
        _DEFERRAL.pending = False
        raise Terminated()


def end_at_exit(line: str, said: bool = False):
    """A SIGTERM handler for a process whose command has ended and which is exiting: it flushes
    stdout, says ``line`` (unless ``said``: the command ended terminated and said it) and ends
    the process with :data:`STATUS` at once (the command's outputs are in place or
    crash-safe; a rerun finds them)."""
    message = b"" if said else f"{line}\n".encode()

    def handle(signum=None, frame=None):
        try:
            sys.stdout.flush()  # what the command printed (a table into a file or pipe) is kept
        except BaseException:  # noqa: BLE001 - a reentrant flush or a closed pipe: the exit goes on
            pass
        os.write(2, message)
        os._exit(STATUS)

    return handle


class SigtermGuard:
    """``with SigtermGuard() as guard:`` SIGTERM raises :class:`Terminated` in the main thread,
    again and again until :meth:`end` (or the block's end), and ``guard.signalled`` records it.

    Only the main thread installs handlers (elsewhere the guard records nothing and changes
    nothing). :meth:`restore` (on exit) puts back the previous SIGTERM handler, wakeup file
    descriptor and ``sys.unraisablehook``. Between :meth:`end` and :meth:`restore` a SIGTERM
    is held, not raised: the command is saying how it ended; ``restore(exiting=True)`` then
    ends the process with it (the line, :data:`STATUS`), a plain ``restore()`` drops it. ``line`` is what the watcher says when it
    has to end the process itself.
    """

    def __init__(self, line: str = "actkit: terminated (SIGTERM)"):
        self.line = line
        self.signalled = False
        self._ending = False
        self._late = False  # a SIGTERM between end() and restore()
        self._seen = threading.Event()  # a SIGTERM arrived (from the wakeup fd or the handler)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._installed = False
        self._previous = self._hook = None
        self._pipe = self._wakeup = None

    def install(self) -> "SigtermGuard":
        """Install the handler and start the watcher (in the main thread; elsewhere nothing)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        self._wakeup = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        self._installed = True
        self._watcher = threading.Thread(target=self._watch, name="actkit-sigterm", daemon=True)
        self._watcher.start()
        return self

    def _handle(self, signum, frame) -> None:
        if self._ending:  # the outcome is decided: nothing more to stop (an exiting restore() ends it)
            self._late = True
            return
        self.signalled = True
        self._seen.set()
        if _DEFERRAL.depth:  # raised as the region ends
            _DEFERRAL.pending = True
            return
        raise Terminated()

    def _watch(self) -> None:
        """Wait for a SIGTERM; then raise it again in the main thread until the command ends,
        and end the process at the deadline."""
        while not self._seen.is_set():
            try:
                got = os.read(self._pipe[0], 64)
            except OSError:  # closed by restore()
                return
            if self._stop.is_set():
                return
            if signal.SIGTERM in got:
                self._seen.set()
        deadline = time.monotonic() + DEADLINE_S
        wait = GRACE_S
        while not self._stop.wait(wait):
            if time.monotonic() >= deadline:  # held in native code: no handler can run there
                os.write(2, f"{self.line}\n".encode())
                os._exit(STATUS)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # wakes it from a blocking call
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
            os.write(self._pipe[1], b"\0")  # wakes a watcher still waiting for a signal
            self._watcher.join()
            self._watcher = None

    def restore(self, *, exiting: bool = False) -> None:
        """Put back what :meth:`install` replaced (after :meth:`end`). ``exiting``: the process
        ends next (the ``actkit`` program), so SIGTERM gets :func:`end_at_exit`'s handler in
        the same call, not the default action: a SIGTERM in the interpreter's teardown (torch's
        and h5py's take a fraction of a second) still ends with the line and :data:`STATUS`."""
        self.end()
        if self._installed:
            signal.set_wakeup_fd(self._wakeup)
            previous = signal.SIG_DFL if self._previous is None else self._previous
            at_exit = end_at_exit(self.line, said=self.signalled)
            signal.signal(signal.SIGTERM, at_exit if exiting else previous)
            sys.unraisablehook = self._hook
            for fd in self._pipe:
                os.close(fd)
            self._installed = False
            if exiting and self._late:  # a SIGTERM came as the command ended: it ends now too
                at_exit()

    def __enter__(self) -> "SigtermGuard":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()
