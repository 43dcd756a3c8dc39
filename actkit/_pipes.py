"""Output into a pipe whose reader has gone (``actkit layers M | head``): the command stops
quietly with status 141, as any Unix pipe writer does, instead of a BrokenPipeError traceback.
Every entry point (``actkit``, ``python -m actkit.zoo``) runs through :func:`run_pipe_safe`."""

from __future__ import annotations

import os
import select
import sys


def run_pipe_safe(run, argv) -> int:
    """``run(argv)``'s exit status; 141 when the reader of stdout or stderr has gone."""
    try:
        try:
            return run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        if not reader_gone():
            raise
        return quiet_broken_pipe()


def reader_gone() -> bool:
    """Whether stdout or stderr is a pipe whose reader has gone (``actkit layers M | head``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            poll = select.poll()
            poll.register(stream.fileno(), select.POLLERR)
            if any(ev & select.POLLERR for _, ev in poll.poll(0)):
                return True
        except (OSError, ValueError, AttributeError):  # no file descriptor (e.g. captured)
            continue
    return False


def quiet_broken_pipe() -> int:
    """The reader of our output has gone: stop quietly, as a pipe's writer does (exit status
    141 = 128 + SIGPIPE, what the shell reports for ``seq 1 100000 | head``). Later writes (the
    interpreter's final flush) go to /dev/null instead of a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass
    os.close(devnull)
    return 141
