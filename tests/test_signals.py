"""Issue 48: SIGTERM always ends a command with exit 143 and one line, wherever it lands: in a
finaliser that swallows it, in a library that wraps it into another error, in a main thread
that native code holds, in a C library's Python callbacks (``actkit/_signals.py``). The real
commands under 20 SIGTERMs at random moments: tests/test_kill_anywhere.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import actkit.cli as cli
from actkit._signals import GRACE_S, SigtermGuard, Terminated, uninterrupted

REPO = Path(__file__).resolve().parents[1]


class _SendsSigtermWhenFinalised:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200_000):  # the handler runs here, inside the finaliser, which swallows what it raises
            pass


def test_a_sigterm_a_finaliser_swallowed_is_raised_again_and_not_printed(capsys):
    start = time.monotonic()
    with SigtermGuard() as guard:
        with pytest.raises(Terminated):
            _SendsSigtermWhenFinalised()  # finalised at once
            while time.monotonic() - start < 10 * GRACE_S:
                time.sleep(0.01)
        assert guard.signalled
    assert time.monotonic() - start < 5 * GRACE_S
    assert capsys.readouterr().err == ""  # no "Exception ignored in ..."
    assert signal.getsignal(signal.SIGTERM) is not None and signal.set_wakeup_fd(-1) == -1  # all put back


def test_a_sigterm_in_an_uninterrupted_region_is_raised_as_it_ends():
    """What hands Python callbacks to a C library (h5py's file-object driver laying out a
    store) runs to its end; the SIGTERM that came meanwhile is raised right after."""
    reached = []
    with SigtermGuard() as guard:
        with pytest.raises(Terminated):
            with uninterrupted():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(200_000):  # the handler runs here, and waits
                    pass
                reached.append("end of the region")
        assert reached == ["end of the region"] and guard.signalled


@pytest.mark.parametrize("swallow", ["returns", "wraps"])
def test_a_command_that_swallows_sigterm_still_ends_with_one_line_and_143(swallow, monkeypatch, capsys):
    """A command that catches the SIGTERM and goes on to return 0, or raises another error
    about it (what a library may do), ends as terminated: exit 143, one line."""
    def command(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(GRACE_S / 2)
        except BaseException as exc:  # noqa: BLE001 - what the test is about
            if swallow == "wraps":
                raise RuntimeError(f"the write failed: {exc!r}") from None
        return 0

    monkeypatch.setattr(cli, "_command", command)
    assert cli.main(["whiten", "x.h5", "--out", "y.h5"]) == 143
    assert capsys.readouterr().err.splitlines() == ["actkit: terminated (SIGTERM)"]


def test_a_main_thread_held_in_native_code_is_ended_at_the_deadline(tmp_path):
    """SIGTERM blocked in the main thread stands for native code that never returns to Python
    (a torch.distributed rendezvous waiting for a rank that has gone): the watcher learns of
    the signal from the wakeup fd and ends the process at the deadline, with the line."""
    # "ready" comes from another thread once the main thread sits in the sleep: a signal that
    # came while the main thread still ran bytecode (returning from a print) would have its
    # handler run there, as any Python code's does, which is not the case under test
    script = textwrap.dedent("""
        import signal, sys, threading, time
        import actkit._signals as s
        s.DEADLINE_S = 1.0
        guard = s.SigtermGuard("actkit: terminated (SIGTERM); rerun the same command to resume").install()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        main = threading.main_thread().ident

        def ready():
            while sys._current_frames()[main].f_lineno != 16:
                time.sleep(0.01)
            time.sleep(0.2)
            print("ready", flush=True)

        threading.Thread(target=ready, daemon=True).start()
        time.sleep(60)
        print("not ended", file=sys.stderr)
    """)
    assert script.splitlines()[15].strip() == "time.sleep(60)"  # line 16, as ready() waits for
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and err.splitlines() == ["actkit: terminated (SIGTERM); rerun the same command "
                                                           "to resume"], err
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("moment", ["as the command ends", "in the teardown"])
def test_a_sigterm_after_the_command_ended_still_says_its_line_and_exits_143(moment, tmp_path):
    """The actkit program (``main`` with ``exiting``) keeps a handler past its command: a
    SIGTERM between the command's end and the restore of the handlers, or in the interpreter's
    teardown after it, ends the process with the line and 143, after what the command printed
    is flushed (a SIGTERM there used to take the default action: killed, no line)."""
    import numpy as np

    from _stores import write_store

    store = write_store(tmp_path / "s.h5", {"h": np.ones((4, 2))}, np.stack([np.arange(4), np.zeros(4, int)], 1))
    script = textwrap.dedent(f"""
        import os, signal, time
        import actkit.cli as cli
        from actkit._signals import SigtermGuard
        if {moment == "as the command ends"!r}:
            end = SigtermGuard.end
            def ending(self):
                end(self)
                os.kill(os.getpid(), signal.SIGTERM)  # held by the handler, not raised
                time.sleep(0.2)
            SigtermGuard.end = ending
        code = cli.main(["info", {str(store)!r}], exiting=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("not ended")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.splitlines() == ["actkit: terminated (SIGTERM)"]
    assert "[complete]" in proc.stdout and "not ended" not in proc.stdout  # the command's output was kept


def test_in_process_a_sigterm_after_the_command_ended_is_dropped(monkeypatch, tmp_path, capsys):
    """``main(argv)`` from Python (not exiting) puts back the caller's handler: a SIGTERM held
    as the command ended is dropped and the command's status stands."""
    import numpy as np

    from _stores import write_store

    store = write_store(tmp_path / "s.h5", {"h": np.ones((4, 2))}, np.stack([np.arange(4), np.zeros(4, int)], 1))
    end = SigtermGuard.end

    def ending(self):
        end(self)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)

    monkeypatch.setattr(SigtermGuard, "end", ending)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert cli.main(["info", str(store)]) == 0
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
