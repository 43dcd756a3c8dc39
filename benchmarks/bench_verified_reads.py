"""What checking every read against the store's block checksums costs, side by side.

Every command that reads a store checks the checksummed blocks it reads (issue 30), unless
``--no-verify``. This times the same work with and without the check, interleaved over
``--repeats`` rounds (median seconds, ratio checked / unchecked), on stores read from the
page cache (the worst case for the check: no disk time to hide behind):

* ``read``: every row of one layer in blocks (``layer.iter_blocks()``);
* ``whiten``: ``actkit whiten STORE --out W.h5`` (fit: one moments pass; transform: one pass);
* ``compare``: ``actkit compare A.h5 B.h5 --methods linear,rigid`` (held-out alignments, CKA, CCA).

Wall and CPU seconds (``time.process_time``: this process, all its threads; steadier than wall
time on a loaded machine) are both printed. The two variants alternate in ABBA order round by round (checked first in even rounds), so a
burst of load from other processes does not fall on one side only.

Run (numbers in docs/performance.md)::

    python benchmarks/bench_verified_reads.py                 # 2 stores of 128 MiB, 3 rounds
    python benchmarks/bench_verified_reads.py --mib 32 --repeats 2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def make_store(path, X):
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec("layer", X.shape[0], X.shape[1])], n_samples=X.shape[0],
                     request={"bench": str(path)})
    step = 4096
    for a in range(0, len(X), step):
        w.append("layer", X[a:a + step])
    w.checkpoint(len(X), force=True)
    return w.finalize()


def run_cli(*argv):
    from actkit.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main([str(a) for a in argv])
    if code != 0:
        raise SystemExit(f"actkit {' '.join(map(str, argv))} failed: {err.getvalue()}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="size of each store (float32)")
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="folder of the stores (default: a temporary one)")
    args = parser.parse_args(argv)

    from actkit.store import open_store

    rows = args.mib * 2**20 // (4 * args.features)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        tmp = Path(tmp)
        S = rng.laplace(size=(rows, args.features)).astype(np.float32)
        a = make_store(tmp / "a.h5", S)
        b = make_store(tmp / "b.h5", (S @ rng.normal(size=(args.features, args.features)).astype(np.float32)))
        del S

        def read(verify):
            with open_store(a, verify_reads=verify) as s:
                for _ in s["layer"].iter_blocks():
                    pass

        def whiten(verify):
            run_cli("whiten", a, "--out", tmp / "w.h5", "--overwrite", "--quiet", *([] if verify else ["--no-verify"]))

        def compare(verify):
            run_cli("compare", a, b, "--methods", "linear,rigid", "--quiet", *([] if verify else ["--no-verify"]))

        cases = {"read": read, "whiten": whiten, "compare": compare}
        times = {(name, v): [] for name in cases for v in (True, False)}
        cpu = {(name, v): [] for name in cases for v in (True, False)}
        for name, fn in cases.items():
            fn(True)  # warm the page cache and the imports
        for r in range(args.repeats):
            for name, fn in cases.items():
                for verify in ((True, False) if r % 2 == 0 else (False, True)):  # ABBA: no position bias
                    t0, c0 = time.perf_counter(), time.process_time()
                    fn(verify)
                    times[(name, verify)].append(time.perf_counter() - t0)
                    cpu[(name, verify)].append(time.process_time() - c0)
    print(f"2 stores of {rows} x {args.features} float32 ({args.mib} MiB each), {args.repeats} rounds, "
          f"load {os.getloadavg()[0]:.2f}, cpus {os.cpu_count()}")
    print("median wall s and CPU s (this process, all its threads) per variant")
    print(f"{'work':<8} {'checked':>8} {'--no-verify':>12} {'ratio':>6}   {'CPU checked':>11} {'CPU no-verify':>13} "
          f"{'ratio':>6}")
    for name in cases:
        on, off = statistics.median(times[(name, True)]), statistics.median(times[(name, False)])
        con, coff = statistics.median(cpu[(name, True)]), statistics.median(cpu[(name, False)])
        print(f"{name:<8} {on:>8.3f} {off:>12.3f} {on / off:>6.2f}   {con:>11.3f} {coff:>13.3f} {con / coff:>6.2f}")


if __name__ == "__main__":
    main()
