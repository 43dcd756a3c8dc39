"""The thread policy (actkit/_threads.py): how the budget is decided, that it is applied to
every pool, and that results do not depend on it (bitwise at 1 and 2 threads)."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from actkit import _threads
from actkit._threads import (
    QUIET_ENV,
    available_cpus,
    current_threads,
    resolve_threads,
    use_threads,
    worker_env,
)
from actkit.errors import ValidationError

LAYERS = "gpt_neox.layers.0,gpt_neox.layers.1"
CLOSED_FORM = ("permutation", "rigid", "linear", "linear_cka", "linear_cka_debiased", "mean_cca", "diameter",
               "d_kl", "d_llv", "d_svd_f", "d_svd_g")


# ----------------------------------------------------------------------------- the budget
def test_explicit_threads_win_then_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve_threads(5) == 5
    assert resolve_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "2,1")  # nested OpenMP syntax: the outer level
    assert resolve_threads() == 2
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValidationError, match="threads must be a positive integer"):
            resolve_threads(bad)


def test_default_is_the_usable_cpus_less_busy_ones_shared_by_ranks(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(_threads, "_DEFAULT", [])
    monkeypatch.setattr(_threads, "available_cpus", lambda: 8)
    monkeypatch.setattr(_threads, "busy_cpus", lambda cpus: 0)
    assert resolve_threads() == 8
    _threads._DEFAULT.clear()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: ranks on this host divide the CPUs
    assert resolve_threads() == 4
    _threads._DEFAULT.clear()
    monkeypatch.setattr(_threads, "busy_cpus", lambda cpus: 7)  # other jobs keep 7 CPUs busy
    assert resolve_threads() == 1


def test_cgroup_quota_caps_the_cpus(tmp_path, monkeypatch):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert _threads._cgroup_cpus(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert _threads._cgroup_cpus(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")  # cgroup v1: half a CPU
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert _threads._cgroup_cpus(v1) == 0.5
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert _threads._cgroup_cpus(v1) is None
    monkeypatch.setattr(_threads, "_cgroup_cpus", lambda: 1.5)
    assert available_cpus() == 1
    monkeypatch.setattr(_threads, "_cgroup_cpus", lambda: 0.5)
    assert available_cpus() == 1  # never zero


def test_use_threads_sets_every_pool_and_restores_them():
    import torch
    from threadpoolctl import threadpool_info

    before = torch.get_num_threads()
    with use_threads(2) as n:
        assert n == 2 and current_threads() == 2 and torch.get_num_threads() == 2
        with use_threads():  # an inner call without threads= keeps the outer budget
            assert current_threads() == 2
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {2}
        with _threads.torch_region():  # no BLAS pool awake while torch computes
            assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {1}
    assert torch.get_num_threads() == before


def test_dask_workers_share_the_budget_and_sleep_when_idle():
    env = worker_env(3, threads=6)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and worker_env(4, threads=2)["OMP_NUM_THREADS"] == "1"


def test_quiet_waiting_keeps_the_users_values():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    _threads.quiet_waiting(env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE" and env["OPENBLAS_THREAD_TIMEOUT"] == QUIET_ENV["OPENBLAS_THREAD_TIMEOUT"]


def test_threads_flag_refuses_nonsense(capsys):
    from actkit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["compare", "a.h5", "b.h5", "--threads", "0"])
    assert exc.value.code == 2 and "--threads: expected a positive integer" in capsys.readouterr().err


# ----------------------------------------------------------------------------- real processes
# PROBE prints the budget and the pools' sizes inside use_threads() (or inside an actkit CLI
# command); the other jobs' load is taken out (busy_cpus = 0) so the check does not depend on
# what else runs on the machine.
PROBE = """
import json, os, sys

LOADED = {}  # the idle-thread settings when numpy and torch were first imported


class Spy:
    def find_spec(self, name, path=None, target=None):
        if name in ("numpy", "torch") and name not in LOADED:
            LOADED[name] = [os.environ.get(k) for k in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")]


sys.meta_path.insert(0, Spy())
import actkit._threads as t
t.busy_cpus = lambda cpus: 0
if os.environ.get("PROBE_CPUS"):  # a bigger machine than this one
    t.available_cpus = lambda: int(os.environ["PROBE_CPUS"])
mode = sys.argv[1]

def pools():
    import torch
    from threadpoolctl import threadpool_info
    info = threadpool_info()
    return {"budget": t.current_threads(), "torch": torch.get_num_threads(),
            "blas": sorted({i["num_threads"] for i in info if i["user_api"] == "blas"}),
            "openmp": sorted({i["num_threads"] for i in info if i["user_api"] == "openmp"}),
            "loaded": LOADED, "cpus": t.available_cpus()}

if mode == "api":
    import numpy, torch  # the libraries loaded first, as in a user's script
    with t.use_threads():
        print(json.dumps(pools()))
else:  # the CLI: 'actkit verify' replaced by a probe; torch is loaded only inside the command
    import actkit._commands.verify as verify
    from actkit.cli import main
    assert "torch" not in sys.modules and "numpy" not in sys.modules
    verify.run = lambda args: print(json.dumps(pools())) or 0
    sys.exit(main(["verify", "x.h5", *sys.argv[2:]]))
"""


def _probe(*args, env=None, prefix=()):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LOCAL_WORLD_SIZE", "OPENBLAS_NUM_THREADS",
                            "MKL_NUM_THREADS")}
    environ.update(env or {})
    out = subprocess.run([*prefix, sys.executable, "-c", PROBE, *args], env=environ, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _all_pools(p, n):
    return p["budget"] == p["torch"] == n and set(p["blas"]) <= {n} and set(p["openmp"]) <= {n}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to see the affinity mask cut them")
def test_a_process_pinned_to_one_cpu_uses_one_thread_in_every_pool():
    (free,) = _probe("api")
    assert free["cpus"] == len(os.sched_getaffinity(0)) and _all_pools(free, free["cpus"])
    (pinned,) = _probe("api", prefix=("taskset", "-c", "0"))  # what a batch scheduler does
    assert pinned["cpus"] == 1 and _all_pools(pinned, 1), pinned


def test_omp_num_threads_sets_every_pool_in_a_real_process():
    (p,) = _probe("api", env={"OMP_NUM_THREADS": "1"})
    assert _all_pools(p, 1), p
    (p,) = _probe("api", env={"OMP_NUM_THREADS": "3"})
    assert _all_pools(p, 3), p


def test_the_threads_flag_sets_every_pool_and_idle_threads_sleep():
    for n in (1, 2):
        (p,) = _probe("cli", "--threads", str(n))
        assert _all_pools(p, n), p
        # the CLI set the idle-thread settings before numpy's OpenBLAS and torch's OpenMP loaded
        assert p["loaded"] == {"numpy": ["PASSIVE", "4"], "torch": ["PASSIVE", "4"]}, p
    (p,) = _probe("cli", "--threads", "2", env={"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"})
    assert _all_pools(p, 2) and p["loaded"]["torch"] == ["ACTIVE", "4"], p  # --threads wins; user's policy kept


@pytest.mark.slow
def test_torchrun_ranks_divide_the_cpus(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    for cpus in ("", "8"):  # this machine, and a (pretended) 8-CPU one
        environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE")}
        environ["PROBE_CPUS"] = cpus
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                              str(script), "api"], env=environ, capture_output=True, text=True, timeout=300,
                             check=False)
        assert out.returncode == 0, out.stderr
        ranks = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        assert len(ranks) == 2
        for p in ranks:  # two ranks on this host: at most half the CPUs each, in every pool
            assert p["budget"] <= max(1, p["cpus"] // 2) and _all_pools(p, p["budget"]), p


def test_actkit_workers_run_blas_at_one_thread_within_the_budget():
    import threading

    from threadpoolctl import threadpool_info

    seen = []

    def part(a, b):
        seen.append((threading.get_ident(), {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))
        return [np.arange(a, b, dtype=np.float64).sum()]

    for n in (1, 2):
        seen.clear()
        with use_threads(n):
            (total,) = _threads.fixed_order_sum(part, 50_000, chunk=1000)
        assert total == np.arange(50_000, dtype=np.float64).sum()
        assert len({ident for ident, _ in seen}) <= n  # never more workers than the budget
        assert all(blas <= {1} for _, blas in seen)  # and each of them at one BLAS thread


def test_the_prefetch_thread_runs_only_when_the_budget_has_room(tmp_path):
    import threading

    from actkit._data import iter_blocks
    from actkit.store import LayerSpec, create_store, open_store

    X = np.arange(4000 * 8, dtype=np.float32).reshape(4000, 8)
    w = create_store(tmp_path / "s.h5", [LayerSpec("l", 4000, 8)], n_samples=4000, request={"t": 1})
    w.append("l", X)
    w.checkpoint(4000, force=True)
    w.finalize()
    with open_store(tmp_path / "s.h5") as st:
        for n, extra in ((1, 0), (2, 1)):
            base = threading.active_count()
            with use_threads(n):
                counts = [threading.active_count() - base for _ in iter_blocks(st["l"], block_rows=500)]
            assert max(counts) == extra, (n, counts)


def test_dask_local_workers_get_their_share_of_the_budget():
    import distributed
    from actkit.runners._dask import use_scheduler

    with use_threads(2), use_scheduler("local:2") as runner:
        envs = runner.client.run(lambda: {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")})
    assert len(envs) == 2
    assert all(e == {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"} for e in envs.values()), envs


# ----------------------------------------------------------------------------- bitwise at 1 and 2
@pytest.fixture(scope="module")
def wide_models(tmp_path_factory):
    """Two GPT-NeoX checkpoints wide enough (256) that torch and BLAS really use two threads,
    and 24 texts: the builder of ``benchmarks/bench_threads.py``."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_threads", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_threads.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path_factory.mktemp("wide")
    bench.make_models(root, texts=24, hidden=256)
    return root


def _run(argv, omp=None):
    env = dict(os.environ, HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH="1700000000")
    env.pop("OMP_NUM_THREADS", None)
    if omp is not None:
        env["OMP_NUM_THREADS"] = str(omp)
    out = subprocess.run([sys.executable, "-m", "actkit", *map(str, argv)], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _extract(root, model, out, omp=None, extra=()):
    _run(["extract", root / model, "--inputs", root / "texts.txt", "--layers", LAYERS, "--out", out,
          "--final-hidden", "--unembedding", "--batch-size", "8", "--no-progress", *extra], omp)


def _rows(path):
    with h5py.File(path, "r") as f:
        return {k: f[f"layers/{k}/data"][()] for k in [*LAYERS.split(","), "final_hidden"]}


@pytest.mark.slow
def test_extraction_rows_and_closed_form_results_are_bitwise_at_1_and_2_threads(wide_models, tmp_path):
    root = wide_models
    _extract(root, "m0", tmp_path / "a1.h5", omp=1)
    _extract(root, "m0", tmp_path / "a2.h5", omp=2)
    _extract(root, "m0", tmp_path / "af.h5", extra=["--threads", "2"])
    _extract(root, "m1", tmp_path / "b1.h5", omp=1)
    one = _rows(tmp_path / "a1.h5")
    assert one["gpt_neox.layers.0"].shape[0] > 500
    for other in ("a2.h5", "af.h5"):
        for name, rows in _rows(tmp_path / other).items():
            assert np.array_equal(rows, one[name]), (other, name)
        # the whole file too: rows, checksums, unembedding, metadata (the thread count is not in it)
        assert (tmp_path / other).read_bytes() == (tmp_path / "a1.h5").read_bytes(), other
    results, printed = {}, {}
    with h5py.File(tmp_path / "a1.h5", "r") as f:  # the softmax distances (d_KL, d_LLV, d_SVD) too, over
        labels = ",".join(map(str, range(f["params/unembedding"].shape[0])))  # every token (>= width + 2)
    for label, omp, extra in (("1", 1, []), ("2", 2, []), ("flag", None, ["--threads", "2"])):
        printed[label] = _run(["compare", tmp_path / "a1.h5", tmp_path / "b1.h5", "--methods",
                               "permutation,rigid,linear", "--softmax-labels", labels,
                               "--json", tmp_path / f"c{label}.json", "--quiet", *extra], omp)
        results[label] = json.loads((tmp_path / f"c{label}.json").read_text())
    flat = {k: _closed_form(v) for k, v in results.items()}
    assert flat["1"] and all(np.isfinite(x) for x in flat["1"].values())
    assert flat["2"] == flat["1"] and flat["flag"] == flat["1"]
    # everything else in the results, bit for bit (seconds_* are timings), and what compare prints
    untimed = {k: _untimed(v) for k, v in results.items()}
    assert untimed["2"] == untimed["1"] and untimed["flag"] == untimed["1"]
    assert printed["1"].strip() and printed["2"] == printed["1"] and printed["flag"] == printed["1"]


def _untimed(obj):
    """A compare JSON without its timings (keys ``seconds_*``)."""
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items() if not k.startswith("seconds")}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj


def _closed_form(obj, prefix=""):
    """Every closed-form value (the CLOSED_FORM keys) in a compare JSON, by path."""
    found = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in CLOSED_FORM and isinstance(v, float):
                found[prefix + k] = v
            else:
                found.update(_closed_form(v, f"{prefix}{k}/"))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found.update(_closed_form(v, f"{prefix}{i}/"))
    return found
