"""Run by the kill tests (tests/test_torture.py, tests/test_kill_anywhere.py): import actkit,
torch and the writers' libraries once, then run every job in forked children (real processes
that can be killed with SIGKILL), several jobs at a time.

Usage: python _kill_launcher.py JOBS.json RESULTS.json

``JOBS.json``: a list of jobs, each ``{"name", "stderr"}`` and

* ``"argv"``: ``actkit ARGV`` runs (``actkit.cli.main``), or ``"call": "module:function"``
  with ``"args"``: ``function(*args)`` runs (its return value is the exit status; ``module``
  is imported from tests/ or the installed packages);
* ``"fault"`` (optional): ``ACTKIT_FAULT`` for the run;
* ``"ranks": K`` (optional): K processes with the environment ``torchrun --nproc-per-node K``
  gives its ranks (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``, ``MASTER_PORT``); rank r > 0 writes its stderr to ``STDERR.rank<r>``;
* ``"kill"`` (optional): a signal the launcher sends (to every rank) at a moment it watches
  for, polling every millisecond: ``{"signal": "KILL"|"TERM", "when": "entry", "watch":
  FOLDER, "match": REGEX}`` the first moment a path under ``FOLDER`` that was not there at the
  start (relative to ``FOLDER``, ``/``-separated) matches ``REGEX`` (``re.search``; default
  any new path); ``{"signal", "when": "cpu", "fraction": F, "of": JOB}`` once the run has
  used ``F`` times the CPU time (all ranks) that job ``JOB`` took to its ``mark`` (or in all);
  ``{"signal", "when": "progress", "watch": FOLDER, "fraction": F, "total": N}`` once the
  resume cursors (``*.progress.json``) under ``FOLDER`` count ``F * N`` samples written;
* ``"tries": T`` (optional, with ``kill`` and ``record``): a run that ended before the kill's
  moment came (the launcher was not scheduled in time) is run again, up to ``T`` times in
  all, after what it wrote under ``record`` is removed; a ``cpu`` kill's next try counts
  its fraction of the CPU time the try before took to its ``mark``;
* ``"record": FOLDER`` (optional): the paths under ``FOLDER`` when the run has ended;
* ``"mark": {"watch": FOLDER, "match": REGEX}`` (optional): the CPU time the run has used
  when such a path first appears (its output in place: the work done, before the exit);
* ``"after": [JOB, ...]`` (optional): start once these jobs have ended;
* ``"load": true`` (optional): run while another process keeps one CPU busy (the jobs with
  ``load`` run after all the others, with a spinning process beside them);
* ``"warm": true`` (optional): run first, in the launcher itself, one after another: what a
  first run imports lazily (model classes, tokenizers) is then imported once, not in every
  forked run.

``RESULTS.json``: job name -> exit status as :mod:`subprocess` reports it (``-9`` for
SIGKILL, ``143`` after SIGTERM), and ``"_detail"``: job name -> ``{"cpu", "wall",
"signalled", "left", "tries", "marked"}`` (CPU and wall seconds; whether the kill's signal
landed before the run ended; what ``record`` found; how many tries; the CPU seconds at
``mark``). Forking saves each run the seconds of importing torch and transformers.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import time

import torch
import transformers  # noqa: F401 - imported once, before forking

import actkit.extractors.extract  # noqa: F401
import actkit.extractors.registry  # noqa: F401
from actkit.cli import main

PARALLEL = 2
POLL_S = 0.001
RUN_TIMEOUT_S = 120
_WARM = ("actkit.extractors.distributed", "torch.distributed", "sklearn.decomposition", "scipy.linalg", "h5py",
         "actkit.whitening", "actkit.ica", "actkit.dictionary", "actkit.matrix_files", "actkit.export",
         "actkit.sae", "pyarrow.parquet", "dask.array", "safetensors.numpy", "timm")


def _warm_imports() -> None:
    """The writers' heavy imports, once, before forking (a missing optional one is skipped)."""
    for name in _WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _child(job, rank=None, port=None) -> None:
    os.environ.pop("ACTKIT_FAULT", None)
    if job.get("fault"):
        os.environ["ACTKIT_FAULT"] = job["fault"]
    stderr = job["stderr"]
    if rank is not None:  # what torchrun gives each rank
        k = int(job["ranks"])
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(k), LOCAL_WORLD_SIZE=str(k),
                          GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        stderr = stderr if rank == 0 else f"{stderr}.rank{rank}"
    fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    torch.set_num_threads(1)
    faulthandler.dump_traceback_later(RUN_TIMEOUT_S, exit=True)  # a run that hangs says where, and ends
    try:
        if "call" in job:
            module, _, function = job["call"].partition(":")
            code = getattr(importlib.import_module(module), function)(*job.get("args", []))
            code = int(code or 0)
        else:
            code = main(job["argv"], exiting=True)  # the process ends next, as the actkit program's does
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a crash is a result too
        import traceback

        traceback.print_exc()
        code = 99
    sys.stderr.flush()
    os._exit(code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listing(folder: str) -> set:
    """Every path under ``folder``, relative, ``/``-separated (empty if it does not exist)."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in dirs + files:
            found.add(name if rel == "." else f"{rel}/{name}")
    return found


def _samples_written(folder: str) -> int:
    done = 0
    for path in _listing(folder):
        if path.endswith(".progress.json"):
            try:
                with open(os.path.join(folder, path)) as fh:
                    done += int(json.load(fh)["samples_done"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
    return done


def _cpu(pids) -> float:
    """Seconds on a CPU so far of the processes ``pids`` (the scheduler's own count, in ns)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


class _Run:
    """One job's processes, its kill condition and its outcome."""

    def __init__(self, job, detail, tries=1, work=None):
        self.job, self.kill, self.tries = job, job.get("kill"), tries
        self.sent = False
        if self.kill and self.kill["when"] == "entry":
            self.seen = _listing(self.kill["watch"])
            self.pattern = re.compile(self.kill.get("match", ""))
        if self.kill and self.kill["when"] == "cpu":
            of = detail[self.kill["of"]]
            self.budget = self.kill["fraction"] * (work or of.get("marked", of["cpu"]))
        self.marked, self.mark = None, job.get("mark")
        if self.mark:
            self.mark_seen, self.mark_pattern = _listing(self.mark["watch"]), re.compile(self.mark["match"])
        self.start = time.monotonic()
        ranks = job.get("ranks")
        port = _free_port() if ranks else None
        self.pids, self.codes, self.cpu = [], {}, 0.0
        for rank in range(int(ranks or 1)):
            pid = os.fork()
            if pid == 0:
                _child(job, rank if ranks else None, port)
            self.pids.append(pid)

    def poll(self) -> None:
        """Note the ``mark``; send the kill's signal if its moment has come."""
        if self.mark and self.marked is None and any(
                self.mark_pattern.search(p) for p in _listing(self.mark["watch"]) - self.mark_seen):
            self.marked = _cpu(self.pids)
        if not self.kill or self.sent:
            return
        when = self.kill["when"]
        if when == "entry":
            due = any(self.pattern.search(p) for p in _listing(self.kill["watch"]) - self.seen)
        elif when == "progress":
            due = _samples_written(self.kill["watch"]) >= self.kill["fraction"] * self.kill["total"]
        else:
            due = _cpu(self.pids) >= self.budget
        if due:
            sig = getattr(signal, "SIG" + self.kill.get("signal", "KILL"))
            for pid in self.pids:
                if pid not in self.codes:
                    os.kill(pid, sig)
            self.sent = len(self.codes) < len(self.pids)

    def reaped(self, pid, status, usage) -> None:
        self.codes[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.cpu += usage.ru_utime + usage.ru_stime

    def done(self) -> bool:
        return len(self.codes) == len(self.pids)

    def landed(self) -> bool:
        """Whether the kill's signal reached a rank before it ended (SIGKILL: killed; SIGTERM:
        exit 143, or killed by it where no handler was installed yet)."""
        sig = getattr(signal, "SIG" + self.kill.get("signal", "KILL"))
        return self.sent and any(c == -sig or (sig == signal.SIGTERM and c == 143) for c in self.codes.values())

    def again(self) -> bool:
        """Whether the kill's moment passed unseen (the run ended first) and another try is
        due; what this one wrote is removed."""
        if not self.kill or self.landed() or self.tries >= int(self.job.get("tries", 1)) or "record" not in self.job:
            return False
        for entry in os.scandir(self.job["record"]):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        return True

    def outcome(self):
        codes = [self.codes[p] for p in self.pids]
        code = next((c for c in codes if c != 0), 0)
        found = {"cpu": self.cpu, "wall": time.monotonic() - self.start, "tries": self.tries,
                 "signalled": bool(self.kill) and self.landed()}
        if "record" in self.job:
            found["left"] = sorted(_listing(self.job["record"]))
        if self.marked is not None:
            found["marked"] = self.marked
        return code, found


def _spin() -> None:
    while True:
        pass


def run_jobs(jobs, results, detail) -> None:
    """Run ``jobs`` (dependencies first), PARALLEL at a time, filling ``results`` and ``detail``."""
    pending, running = list(jobs), {}
    while pending or running:
        ready = [j for j in pending if all(a in results for a in j.get("after", []))]
        while ready and len({id(r) for r in running.values()}) < PARALLEL:
            job = ready.pop(0)
            pending.remove(job)
            run = _Run(job, detail)
            for pid in run.pids:
                running[pid] = run
        for run in {id(r): r for r in running.values()}.values():
            run.poll()
        while running:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            run = running.pop(pid)
            run.reaped(pid, status, usage)
            if run.done() and run.again():
                # the work this try took to its mark: the measure of the next (a reference run
                # can take longer than the runs after it, and its fraction then come too late)
                run = _Run(run.job, detail, run.tries + 1, run.marked)
                for pid in run.pids:
                    running[pid] = run
            elif run.done():
                name = run.job["name"]
                results[name], detail[name] = run.outcome()
        if not running and pending and not any(all(a in results for a in j.get("after", [])) for j in pending):
            raise RuntimeError(f"jobs wait for jobs that never run: {[j['name'] for j in pending]}")
        time.sleep(POLL_S)


def _warm(job) -> None:
    """Run ``job`` here, its stderr to its file (the launcher's own stays as it is)."""
    saved = os.dup(2)
    fd = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        if "call" in job:
            module, _, function = job["call"].partition(":")
            getattr(importlib.import_module(module), function)(*job.get("args", []))
        else:
            main(job["argv"])
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _unshare_locks() -> None:
    """tqdm's write lock holds a semaphore that every process forked after it was made shares
    (a warm run made one): a run killed while holding it would block every later run's bars.
    Here no run needs a lock across processes: tqdm gets its thread lock only (as where
    ``multiprocessing`` is missing), and no monitor thread is left running."""
    if "tqdm" in sys.modules:
        from tqdm import std

        std.tqdm.monitor_interval = 0
        if std.tqdm.monitor is not None:
            std.tqdm.monitor.exit()
            std.tqdm.monitor = None
        classes, todo = [], [std.tqdm]
        while todo:  # tqdm.auto's class and the others keep a lock of their own
            classes.append(todo.pop())
            todo.extend(classes[-1].__subclasses__())
        for cls in classes:
            if "_lock" in vars(cls):
                delattr(cls, "_lock")
        std.TqdmDefaultWriteLock.mp_lock = None


def main_launcher():
    jobs = json.loads(open(sys.argv[1]).read())
    if any("call" in j or "ranks" in j or "kill" in j for j in jobs):
        _warm_imports()
    torch.set_num_threads(1)
    for job in jobs:
        if job.get("warm"):
            _warm(job)
    jobs = [j for j in jobs if not j.get("warm")]
    _unshare_locks()
    results, detail = {}, {}
    run_jobs([j for j in jobs if not j.get("load")], results, detail)
    loaded = [j for j in jobs if j.get("load")]
    if loaded:
        spinner = os.fork()
        if spinner == 0:
            _spin()
        try:
            run_jobs(loaded, results, detail)
        finally:
            os.kill(spinner, signal.SIGKILL)
            os.waitpid(spinner, 0)
    with open(sys.argv[2], "w") as fh:
        json.dump({**results, "_detail": detail}, fh)


if __name__ == "__main__":
    main_launcher()
