"""Extraction with 1 and with 2 ``torchrun`` processes on the same inputs, and the cost of the
virtual-dataset (VDS) index.

A Pythia-70M-shaped GPT-NeoX (random init from its config, ``bench_extract.build_pythia``) on
token windows packed from a local parquet dataset (``--context-length``, ``--max-tokens``), one
torch thread per process (``OMP_NUM_THREADS=1``), layer ``gpt_neox.layers.5``, pool none:

* ``1 process``   ``python -m actkit extract ... --out one.h5``
* ``2 processes`` ``python -m torch.distributed.run --standalone --nproc-per-node 2 -m actkit
                  extract ... --out run.h5`` (gloo, loopback)

Each command is timed whole (wall clock, and the CPU time of all its processes), and again on
its finished store: the identical command then returns after start-up, model loading and
window packing, so ``net`` = whole - rerun is the extraction itself (``net speed-up`` compares
those). On a loaded, shared machine wall-clock speed-ups measure the scheduler's share as much
as actkit (two processes get more of a busy machine than one), so the CPU efficiency (net CPU
of one process / net CPU of both ranks) is printed too: with a free core per rank the net
speed-up is twice that. The VDS index cost is the
time :func:`actkit.store.write_virtual_store` takes on the finished shards, and the time to
read the whole layer through ``run.h5`` against the consolidated single file.

Usage::

    python benchmarks/bench_distributed.py                  # L=128, N=16384
    python benchmarks/bench_distributed.py --max-tokens 32768 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_extract import build_pythia  # noqa: E402
from bench_token_windows import write_parquet  # noqa: E402


def _timed(cmd, env):
    """(wall s, CPU s of the command and every process it started)."""
    import resource

    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=1, help="runs of each command (best is kept)")
    args = p.parse_args(argv)
    import actkit
    from actkit.store import consolidate, write_virtual_store
    from actkit.stats import iter_row_blocks

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", MASTER_ADDR="127.0.0.1", SOURCE_DATE_EPOCH="1700000000",
               PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = work / "pythia70m-shaped"
        build_pythia(model)
        parquet = work / "corpus.parquet"
        write_parquet(parquet, n_texts=4 * args.max_tokens // 100 + 10, words_per_text=100)
        common = [str(model), "--inputs", str(parquet), "--layers", "gpt_neox.layers.5",
                  "--context-length", str(args.context_length), "--max-tokens", str(args.max_tokens),
                  "--batch-size", str(args.batch_size), "--no-progress"]
        one = work / "one.h5"
        run = work / "run.h5"
        cmd1 = [sys.executable, "-m", "actkit", "extract", *common, "--out", str(one)]
        cmd2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "actkit", "extract", *common, "--out", str(run)]
        best = {"1": [float("inf")] * 4, "2": [float("inf")] * 4}
        for _ in range(args.repeats):  # alternate, so load drift hits both alike
            for key, cmd, out in (("1", cmd1, one), ("2", cmd2, run)):
                for f in [out, *out.parent.glob(out.name + ".shards/*")]:
                    f.unlink(missing_ok=True)
                whole, whole_cpu = _timed(cmd, env)
                rerun, rerun_cpu = _timed(cmd, env)  # finished store: start-up + load + packing only
                best[key] = [min(a, b) for a, b in zip(best[key], (whole, rerun, whole_cpu, rerun_cpu))]
        (w1, r1, cw1, cr1), (w2, r2, cw2, cr2) = best["1"], best["2"]
        with actkit.open_store(one) as a, actkit.open_store(run) as b:
            la, lb = a["gpt_neox.layers.5"], b["gpt_neox.layers.5"]
            rows = la.shape[0]
            diff = float(np.abs(np.asarray(la) - np.asarray(lb)).max())
            prov, req = b.provenance, b.request["request"]
            n_samples, fingerprint = b.n_samples, b.inputs_fingerprint
        shards = [next(run.with_name("run.h5.shards").glob(f"rank-{r}-of-2.*.h5")) for r in range(2)]
        vds_times = []
        for _ in range(5):
            t0 = time.perf_counter()
            write_virtual_store(work / "again.h5", shards, request=req,
                                provenance={k: v for k, v in prov.items() if k not in ("shards", "world_size")},
                                n_samples=n_samples, inputs_fingerprint=fingerprint)
            vds_times.append(time.perf_counter() - t0)
        single = consolidate(run, work / "single.h5")
        reads = {}
        for name, path in (("virtual run.h5", run), ("consolidated", single)):
            t = []
            for _ in range(3):
                t0 = time.perf_counter()
                with actkit.open_store(path) as s:
                    for _block in iter_row_blocks(s["gpt_neox.layers.5"]):
                        pass
                t.append(time.perf_counter() - t0)
            reads[name] = min(t)
        mb = rows * 512 * 4 / 2**20
        print(f"Pythia-70M-shaped, {rows // args.context_length} windows x {args.context_length} tokens = {rows} "
              f"rows x 512 ({mb:.0f} MiB), 1 torch thread per process, best of {args.repeats}")
        print(f"max |1 process - 2 processes| = {diff:.2e}")
        print(f"{'':14s} {'whole s':>8s} {'rerun s':>8s} {'net s':>7s} {'tokens/s net':>13s} "
              f"{'CPU whole':>10s} {'CPU rerun':>10s} {'CPU net':>8s}")
        for key, (w, r, cw, cr) in (("1 process", best["1"]), ("2 processes", best["2"])):
            print(f"{key:14s} {w:8.2f} {r:8.2f} {w - r:7.2f} {rows / (w - r):13.0f} {cw:10.2f} {cr:10.2f} {cw - cr:8.2f}")
        print(f"speed-up (wall) whole {w1 / w2:.2f}x, net {(w1 - r1) / (w2 - r2):.2f}x")
        # on an idle machine with a core per process, wall = CPU per process: the net speed-up
        # is then 2 x (CPU of 1 process) / (CPU of both ranks together)
        print(f"CPU efficiency of 2 ranks (net CPU of 1 process / net CPU of both ranks): "
              f"{(cw1 - cr1) / (cw2 - cr2):.2f} -> speed-up with a free core per rank {2 * (cw1 - cr1) / (cw2 - cr2):.2f}x")
        print(f"VDS index (write_virtual_store, 2 shards): best {min(vds_times) * 1e3:.1f} ms, "
              f"median {np.median(vds_times) * 1e3:.1f} ms ({min(vds_times) / (w2 - r2) * 100:.2f} % of the net 2-process run)")
        print(f"full read of the layer ({mb:.0f} MiB): virtual {reads['virtual run.h5']:.3f} s, "
              f"consolidated {reads['consolidated']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
