"""The thread policy: how many CPU threads actkit uses, decided in one place.

**How many.** :func:`resolve_threads` gives the budget of this process: an explicit
``threads=`` / ``--threads`` when given; else ``OMP_NUM_THREADS`` when set; else the CPUs this
process may run on (``os.sched_getaffinity``, capped by the cgroup CPU quota of a container:
``/sys/fs/cgroup/cpu.max``, or cgroup v1's ``cpu.cfs_quota_us``), less those other processes
keep busy when it starts (:func:`busy_cpus`), at most an equal share per ``torchrun`` rank on
this host (``LOCAL_WORLD_SIZE``), at least one. (``torchrun`` itself exports
``OMP_NUM_THREADS=1`` to its ranks unless the variable is set: that, like any
``OMP_NUM_THREADS``, is followed.)

**Never multiplied.** :func:`use_threads` applies the budget to every pool at once: torch's
intra-op pool, BLAS and OpenMP through threadpoolctl, and actkit's own workers
(:func:`current_threads`, e.g. FastICA's row partition, which runs its BLAS at one thread
inside each worker). The prefetch thread of :func:`actkit._data.iter_blocks` only reads rows
(it waits on a one-block queue otherwise) and runs only when the budget is 2 or more. Dask
workers get ``budget // workers`` threads each (:func:`worker_env`).

**Never spinning.** Idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``,
``KMP_BLOCKTIME=0``) and OpenBLAS threads sleep almost at once after a call
(``OPENBLAS_THREAD_TIMEOUT=4``, i.e. 2^4 cycles instead of ~0.1 s): :func:`quiet_waiting`
sets these before the libraries load (the CLI does it first thing; the user's own values are
kept). While torch computes (:func:`torch_region`), BLAS runs at one thread, so the torch
and OpenBLAS pools are never both awake. On a shared 2-core machine, spinning pools made
extraction 7-15x slower than one thread (issue 21; ``benchmarks/bench_threads.py``).

Dense (D x D) decompositions of a few hundred dimensions run *slower* with several OpenBLAS
threads on a busy machine (up to 10x measured on a shared 2-core box): :func:`small_linalg`
runs them at one BLAS thread; large GEMMs over the data keep the budget.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from threadpoolctl import ThreadpoolController

from actkit.errors import ValidationError

__all__ = [
    "available_cpus",
    "busy_cpus",
    "current_threads",
    "fixed_order_sum",
    "follows_thread_policy",
    "map_ordered",
    "prefetch_allowed",
    "quiet_waiting",
    "resolve_threads",
    "small_linalg",
    "torch_region",
    "use_threads",
    "worker_env",
]

_CONTROLLER = None
_ACTIVE: list[int] = []  # budgets of the enclosing use_threads() blocks, innermost last
_DEFAULT: list = []  # [when, ranks, budget]: the default, measured at most every DEFAULT_TTL s
DEFAULT_TTL = 10.0

# idle threads sleep; set before torch/numpy load their OpenMP/OpenBLAS (user values kept)
QUIET_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", "OPENBLAS_THREAD_TIMEOUT": "4"}


def quiet_waiting(environ=os.environ) -> None:
    """Set :data:`QUIET_ENV` in ``environ`` where not set already.

    The libraries read these once, when they load: call it before numpy or torch is imported
    (this module imports neither at import time, so the CLI can).
    """
    for key, value in QUIET_ENV.items():
        environ.setdefault(key, value)


# modules whose import loads a BLAS or OpenMP runtime: the controller rescans when one appears
_CARRIERS = ("numpy", "scipy.linalg", "torch", "sklearn", "lightgbm")
_SEEN: tuple = ()


def _controller():
    """threadpoolctl's view of the BLAS / OpenMP libraries loaded now (scanning them takes
    ~20 ms: done again only when one of :data:`_CARRIERS` has been imported since)."""
    global _CONTROLLER, _SEEN
    seen = tuple(m in sys.modules for m in _CARRIERS)
    if _CONTROLLER is None or seen != _SEEN:
        _CONTROLLER, _SEEN = ThreadpoolController(), seen
    return _CONTROLLER


def _cgroup_cpus(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup CPU quota allows (None: no quota)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # cgroup v2: "max 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by the cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    quota = _cgroup_cpus()
    if quota is not None:
        n = min(n, max(1, int(quota)))
    return max(1, n)


def _env_threads() -> int | None:
    text = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def resolve_threads(threads: int | None = None) -> int:
    """The thread budget of this process (see the module docstring for the order).

    Parameters
    ----------
    threads : int or None
        Explicit budget (``--threads``); ``None``: the budget of the enclosing
        :func:`use_threads`, else ``OMP_NUM_THREADS``, else the CPUs this process may run on,
        divided between the torchrun ranks on this host.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValidationError(f"threads must be a positive integer, got {threads!r}")
        return threads
    if _ACTIVE:  # inside use_threads(): its budget (an explicit --threads reaches the API)
        return _ACTIVE[-1]
    env = _env_threads()
    if env is not None:
        return env
    local_ranks = os.environ.get("LOCAL_WORLD_SIZE", "1")
    ranks = int(local_ranks) if local_ranks.isdigit() and int(local_ranks) > 0 else 1

    now = time.monotonic()
    if _DEFAULT and now - _DEFAULT[0] < DEFAULT_TTL and _DEFAULT[1] == ranks:
        return _DEFAULT[2]
    cpus = available_cpus()
    n = max(1, min(cpus - busy_cpus(cpus), cpus // ranks))
    _DEFAULT[:] = [now, ranks, n]
    return n


def busy_cpus(cpus: int, samples: int = 5, interval: float = 0.01) -> int:
    """CPUs (of the ``cpus`` this process may use) that other processes keep busy now: the
    median over ``samples`` readings of the runnable tasks in ``/proc/loadavg`` (this thread
    excluded), scaled to this process's share of the machine; 0 where unknown.

    A thread pool needs all its threads at every step: on a machine other jobs keep busy, a
    second thread that waits for a core makes the first wait too, so the default budget
    leaves busy CPUs out (measured in ``docs/performance.md``).
    """
    readings = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as fh:
                running = int(fh.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0
        readings.append(running - 1)
        if i + 1 < samples:
            time.sleep(interval)
    share = cpus / max(cpus, os.cpu_count() or cpus)
    return max(0, round(statistics.median(readings) * share))


def current_threads() -> int:
    """The budget in force: that of the innermost :func:`use_threads`, else the default."""
    return resolve_threads()


# read by OpenBLAS / MKL / OpenMP (and torch) when they load: the budget of libraries that load
# inside a use_threads() block (the CLI enters it before numpy or torch is imported)
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def use_threads(threads: int | None = None):
    """Context manager: every pool (torch intra-op, BLAS, OpenMP, actkit's own workers) at the
    budget :func:`resolve_threads` gives for ``threads``, including those of libraries first
    loaded inside the block (through :data:`THREAD_ENV`); the previous settings are restored
    on exit. Yields the budget."""
    n = resolve_threads(threads)
    torch = _loaded_torch()
    before = torch.get_num_threads() if torch is not None else None
    saved = {k: os.environ.get(k) for k in THREAD_ENV}
    os.environ.update({k: str(n) for k in THREAD_ENV})
    _ACTIVE.append(n)
    try:
        with _controller().limit(limits=n):
            if torch is not None:
                torch.set_num_threads(n)
            yield n
    finally:
        _ACTIVE.pop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        torch = _loaded_torch()
        if before is not None:
            torch.set_num_threads(before)
        elif torch is not None:  # loaded inside the block: back to the budget outside it
            torch.set_num_threads(resolve_threads())


def follows_thread_policy(fn):
    """Decorator of a public entry point with a ``threads=None`` keyword: the call runs inside
    ``use_threads(threads)``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with use_threads(kwargs.get("threads")):
            return fn(*args, **kwargs)

    return wrapper


@contextlib.contextmanager
def torch_region():
    """Context manager for torch compute (a forward pass): torch keeps the budget, BLAS (numpy's
    OpenBLAS) runs at one thread, so the two pools are never both awake."""
    torch = _loaded_torch()
    if torch is not None:
        torch.set_num_threads(current_threads())
    with _controller().limit(limits=1, user_api="blas"):
        yield


@contextlib.contextmanager
def torch_at_one_thread():
    """Context manager: torch's intra-op pool at one thread inside the block (torch imported
    for it), for work whose torch ops run on actkit's workers, each worker one thread: the
    same digits at any worker count."""
    import torch  # torch: ~1.2 s at import (measured); only where torch ops run on actkit's workers

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _loaded_torch():
    return sys.modules.get("torch")


def worker_env(n_workers: int, threads: int | None = None) -> dict[str, str]:
    """Environment of each of ``n_workers`` worker processes (Dask) on this host: the budget
    split between them, idle threads sleeping."""
    each = str(max(1, resolve_threads(threads) // max(1, int(n_workers))))
    env = {k: each for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    quiet_waiting(env)
    return env


def prefetch_allowed() -> bool:
    """Whether a background prefetch thread fits the budget (2 threads or more)."""
    return current_threads() >= 2


def small_linalg():
    """Context manager: one BLAS/LAPACK thread inside it."""
    return _controller().limit(limits=1)


ROW_CHUNK = 4096  # rows of one chunk of fixed_order_sum: a constant, never the thread count

_POOLS: dict = {}  # workers -> a ThreadPoolExecutor kept for the process (threads start once)
_IN_POOL = __import__("threading").local()


def map_ordered(fn, items, workers: int):
    """``fn`` over ``items`` on ``workers`` threads, results in order, at most
    ``2 * workers`` items in flight (a streaming ``items`` stays bounded).

    The threads belong to one pool per worker count, kept for the life of the process: an
    iterative solver makes thousands of passes, and starting fresh threads for each cost
    more than the work on small data. Called from inside such a pool, or with
    ``workers <= 1``, it runs in the calling thread (no nested pools, no deadlock)."""
    if workers <= 1 or getattr(_IN_POOL, "yes", False):
        for x in items:
            yield fn(x)
        return

    pool = _POOLS.get(workers)
    if pool is None:
        def mark():
            _IN_POOL.yes = True

        pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="actkit-pass", initializer=mark)
    pending = deque()
    try:
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:  # an error or an abandoned generator: nothing left running for it
            fut.cancel()
        for fut in pending:
            if not fut.cancelled():
                fut.exception()


def fixed_order_sum(fn, n_rows: int, chunk: int = ROW_CHUNK) -> list:
    """``sum(fn(a, b))`` over the fixed row chunks ``[a, b)`` of ``n_rows`` rows, the same bits
    at every thread count.

    A multi-threaded BLAS splits a product ``X.T @ Y`` over the rows (its inner dimension)
    differently for each thread count, so the float sums differ. Here the chunks are fixed,
    each is computed at one BLAS thread (the chunks run on the budget's threads, at most
    ``2 x threads`` in flight) and the partial results are added in chunk order, in float64.

    Parameters
    ----------
    fn : callable (a, b) -> sequence of arrays or floats
    n_rows : int

    Returns
    -------
    list
        The float64 sums, one per item ``fn`` returns.
    """
    import numpy as np  # numpy loads OpenBLAS: the CLI sets its idle-thread environment first (quiet_waiting)

    bounds = [(a, min(n_rows, a + chunk)) for a in range(0, n_rows, chunk)]
    total = None

    def add(part):
        nonlocal total
        if total is None:
            total = [np.array(x, dtype=np.float64) for x in part]
        else:
            for t, x in zip(total, part):
                t += x

    workers = min(current_threads(), len(bounds))
    with small_linalg():
        if workers <= 1:
            for a, b in bounds:
                add(fn(a, b))
        else:
            for part in map_ordered(lambda ab: fn(*ab), bounds, workers):
                add(part)
    return total
