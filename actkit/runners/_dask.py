"""Dask: passes over row blocks on a cluster, as ``map over chunks + exact tree merge``.

Everything here is optional (``pip install "actkit[dask]"``): this module imports nothing
of Dask at import time, and the estimators only come here when they are given a dask array
or a ``scheduler``.

* :func:`to_dask` turns a store layer (or an ``h5py.Dataset``) into a ``dask.array.Array``
  with one chunk per row block. The graph holds the file's *path*, never an h5py handle:
  every task opens the file itself, in the process that runs it, and a worker that cannot
  open it says which path and which worker (:class:`~actkit.errors.StoreError`).
* :func:`use_scheduler` resolves a scheduler (an active ``distributed.Client``, an address,
  ``"local:N"``, or one of Dask's local schedulers) into a :class:`Runner`.
* :meth:`Runner.map_reduce` runs ``fn(chunk, first_row, *args)`` on every chunk and merges
  the per-chunk results in a fixed binary tree, so the result does not depend on which
  worker finished first (nor on a worker killed and its tasks retried). The per-pass
  passes themselves (moments, FastICA sums, dictionary statistics) are stated by the
  estimators as :class:`~actkit.runners.RowPass` descriptions; :meth:`Runner.run` executes one.

Memory per worker: one chunk plus the per-chunk statistics (O(D^2)), times the worker's
threads; only merged statistics travel to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import warnings

import numpy as np

from actkit._device import is_accelerator
from actkit._threads import current_threads, small_linalg, worker_env
from actkit.errors import ActkitError, SchedulerError, ValidationError
from actkit.runners._dask_arrays import (H5Rows,  # noqa: F401  (re-exported: Layer.to_dask, the store's writers)
                                         _require_dask, as_dask, check_chunks, from_h5, from_rows, is_dask, to_dask,
                                         where)
from actkit.runners._local import run_in_order
from actkit.runners._pass import portable

__all__ = ["CONNECT_TIMEOUT", "Runner", "as_dask", "from_h5", "from_rows", "is_dask", "to_dask", "use_scheduler"]

# seconds to reach a scheduler (and for it to have a worker); ACTKIT_DASK_TIMEOUT overrides
CONNECT_TIMEOUT = float(os.environ.get("ACTKIT_DASK_TIMEOUT", "3"))
_LOCAL_SCHEDULERS = ("threads", "sync", "synchronous", "single-threaded", "processes")


@contextlib.contextmanager
def on_dask(X, scheduler=None, block_rows=None, device="cpu"):
    """``(rows, runner)`` for a pass over ``X`` on Dask (a dask array, or a stream with a
    ``scheduler``): the dask array and the :class:`Runner` of ``scheduler``
    (:func:`actkit.runners.runner_for` is the one caller)."""
    Xd = as_dask(X, scheduler, block_rows)
    if is_accelerator(device):
        raise ValidationError(f"device={device!r} with Dask: the passes run on the workers' CPUs; use device='cpu'")
    with use_scheduler(scheduler) as runner:
        yield Xd, runner


# ----------------------------------------------------------------------------- schedulers
def _active_client():
    if "distributed" not in sys.modules:  # no Client can exist without the import
        return None
    from distributed import default_client  # optional dependency (actkit[dask])

    try:
        return default_client()
    except ValueError:
        return None


def _is_client(obj) -> bool:
    return type(obj).__name__ == "Client" and (type(obj).__module__ or "").startswith("distributed")


@contextlib.contextmanager
def use_scheduler(scheduler=None, *, timeout: float = CONNECT_TIMEOUT):
    """Resolve ``scheduler`` into a :class:`Runner` (a context manager).

    Parameters
    ----------
    scheduler : None, distributed.Client, str
        ``None``: the active ``distributed.Client`` if there is one, else Dask's default
        local scheduler. A ``Client``: used as is (not closed). ``"local:N"``: a
        ``LocalCluster`` of N worker processes (one thread each) on 127.0.0.1, closed on
        exit. ``"threads"``, ``"sync"``, ``"processes"``: Dask's local schedulers. Any other
        string: the address of a running scheduler (``tcp://host:8786`` or ``host:8786``).
    timeout : float
        Seconds to connect (and to wait for a first worker) before
        :class:`~actkit.errors.SchedulerError`.
    """
    _require_dask()
    if scheduler is None:
        client = _active_client()
        yield Runner(client=client) if client is not None else Runner(local=None)
        return
    if isinstance(scheduler, Runner):
        yield scheduler
        return
    if _is_client(scheduler):
        yield Runner(client=scheduler)
        return
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise SchedulerError(f"scheduler must be an address, 'local:N', a Dask scheduler name or a "
                             f"distributed.Client, got {scheduler!r}")
    text = scheduler.strip()
    if text in _LOCAL_SCHEDULERS:
        yield Runner(local=text)
        return
    try:
        import distributed  # optional dependency (actkit[dask])
    except ImportError:
        raise ActkitError('the Dask distributed scheduler is not installed; install the extra: '
                          'pip install "actkit[dask]"') from None
    if text.startswith("local:"):
        n = text.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise SchedulerError(f"--scheduler {text}: use local:N with N >= 1 worker processes")
        with _quiet_logs(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "port 8787 in use" of a worker's HTTP server
            cluster = distributed.LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address=None,
                                               env=worker_env(int(n)), silence_logs=logging.CRITICAL)
            client = distributed.Client(cluster, set_as_default=False)
        try:
            yield Runner(client=client)
        finally:
            with _quiet_logs():
                client.close()
                cluster.close()
        return
    address = _check_scheduler(text, timeout)
    with _quiet_logs():
        try:
            client = distributed.Client(address, timeout=f"{timeout}s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise SchedulerError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
                                 f"({type(exc).__name__}); start one with `dask scheduler` or use "
                                 f"--scheduler local:N") from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (OSError, TimeoutError):
            raise SchedulerError(f"the Dask scheduler at {address} has no workers (waited {timeout:g} s); "
                                 f"start some with `dask worker {address}`") from None
        yield Runner(client=client)
    finally:
        with _quiet_logs():
            client.close()


def _check_scheduler(text: str, timeout: float) -> str:
    """The address of ``--scheduler TEXT`` once a Dask scheduler answers there, within
    ``timeout`` seconds; else one-line :class:`~actkit.errors.SchedulerError` (a malformed
    address, nothing listening, or a server that does not speak Dask's protocol, such as an
    HTTP server: ``distributed.Client`` would wait on it without end)."""
    from distributed.comm import connect, parse_address  # optional dependency (actkit[dask])
    from distributed.comm.addressing import parse_host_port  # optional dependency (actkit[dask])

    address = text if "://" in text else f"tcp://{text}"
    try:
        protocol, location = parse_address(address)
        if protocol in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as exc:
        raise SchedulerError(f"--scheduler {text} is not a scheduler address ({_short(exc)}); use "
                             f"tcp://HOST:PORT, HOST:PORT or local:N") from None

    result = {}

    async def identity():
        comm = await connect(address, timeout=timeout)
        result["connected"] = True
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def probe():
        try:
            result["reply"] = asyncio.run(asyncio.wait_for(identity(), timeout))
        except BaseException as exc:  # reported below, in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=probe, name="actkit-scheduler-probe", daemon=True)
    with _quiet_logs():
        thread.start()
        thread.join(timeout + 2)
    error, reply = result.get("error"), result.get("reply")
    if isinstance(reply, dict) and reply.get("type") == "Scheduler":
        return address
    if not result.get("connected"):  # nothing listening there (refused, or no answer to connect)
        why = f" ({_short(error)})" if isinstance(error, OSError) and not isinstance(error, TimeoutError) else ""
        raise SchedulerError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s{why}; start one "
                             "with `dask scheduler` or use --scheduler local:N")
    raise SchedulerError(f"{address} did not answer as a Dask scheduler within {timeout:g} s (is something "
                         f"else listening there?); start one with `dask scheduler`, or use --scheduler local:N")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:160] or type(exc).__name__


@contextlib.contextmanager
def _quiet_logs():
    """Connection retries and cluster shutdown log at WARNING; the one-line error says it all."""
    loggers = [logging.getLogger(n) for n in ("distributed", "distributed.client", "distributed.comm",
                                              "distributed.core", "distributed.nanny",
                                              "distributed.scheduler", "distributed.worker")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


# ----------------------------------------------------------------------------- passes
def _tree(items, merge_delayed):
    """Pairwise merge in a fixed binary tree (left before right): deterministic."""
    level = list(items)
    while len(level) > 1:
        nxt = [merge_delayed(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _bar(total, desc, progress):
    from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

    return tqdm(total=total, desc=desc, unit="block", leave=False,
                disable=None if progress is None else not progress)


class Runner:
    """Where passes run: a ``distributed.Client`` or one of Dask's local schedulers.

    Attributes
    ----------
    client : distributed.Client or None
    local : str or None
        Local scheduler name (``None``: Dask's default) when there is no client.
    """

    remote = True  # the workers read the rows themselves

    def __init__(self, client=None, local=None):
        self.client = client
        self.local = local

    @property
    def n_workers(self) -> int:
        """Workers of the cluster (1 for a local scheduler)."""
        if self.client is None:
            return 1
        return max(1, len(self.client.scheduler_info(n_workers=-1)["workers"]))

    def workers(self) -> list:
        """Worker addresses, sorted (empty for a local scheduler)."""
        if self.client is None:
            return []
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def task_source(self, X):
        """A source as a task on a worker reads it (``_dask_compare.task_source``: a store
        layer or h5py dataset by path, an array scattered once)."""
        from actkit.runners._dask_compare import task_source  # the Dask pieces of a task list, only with a scheduler

        if is_dask(X):
            raise ValidationError("compare_many with a scheduler takes store layers, h5py datasets or arrays, "
                                  "not dask arrays")
        return task_source(X, self.client)

    def tasks(self, tasks, *, desc="tasks", progress=None):
        """Run ``(fn, args)`` tasks (an arg ``("task", i)``: task i's output) as futures on the
        client, or in order here without one; their results, in order."""
        from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

        from actkit.runners._dask_compare import run_futures  # the Dask pieces of a task list, only with a scheduler

        with tqdm(total=len(tasks), desc=desc, unit="task", leave=False,
                  disable=None if progress is None else not progress) as bar:
            return run_in_order(tasks, bar) if self.client is None else run_futures(self.client, tasks, bar)

    def map_reduce(self, X, fn, merge, *, args=(), per_block=None, desc="pass", progress=None):
        """``merge``-reduce ``fn(chunk, first_row, *args, *per_block[i])`` over the chunks of X.

        Parameters
        ----------
        X : dask.array.Array of shape (n_rows, n_features), one column chunk
        fn : callable (chunk ndarray, int, ...) -> partial result
        merge : callable (a, b) -> merged result; must not modify its arguments
        args : tuple
            Shared arguments (arrays are put in the graph once, not once per task).
        per_block : list of tuples, optional
            Extra arguments for each chunk (e.g. the rows to collect from it).
        desc, progress : progress bar label; ``progress`` None = only on a terminal.

        Returns
        -------
        The merged result of all chunks (in row order, as a fixed binary tree).
        """
        import dask  # optional dependency (actkit[dask])

        X = check_chunks(X)
        blocks = X.to_delayed().ravel().tolist()
        if not blocks:
            raise ValueError("the dask array has no rows")
        starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int).tolist()
        shared = [dask.delayed(a, pure=True) if isinstance(a, np.ndarray) and a.size > 64 else a for a in args]
        prefix = f"actkit-{getattr(fn, '__name__', 'block')}-{dask.base.tokenize(X.name, fn, *args)}"
        parts = [dask.delayed(fn, pure=True)(b, s, *shared, *(per_block[i] if per_block else ()),
                                             dask_key_name=f"{prefix}-{i}")
                 for i, (b, s) in enumerate(zip(blocks, starts))]
        with _bar(len(parts), desc, progress) as bar:
            if self.client is not None:
                return self._distributed(parts, merge, bar)
            merged = _tree(parts, lambda a, b: dask.delayed(merge, pure=True)(a, b))
            with _TaskBar(bar, prefix), self._local_threads() as kw:
                (out,) = dask.compute(merged, scheduler=self.local, **kw)
            return out

    def run(self, X, p, *, desc=None, progress=None, blocks=None):
        """Run a :class:`~actkit.runners.RowPass` over the chunks of X: every chunk folds its
        blocks of ``p.rows`` rows on a worker, the chunks' results merge in a fixed tree
        (``blocks``, how this process would read X, is not used: the workers read it)."""
        X = check_chunks(X)
        if p.aligned:
            X = on_blocks(X, int(p.rows))
        return self.map_reduce(X, _fold_chunk, p.merge, args=(p.new, p.add, p.map, p.rows, *p.args),
                               desc=desc or p.name, progress=progress)

    def _distributed(self, parts, merge, bar):
        from distributed import as_completed  # optional dependency (actkit[dask])

        client = self.client
        futures = client.compute(parts)
        final = _tree(futures, lambda a, b: client.submit(merge, a, b))
        done = as_completed(futures, loop=client.loop)
        del futures  # a merged chunk's statistics are released as soon as they are merged
        for f in done:
            bar.update(1)
            if f.status == "error":
                break
            del f
        return final.result()

    def compute(self, collection):
        """Compute a dask collection on this runner's scheduler."""
        if self.client is not None:
            return self.client.compute(collection).result()
        with self._local_threads() as kw:
            return collection.compute(scheduler=self.local, **kw)

    @contextlib.contextmanager
    def _local_threads(self):
        """Dask's local thread pool at the thread budget, each task's BLAS at one thread (the
        pools never multiply); yields the compute keywords."""
        if self.local not in (None, "threads"):
            yield {}
            return
        with small_linalg():
            yield {"num_workers": current_threads()}


class _TaskBar:
    """A local-scheduler callback that ticks ``bar`` for every finished per-chunk task."""

    def __init__(self, bar, prefix):
        from dask.callbacks import Callback  # optional dependency (actkit[dask])

        outer = self

        class _CB(Callback):
            def _posttask(self, key, result, dsk, state, id):
                if isinstance(key, str) and key.startswith(outer.prefix):
                    outer.bar.update(1)

        self.bar, self.prefix = bar, prefix
        self._cb = _CB()

    def __enter__(self):
        self._cb.__enter__()
        return self

    def __exit__(self, *exc):
        self._cb.__exit__(*exc)


def on_blocks(X, rows):
    """X rechunked so that every chunk boundary is a multiple of ``rows`` (unchanged when it
    already is): the chunks then hold whole blocks of a pass with ``aligned`` blocks."""
    sizes = X.chunks[0]
    if all(c % rows == 0 for c in sizes[:-1]):
        return X
    target = max(rows, int(round(float(np.median(sizes)) / rows)) * rows)
    return X.rechunk({0: target})


def _fold_chunk(chunk, start, new, add, fn, rows, *args):
    """One chunk of a :class:`~actkit.runners.RowPass`, on a worker: its blocks folded in order."""
    chunk = np.asarray(chunk)
    rows = max(1, int(rows or chunk.shape[0] or 1))
    acc = new(*args)
    with small_linalg() if fn is not None else contextlib.nullcontext():
        for s in range(0, chunk.shape[0], rows):
            block = chunk[s : s + rows]
            acc = add(acc, block if fn is None else fn(block, start + s, *args), start + s, *args)
    return acc


def _transform_kernel(block, estimator, dtype):
    return np.asarray(estimator.transform(np.asarray(block)), dtype=dtype)


def lazy_transform(estimator, X, n_out):
    """Lazy ``estimator.transform`` of every chunk: a dask array (n_rows, n_out).

    float32 input gives float32 output, anything else float64 (as the estimators)."""
    if int(X.shape[1]) != estimator.n_features_in_:
        raise ValidationError(f"X has {X.shape[1]} features, but {type(estimator).__name__} was fitted on "
                              f"{estimator.n_features_in_}")
    dtype = np.dtype(np.float32) if X.dtype == np.float32 else np.dtype(np.float64)
    return X.map_blocks(_transform_kernel, portable(estimator), dtype, dtype=dtype,
                        chunks=(X.chunks[0], (int(n_out),)), meta=np.empty((0, 0), dtype=dtype))


def transform(estimator, X, n_out, scheduler=None, block_rows=None):
    """``estimator.transform`` over Dask: a lazy dask array for a dask ``X``; for a store
    layer (with a scheduler) the rows computed on that scheduler, as an ndarray."""
    if is_dask(X):
        return lazy_transform(estimator, check_chunks(X), n_out)
    with use_scheduler(scheduler) as runner:
        return runner.compute(lazy_transform(estimator, to_dask(X, block_rows), n_out))
