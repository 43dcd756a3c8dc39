"""Run by tests/test_torture.py: import actkit, torch and transformers once, then run every
job in a forked child (a real process that can be killed with SIGKILL), several at a time.

Usage: python _kill_launcher.py JOBS.json RESULTS.json

``JOBS.json``: ``[{"name", "argv", "fault", "stderr"}]``: ``actkit ARGV`` runs with
``ACTKIT_FAULT=fault`` and its stderr in the file ``stderr``. ``RESULTS.json``: name -> exit
status as :mod:`subprocess` reports it (``-9`` for SIGKILL, ``143`` after SIGTERM).
Forking saves each job the seconds of importing torch and transformers.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import transformers  # noqa: F401 - imported once, before forking

import actkit.extractors.extract  # noqa: F401
import actkit.extractors.registry  # noqa: F401
from actkit.cli import main

PARALLEL = 2


def _child(job) -> None:
    os.environ.pop("ACTKIT_FAULT", None)
    if job["fault"]:
        os.environ["ACTKIT_FAULT"] = job["fault"]
    fd = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    torch.set_num_threads(1)
    try:
        code = main(job["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a crash is a result too
        import traceback

        traceback.print_exc()
        code = 99
    sys.stderr.flush()
    os._exit(code)


def main_launcher():
    jobs = json.loads(open(sys.argv[1]).read())
    results, running = {}, {}
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < PARALLEL:
            job = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                _child(job)
            running[pid] = job["name"]
        pid, status = os.wait()
        name = running.pop(pid)
        results[name] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    with open(sys.argv[2], "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main_launcher()
