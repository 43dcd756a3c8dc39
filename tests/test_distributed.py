"""``torchrun --nproc-per-node 2 -m actkit extract``: real processes, gloo, loopback.

The sharded store is an ordinary store to every reader, equals a single-process extraction
to 1e-5, resumes bitwise after a rank is killed, and refuses ranks started differently.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import actkit
from actkit.errors import StoreError
from actkit.store import open_store, progress_path
from cli_helpers import cli_error, run_cli, wait_at_gate

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
EPOCH = "1700000000"
LAYERS = "gpt_neox.layers.0,gpt_neox.layers.2"


def _env():
    return dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
                MASTER_ADDR="127.0.0.1", PYTHONPATH=str(REPO))


def _torchrun(*args, nproc=2):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *map(str, args)]


def _shard(out, rank, world=2) -> Path:
    """``OUT.shards/rank-R-of-K.<request hash>.h5``: the one shard of that rank."""
    (path,) = Path(str(out) + ".shards").glob(f"rank-{rank}-of-{world}.*.h5")
    return path


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("actkit: error:")]


def _extract_cmd(model, inputs, out, *extra):
    return _torchrun("-m", "actkit", "extract", model, "--inputs", inputs, "--layers", LAYERS, "--out", out,
                     "--batch-size", "2", "--final-hidden", "--no-progress", *extra)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    words = "the quick brown fox jumps over a lazy dog while features hold".split()
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) for i in range(101)]
    path = tmp_path_factory.mktemp("dist") / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def sharded(tiny_gpt_neox, texts, tmp_path_factory):
    """An uninterrupted 2-rank run (and the time it took)."""
    out = tmp_path_factory.mktemp("run") / "run.h5"
    proc = subprocess.run(_extract_cmd(tiny_gpt_neox, texts, out), cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)  # only rank 0 prints
    return out


def test_sharded_store_is_an_ordinary_store_equal_to_one_process(sharded, tiny_gpt_neox, texts, tmp_path):
    shards = [_shard(sharded, r) for r in range(2)]
    assert all(p.is_file() for p in shards)
    single = tmp_path / "single.h5"
    actkit.extract(str(tiny_gpt_neox), texts, single, layers=LAYERS, batch_size=3, final_hidden=True,
                   progress=False)
    with open_store(sharded) as a, open_store(single) as b:
        assert a.complete and a.layers == b.layers == ["gpt_neox.layers.0", "gpt_neox.layers.2", "final_hidden"]
        assert a.n_samples == b.n_samples == 101
        assert a.inputs_fingerprint == b.inputs_fingerprint
        for name in a.layers:
            la, lb = a[name], b[name]
            assert la.shape == lb.shape and la.dtype == lb.dtype
            np.testing.assert_array_equal(la.index, lb.index)
            np.testing.assert_allclose(np.asarray(la), np.asarray(lb), atol=1e-5, rtol=0)
            assert la.attrs == lb.attrs
        pa, pb = a.provenance, b.provenance
        assert pa["shards"] == [f"run.h5.shards/{_shard(sharded, r).name}" for r in range(2)]
        assert pa["world_size"] == 2
        different = {k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k)}
        assert different == {"shards", "world_size", "batch_size"}
        # the inputs are recorded once, in the index store rank 0 writes (not in every shard)
        assert a.inputs.n_samples == 101 and a.inputs.tokenizer == b.inputs.tokenizer
        assert all(a.inputs.token_ids(i).tolist() == b.inputs.token_ids(i).tolist() for i in range(101))
        assert a.inputs.vocab == b.inputs.vocab
        a.verify()
    # each shard holds a contiguous block of samples, global sample ids in its index
    with open_store(shards[0]) as s0, open_store(shards[1]) as s1:
        assert s0.n_samples == 50 and s1.n_samples == 51
        assert s0["final_hidden"].groups.max() == 49 and s1["final_hidden"].groups.min() == 50
        assert s1.request["request"]["samples"] == [50, 101]


def test_plain_h5py_from_another_folder_sees_virtual_datasets(sharded, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the shard paths are relative to the store's folder, not the cwd
    with h5py.File(sharded, "r") as f:
        data = f["layers/final_hidden/data"]
        assert data.is_virtual and data.shape[1] == 32
        assert np.isfinite(data[:]).all()
        idx = f["layers/final_hidden/index"][:]
        assert (idx[:, 0] == np.repeat(np.arange(101), np.bincount(idx[:, 0]))).all()


def test_analysis_and_compare_read_the_sharded_store(sharded, tmp_path, capsys):
    out = tmp_path / "w.h5"
    code, _, err = run_cli(capsys, "whiten", sharded, "--layer", "final_hidden", "--out", out, "--quiet")
    assert code == 0, err
    assert actkit.open_store(out)["final_hidden"].shape[0] == actkit.open_store(sharded)["final_hidden"].shape[0]
    code, stdout, err = run_cli(capsys, "compare", sharded, sharded, "--layers", "final_hidden",
                                "--methods", "rigid", "--quiet")
    assert code == 0, err
    assert "final_hidden" in stdout


def test_consolidate_copies_into_one_file_and_missing_shard_is_refused(sharded, tmp_path, capsys):
    single = tmp_path / "single.h5"
    code, _, err = run_cli(capsys, "consolidate", sharded, "--out", single)
    assert code == 0, err
    with h5py.File(single, "r") as f:
        assert not f["layers/final_hidden/data"].is_virtual and "shards" not in f.attrs
    with open_store(sharded) as a, open_store(single) as b:
        assert a.attrs["request_hash"] == b.attrs["request_hash"]
        for name in a.layers:
            np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]))
            np.testing.assert_array_equal(a[name].index, b[name].index)
        assert b.provenance["consolidated_from"] == str(sharded)
        assert b.inputs.token_ids(100).tolist() == a.inputs.token_ids(100).tolist()  # the copy keeps them
    # the same command again finds its finished copy: nothing to do, not a byte changed (a kill
    # between the rename and the exit reruns to exit 0, issue 48); a copy of another store there
    # is refused
    before = single.read_bytes()
    code, out, err = run_cli(capsys, "consolidate", sharded, "--out", single)
    assert (code, out.strip(), err) == (0, str(single), "")
    assert single.read_bytes() == before
    np.save(tmp_path / "other.npy", np.ones((4, 3), np.float32))
    assert run_cli(capsys, "import", tmp_path / "other.npy", "--out", tmp_path / "other.h5", "--quiet")[0] == 0
    assert "already exists" in cli_error(capsys, "consolidate", sharded, "--out", tmp_path / "other.h5")

    # a copy of run.h5 without its shards must not read as zeros / NaN
    lonely = tmp_path / "alone" / "run.h5"
    lonely.parent.mkdir()
    lonely.write_bytes(sharded.read_bytes())
    with pytest.raises(StoreError, match="shard .* is missing"):
        open_store(lonely)
    assert "is missing" in cli_error(capsys, "info", lonely)


def _rank_pids(parent: int) -> dict:
    """rank -> pid of the worker processes torchrun started (children of its agent)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid != parent:
            continue
        for item in env:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(entry.name)
    return found


def test_kill_one_rank_then_rerun_is_bitwise_identical(sharded, tiny_gpt_neox, texts, tmp_path):
    out = tmp_path / "run.h5"
    cmd = _extract_cmd(tiny_gpt_neox, texts, out, "--checkpoint-every", "0")
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cursor = progress_path(out.with_name("run.h5.shards") / _shard(sharded, 1).name)
    killed = False
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = json.loads(cursor.read_text())["samples_done"]
            except (OSError, ValueError, KeyError):
                done = 0
            if done >= 4:
                pid = _rank_pids(proc.pid).get(1)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
            time.sleep(0.003)
    finally:
        proc.wait(timeout=120)
    assert killed, "rank 1 finished before it could be killed"
    assert proc.returncode != 0 and not out.exists()
    state = json.loads(cursor.read_text())
    assert 4 <= state["samples_done"] < 51  # rank 1's shard stopped part-way
    shard0 = out.with_name("run.h5.shards") / _shard(sharded, 0).name
    rank0 = 50 if shard0.exists() else json.loads(progress_path(shard0).read_text())["samples_done"]
    # issue 20: `info` says how far the sharded run got, not "does not exist"
    info = subprocess.run([sys.executable, "-m", "actkit", "info", out], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert f"is being written by a sharded run of 2 ranks ({rank0 + state['samples_done']}/101 samples" \
        in info.stderr, info.stderr

    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed {out} from {rank0 + state['samples_done']}/101 samples; it is complete now" in proc.stderr
    assert out.read_bytes() == sharded.read_bytes()
    for r in range(2):
        assert _shard(out, r).read_bytes() == _shard(sharded, r).read_bytes()


def test_ranks_started_with_different_commands_are_refused(tiny_gpt_neox, texts, tmp_path):
    out = tmp_path / "run.h5"
    script = tmp_path / "launch.py"
    script.write_text(
        "import os, sys\n"
        "from actkit.cli import main\n"
        f"args = ['extract', {str(tiny_gpt_neox)!r}, '--inputs', {str(texts)!r}, '--out', {str(out)!r},\n"
        "        '--no-progress', '--layers', 'gpt_neox.layers.0' if os.environ['RANK'] == '0' else 'gpt_neox.layers.1']\n"
        "sys.exit(main(args))\n"
    )
    proc = subprocess.run(_torchrun(script), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("actkit: error:")]
    assert errors and all("different command" in line for line in errors), proc.stderr[-3000:]
    assert "layers" in errors[0]
    assert not out.exists() and not out.with_name("run.h5.shards").exists()  # nothing written


def test_device_map_auto_on_cpu_equals_device_cpu(tiny_gpt_neox, texts, tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    actkit.extract(str(tiny_gpt_neox), texts, a, layers=LAYERS, max_samples=9, progress=False)
    actkit.extract(str(tiny_gpt_neox), texts, b, layers=LAYERS, max_samples=9, device_map="auto", progress=False)
    with open_store(a) as sa, open_store(b) as sb:
        for name in sa.layers:
            np.testing.assert_allclose(np.asarray(sa[name]), np.asarray(sb[name]), atol=1e-6)
        # on a CPU-only machine accelerate leaves everything on the CPU
        assert sb.provenance["device_map"] == "auto" and sb.provenance["hf_device_map"] == {"": "cpu"}


def test_token_windows_from_parquet_over_two_ranks(tiny_gpt_neox, texts, tmp_path):
    import datasets

    parquet = tmp_path / "d.parquet"
    datasets.Dataset.from_dict({"text": texts.read_text().splitlines()}).to_parquet(str(parquet))
    out, single = tmp_path / "run.h5", tmp_path / "single.h5"
    cmd = _torchrun("-m", "actkit", "extract", tiny_gpt_neox, "--inputs", parquet, "--layers", "gpt_neox.layers.1",
                    "--context-length", "16", "--max-tokens", "600", "--batch-size", "4", "--out", out,
                    "--no-progress")
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    actkit.extract(str(tiny_gpt_neox), parquet, single, layers="gpt_neox.layers.1", context_length=16,
                   max_tokens=600, batch_size=5, progress=False)
    with open_store(out) as a, open_store(single) as b:
        assert a.n_samples == b.n_samples == 37  # 600 // 16 windows, split 18 + 19
        la, lb = a["gpt_neox.layers.1"], b["gpt_neox.layers.1"]
        np.testing.assert_array_equal(la.index, lb.index)
        np.testing.assert_allclose(np.asarray(la), np.asarray(lb), atol=1e-5, rtol=0)
        assert a.provenance["packing"] == b.provenance["packing"]
        assert a.inputs_fingerprint == b.inputs_fingerprint


# ----------------------------------------------------------------------------- issue 20
def _copy_run(src: Path, folder: Path) -> Path:
    import shutil

    folder.mkdir()
    shutil.copy2(src, folder / "run.h5")
    shutil.copytree(Path(str(src) + ".shards"), folder / "run.h5.shards")
    return folder / "run.h5"


def test_consolidate_of_a_flipped_shard_byte_is_refused(sharded, tmp_path, capsys):
    """Issue 20 #1, as reported: verify failed but consolidate exited 0 with fresh checksums."""
    run = _copy_run(sharded, tmp_path / "c")
    shard = _shard(run, 1)
    with h5py.File(shard, "r") as f:
        offset = f["layers/final_hidden/data"].id.get_offset() + 4 * 7 + 2
    raw = bytearray(shard.read_bytes())
    raw[offset] ^= 0x10
    shard.write_bytes(bytes(raw))
    verify = cli_error(capsys, "verify", run)
    assert "does not match its checksum" in verify
    assert cli_error(capsys, "consolidate", run, "--out", tmp_path / "cons.h5") == verify
    assert not (tmp_path / "cons.h5").exists() and not (tmp_path / "cons.h5.partial").exists()


@pytest.mark.slow
def test_rerun_recomputes_exactly_the_missing_or_truncated_shards(sharded, tiny_gpt_neox, texts, tmp_path):
    run = _copy_run(sharded, tmp_path / "r")
    cmd = _extract_cmd(tiny_gpt_neox, texts, run)
    kept = _shard(run, 0).stat().st_mtime_ns
    _shard(run, 1).unlink()
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (f"repaired {run} (101 samples): recomputed {_shard(sharded, 1).name} (samples 50-101); it is complete "
            "now") in proc.stderr
    assert _shard(run, 0).stat().st_mtime_ns == kept  # the intact shard was not rewritten
    for r in range(2):
        assert _shard(run, r).read_bytes() == _shard(sharded, r).read_bytes()
    assert run.read_bytes() == sharded.read_bytes()

    # a truncated shard: "not a finished store; rerun the extraction", and the rerun repairs it
    shard0 = _shard(run, 0)
    shard0.write_bytes(shard0.read_bytes()[:4096])
    with pytest.raises(StoreError, match="not a finished store; rerun the extraction"):
        open_store(run)
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"recomputed {shard0.name} (samples 0-50)" in proc.stderr
    assert shard0.read_bytes() == _shard(sharded, 0).read_bytes()

    # a no-op rerun: said once, no warnings repeated by the ranks
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"{run} is already complete for this request (101 samples); "
                                                "nothing to do"]
    assert sorted(p.name for p in run.parent.iterdir()) == ["run.h5", "run.h5.shards"]


def test_world_size_change_names_what_differs(sharded, tiny_gpt_neox, texts, tmp_path, capsys):
    run = _copy_run(sharded, tmp_path / "w")
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", texts, "--layers", LAYERS, "--out", run,
                     "--batch-size", "2", "--final-hidden", "--no-progress")
    assert "world size (torchrun --nproc-per-node): none here, 2 in the store" in line, line


@pytest.mark.slow
def test_second_torchrun_writer_is_refused_and_overwrite_removes_old_shards(tiny_gpt_neox, texts, tmp_path):
    out = tmp_path / "run" / "run.h5"
    out.parent.mkdir()
    gate = tmp_path / "gate"
    first = subprocess.Popen(_extract_cmd(tiny_gpt_neox, texts, out, "--checkpoint-every", "0", "--max-samples", "40"),
                             cwd=REPO, env=dict(_env(), ACTKIT_FAULT="wait:cursor:2", ACTKIT_FAULT_RELEASE=str(gate)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_at_gate(first, gate)
        second = subprocess.run(_extract_cmd(tiny_gpt_neox, texts, out, "--max-samples", "40", "--overwrite"),
                                cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    finally:
        gate.touch()
        _, err = first.communicate(timeout=600)
    assert second.returncode != 0
    errors = _errors(second.stderr)
    assert errors and all("is being written by another command right now" in e for e in errors), second.stderr[-3000:]
    frames = [line for line in second.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert not [f for f in frames if "actkit" in f or "extractors" in f], second.stderr[-3000:]  # torchrun's own only
    assert first.returncode == 0, err[-3000:]
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.h5", "run.h5.shards"]
    old = sorted(p.name for p in (out.parent / "run.h5.shards").iterdir())
    assert len(old) == 2
    with open_store(out, verify=True) as s:
        assert s.n_samples == 40

    # --overwrite with another request: only the new run's shards remain
    proc = subprocess.run(_torchrun("-m", "actkit", "extract", tiny_gpt_neox, "--inputs", texts, "--layers",
                                    "gpt_neox.layers.1", "--max-samples", "10", "--out", out, "--overwrite",
                                    "--no-progress"), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    new = sorted(p.name for p in (out.parent / "run.h5.shards").iterdir())
    assert len(new) == 2 and not set(new) & set(old)
    # and a single-process store over the sharded one: the shard folder goes
    actkit.extract(str(tiny_gpt_neox), texts, out, layers="gpt_neox.layers.1", max_samples=10, overwrite=True,
                   progress=False)
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.h5"]


@pytest.mark.slow
def test_outcome_lines_warnings_once_and_refusals_name_the_field(tiny_gpt_neox, texts, tmp_path):
    """Issue 20 #6 on real torchrun runs: the truncation warning is said once (rank 0) on a run
    that computes, never on a no-op rerun; the outcome lines are the single-process ones; a
    rerun with another request (layers, or world size) is refused naming what differs."""
    long_texts = tmp_path / "long.txt"
    long_texts.write_text(texts.read_text() + " ".join(["the quick brown fox"] * 80) + "\n")  # > 128 positions
    out = tmp_path / "o" / "run.h5"
    out.parent.mkdir()
    cmd = _extract_cmd(tiny_gpt_neox, long_texts, out, "--max-samples", "12")

    def run(argv, nproc=2):
        if nproc != 2:
            argv = _torchrun(*argv[argv.index("-m", 3):], nproc=nproc)
        return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600, check=False)

    first = run(_extract_cmd(tiny_gpt_neox, long_texts, out, "--max-samples", "102"))
    assert first.returncode == 0, first.stderr[-3000:]
    warned = [line for line in first.stderr.splitlines() if "were truncated to 128 tokens" in line]
    assert len(warned) == 1, first.stderr[-3000:]  # once, not once per rank
    assert f"wrote {out}: 102 samples" in first.stderr.splitlines()
    again = run(_extract_cmd(tiny_gpt_neox, long_texts, out, "--max-samples", "102"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.strip().splitlines() == [(f"{out} is already complete for this request (102 samples); "
                                                  "nothing to do")]
    for argv, nproc, field in ((cmd, 2, "number of samples: 12 here, 102 in the store"),
                               (_extract_cmd(tiny_gpt_neox, long_texts, out, "--max-samples", "102"), 3,
                                "world size (torchrun --nproc-per-node): 3 here, 2 in the store")):
        refused = run(argv, nproc)
        assert refused.returncode != 0
        errors = _errors(refused.stderr)
        assert errors and all(field in e for e in errors), refused.stderr[-3000:]
        frames = [line for line in refused.stderr.splitlines() if line.lstrip().startswith("File ")]
        assert not [f for f in frames if "actkit" in f or "extractors" in f], refused.stderr[-3000:]
    assert sorted(p.name for p in out.parent.iterdir()) == ["run.h5", "run.h5.shards"]
    assert len(list((out.parent / "run.h5.shards").iterdir())) == 2
