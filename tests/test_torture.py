"""Attacks on the stores, kept as tests: kill -9 everywhere, full disks, flipped bytes, bad input.

Kills are deterministic: ``ACTKIT_FAULT=kill:POINT[:N]`` (see :mod:`actkit._faults`) makes the
process SIGKILL itself the N-th time it passes POINT, so every kill point is hit on any machine
at any load. All killed runs start at once (module fixture ``killed``), then each test resumes
its run in this process and compares the file with an uninterrupted run byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from actkit import _faults
from actkit.errors import StoreError
from actkit.store import LayerSpec, create_store, open_store, partial_path, progress_path
from cli_helpers import cli_error, run_cli

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
EPOCH = "1700000000"
LAYERS = "gpt_neox.layers.0,gpt_neox.layers.2"
SRC_LAYER = "gpt_neox.layers.2"

# (name, ACTKIT_FAULT, extra extract options, what is on disk after the kill)
EXTRACT_KILLS = [
    ("model-load", "kill:model-loaded", [], "nothing"),
    ("store-creation", "kill:store-created", [], "partial-no-cursor"),
    ("before-first-cursor", "kill:rows:2", [], "partial"),  # first batch, second layer
    ("first-cursor", "kill:cursor:1", [], "partial"),
    ("mid-batch", "kill:rows:11", [], "partial"),  # 4th batch, between two layers
    ("mid-run", "kill:cursor:4", [], "partial"),
    ("during-cursor-write", "kill:cursor-write:4", [], "partial"),
    ("after-last-cursor", "kill:cursor:7", [], "partial"),
    ("finalisation", "kill:finalize", [], "partial"),
    ("after-rename", "kill:renamed", [], "store-and-cursor"),
    ("compressed-finalisation", "kill:finalize", ["--compression", "gzip"], "partial"),
]
# (name, command, ACTKIT_FAULT)
ANALYSIS_KILLS = [
    ("ica-mid-transform", ["ica", "--fit-rows", "60", "--max-iter", "50"], "kill:derived-rows:2"),
    ("ica-finalisation", ["ica", "--fit-rows", "60", "--max-iter", "50"], "kill:finalize"),
    ("whiten-store-creation", ["whiten"], "kill:store-created"),
    ("dictionary-after-cursor", ["dictionary", "--n-components", "8", "--k", "2"], "kill:cursor:1"),
]


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _extract_argv(model, texts, out, extra=()):
    return ["extract", str(model), "--inputs", str(texts), "--layers", LAYERS, "--final-hidden", "--out", str(out),
            "--batch-size", "1", "--checkpoint-every", "0", "--no-progress", *extra]


def _analysis_argv(command, source, out):
    return [command[0], str(source), "--layer", SRC_LAYER, "--out", str(out), "--block-rows", "16", "--quiet",
            *command[1:]]


def _env(fault=None):
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("ACTKIT_FAULT", None)
    if fault:
        env["ACTKIT_FAULT"] = fault
    return env


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    """The runs of this process (the resumptions) at the killed runs' budget (_env): a forward
    pass at 2 threads differs from one at 1 thread in the last bits, and without this the
    budget would follow the machine's load."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def refs(tiny_gpt_neox, text_file, tmp_path_factory):
    """Uninterrupted runs (this process): the extraction stores and the analysis outputs."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("refs")
    # the killed runs' settings (_env): without OMP_NUM_THREADS=1 the thread budget here would
    # follow the machine's load (2 threads when idle), and a forward pass at 2 threads differs
    # from one at 1 thread in the last bits
    saved = {k: os.environ.get(k) for k in ("SOURCE_DATE_EPOCH", "OMP_NUM_THREADS")}
    os.environ.update(SOURCE_DATE_EPOCH=EPOCH, OMP_NUM_THREADS="1")
    from actkit.cli import main

    try:
        out = {"plain": root / "ref.h5", "gzip": root / "ref-gzip.h5"}
        assert main(_extract_argv(tiny_gpt_neox, text_file, out["plain"])) == 0
        assert main(_extract_argv(tiny_gpt_neox, text_file, out["gzip"], ["--compression", "gzip"])) == 0
        for name, command, _ in ANALYSIS_KILLS:
            out[name] = root / f"{name}.h5"
            assert main(_analysis_argv(command, out["plain"], out[name])) == 0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out


@pytest.fixture(scope="module")
def killed(refs, tiny_gpt_neox, text_file, tmp_path_factory):
    """Every kill run (and the SIGTERM run), each in its own process forked from one that
    imported torch once: name -> (exit status, stderr, output path, argv)."""
    root = tmp_path_factory.mktemp("killed")
    jobs = []
    for name, fault, extra, _ in EXTRACT_KILLS:
        jobs.append((name, _extract_argv(tiny_gpt_neox, text_file, root / name / "out.h5", extra), fault))
    for name, command, fault in ANALYSIS_KILLS:
        jobs.append((name, _analysis_argv(command, refs["plain"], root / name / "out.h5"), fault))
    jobs.append(("sigterm", _extract_argv(tiny_gpt_neox, text_file, root / "sigterm" / "out.h5"), "term:cursor:3"))
    spec = []
    for name, argv, fault in jobs:
        (root / name).mkdir()
        spec.append({"name": name, "argv": argv, "fault": fault, "stderr": str(root / name / "stderr")})
    (root / "jobs.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "_kill_launcher.py"), str(root / "jobs.json"),
                           str(root / "results.json")], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads((root / "results.json").read_text())
    return {name: (codes[name], (root / name / "stderr").read_text(), root / name / "out.h5", argv)
            for name, argv, _ in jobs}


def _left_over(folder: Path, keep: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p != keep and p.name != "stderr")


@pytest.mark.parametrize("name,fault,extra,state", EXTRACT_KILLS, ids=[k[0] for k in EXTRACT_KILLS])
def test_kill9_during_extraction_resumes_bitwise(name, fault, extra, state, killed, refs, capsys, monkeypatch):
    code, err, out, argv = killed[name]
    assert code == -signal.SIGKILL, err[-2000:]  # the kill point was reached
    on_disk = {"nothing": (False, False, False), "partial-no-cursor": (False, True, False),
               "partial": (False, True, True), "store-and-cursor": (True, False, True)}[state]
    assert (out.exists(), partial_path(out).exists(), progress_path(out).exists()) == on_disk
    if state == "partial":  # a killed store reads as unfinished, the same under both names
        infos = [run_cli(capsys, "info", p, "--json") for p in (out, partial_path(out))]
        assert infos[0][0] == 0 and json.loads(infos[0][1])["progress"] == json.loads(infos[1][1])["progress"]
        assert "not finished" in cli_error(capsys, "ica", out, "--layer", SRC_LAYER, "--out", out.with_name("x.h5"))
    done = json.loads(progress_path(out).read_text())["samples_done"] if state == "partial" else 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, stdout, stderr = run_cli(capsys, *argv)
    assert code == 0, stderr
    if state == "store-and-cursor":
        assert "is already complete for this request" in stderr
    elif done:
        assert f"resumed {out} from {done}/7 samples; it is complete now" in stderr
    else:
        assert f"wrote {out}: 7 samples" in stderr
    reference = refs["gzip" if "--compression" in extra else "plain"]
    assert _sha(out) == _sha(reference)
    assert _left_over(out.parent, out) == []  # no .partial, cursor, .tmp or .repack left behind


@pytest.mark.parametrize("name,command,fault", ANALYSIS_KILLS, ids=[k[0] for k in ANALYSIS_KILLS])
def test_kill9_during_analysis_resumes_bitwise(name, command, fault, killed, refs, capsys, monkeypatch):
    code, err, out, argv = killed[name]
    assert code == -signal.SIGKILL, err[-2000:]
    assert not out.exists()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, _, stderr = run_cli(capsys, *argv)
    assert code == 0, stderr
    assert _sha(out) == _sha(refs[name])
    assert _left_over(out.parent, out) == []


def test_resume_says_from_where(killed, refs, capsys, monkeypatch):
    """A resumed extraction says from which sample; a rerun of a finished one says so."""
    code, _, out, argv = killed["mid-run"]
    if not out.exists():  # the parametrised test has not resumed it yet
        done = json.loads(progress_path(out).read_text())["samples_done"]
        assert done == 4
        monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
        _, _, stderr = run_cli(capsys, *argv)
        assert f"resumed {out} from 4/7 samples; it is complete now" in stderr
    code, _, stderr = run_cli(capsys, *argv)
    assert code == 0 and f"{out} is already complete for this request (7 samples); nothing to do" in stderr


# ----------------------------------------------------------------------------- disk full
@pytest.fixture
def fault(monkeypatch):
    """Set ``ACTKIT_FAULT`` for this process (counts restart)."""
    def set_fault(spec):
        _faults._counts.clear()
        if spec is None:
            monkeypatch.delenv("ACTKIT_FAULT", raising=False)
        else:
            monkeypatch.setenv("ACTKIT_FAULT", spec)
    yield set_fault
    _faults._counts.clear()


@pytest.mark.parametrize("spec,while_", [("enospc:rows:5", "writing rows of layer gpt_neox.layers.2"),
                                         ("enospc:cursor-write:3", "writing the resume cursor")])
def test_disk_full_mid_run_is_one_line_and_resumes(spec, while_, tiny_gpt_neox, text_file, refs, tmp_path, capsys,
                                                   monkeypatch, fault):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "full.h5"
    fault(spec)
    line = cli_error(capsys, *_extract_argv(tiny_gpt_neox, text_file, out))
    assert line == (f"actkit: error: no space left on the disk of {partial_path(out)} while {while_}; free space "
                    "and rerun the same command to resume")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.h5.partial", "full.h5.progress.json"]
    fault(None)
    # every command that meets the unfinished store says so, and how to resume
    state = json.loads(progress_path(out).read_text())
    for argv in (["ica", out, "--layer", SRC_LAYER, "--out", tmp_path / "i.h5"],
                 ["compare", out, refs["plain"]], ["verify", tmp_path / "nope.h5"]):
        line = cli_error(capsys, *argv)
        assert ("is not finished" in line and "to resume" in line) or "does not exist" in line, line
    assert f"{state['samples_done']}/7 samples written" in cli_error(
        capsys, "whiten", out, "--layer", SRC_LAYER, "--out", tmp_path / "w.h5")
    code, text, _ = run_cli(capsys, "info", out)
    assert code == 0 and f"({state['samples_done']}/7 samples written; rerun" in text
    code, _, err = run_cli(capsys, *_extract_argv(tiny_gpt_neox, text_file, out))
    assert code == 0 and f"from {state['samples_done']}/7 samples" in err
    assert _sha(out) == _sha(refs["plain"])


def test_disk_full_while_creating_leaves_nothing(tiny_gpt_neox, text_file, tmp_path, capsys, fault):
    out = tmp_path / "c.h5"
    fault("enospc:store-created")
    line = cli_error(capsys, *_extract_argv(tiny_gpt_neox, text_file, out))
    assert "no space left" in line and "while creating the store" in line
    assert list(tmp_path.iterdir()) == []


def test_preflight_space_check_uses_readable_units(tmp_path, monkeypatch):
    import actkit.store._create as store_mod

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store_mod.shutil, "disk_usage", lambda p: usage._replace(free=3000))
    with pytest.raises(StoreError, match=r"the store needs 1\.54 MiB, 2\.93 KiB free$"):
        create_store(tmp_path / "s.h5", [LayerSpec("a", 1000, 400)], n_samples=1000, request={})
    assert list(tmp_path.iterdir()) == []


def _on_a_full_tmpfs(tmp_path, size, argv, trigger):
    """Run ``tests/_full_disk_run.py`` in a mount namespace of its own (``unshare
    --map-root-user --mount``: root or not, the same real tmpfs of ``size`` bytes, invisible
    outside and gone with the namespace); its results (JSON)."""
    disk, spec, results = tmp_path / "tmpfs", tmp_path / "spec.json", tmp_path / "results.json"
    disk.mkdir()
    spec.write_text(json.dumps({"argv": argv, "disk": str(disk), "trigger": trigger}))
    mount = f'mount -t tmpfs -o size={int(size)} tmpfs "$0" && exec "$@"'
    proc = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", mount, str(disk), sys.executable,
                           str(REPO / "tests" / "_full_disk_run.py"), str(spec), str(results)],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, ("a real tmpfs needs `unshare --map-root-user --mount` (util-linux, user "
                                  f"namespaces enabled): {proc.stderr.strip()[-2000:]}")
    return json.loads(results.read_text())


@pytest.fixture(scope="module")
def resnet_ref(tmp_path_factory):
    """The command of issue 20's full-disk report, and its uninterrupted store."""
    argv = [sys.executable, "-m", "actkit", "extract", f"timm:local-dir:{REPO}/data/zoo/resnet-tiny-seed0",
            "--inputs", str(REPO / "data/zoo/inputs/shapes.npy"), "--layers", "layer1,layer3", "--pool", "none",
            "--batch-size", "2", "--checkpoint-every", "0", "--no-progress"]
    ref = tmp_path_factory.mktemp("resnet") / "ref.h5"
    done = subprocess.run(argv + ["--out", str(ref)], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return argv, ref


@pytest.mark.slow
@pytest.mark.parametrize("fill_when", ["partial", "progress.json"])
def test_real_full_tmpfs_is_one_line_never_a_crash_and_resumes(fill_when, tmp_path, resnet_ref):
    """Issue 20: a tmpfs of (store size + 3 MiB) under --out, filled once ``r.h5.partial`` (or
    the first cursor) appears. HDF5 crashed in its close path (exit 139); now the store's
    space is reserved before HDF5 writes, the failure is one line, and a rerun after space is
    freed gives the uninterrupted run's bytes."""
    argv, ref = resnet_ref
    res = _on_a_full_tmpfs(tmp_path, ref.stat().st_size + 3 * 2**20, argv, f"r.h5.{fill_when}")
    out = tmp_path / "tmpfs" / "r.h5"
    first, err = res["first"], res["first"]["stderr"]
    lines = err.strip().splitlines()
    assert first["returncode"] in (0, 2), (first["returncode"], err[-3000:])  # never 139 (SIGSEGV)
    if first["returncode"]:
        assert len(lines) == 1 and lines[0].startswith(f"actkit: error: no space left on the disk of {out}.partial "
                                                       "while "), err[-3000:]
        assert lines[0].endswith("free space and rerun the same command to resume")
        assert not first["out_exists"]
    assert res["again"]["returncode"] == 0, res["again"]["stderr"][-2000:]
    assert res["sha"] == _sha(ref)
    assert res["listing"] == ["r.h5"]


def test_store_creation_reserves_the_planned_size(tmp_path):
    """The preallocated rows are allocated on disk at creation (no holes left to fill later)."""
    w = create_store(tmp_path / "s.h5", [LayerSpec("a", 4000, 512)], n_samples=4000, request={})
    part = partial_path(tmp_path / "s.h5")
    st = part.stat()
    assert st.st_size > 4000 * 512 * 4 and st.st_blocks * 512 >= st.st_size
    w.abort()


# ----------------------------------------------------------------------------- flipped bytes
def _small_store(path: Path) -> Path:
    specs = [LayerSpec("layer1", 40, 8, attrs={"pool": "none", "module_output_shape": [8, 2, 2]}),
             LayerSpec("layer3", 10, 6, dtype="float16", attrs={"pool": "mean"})]
    w = create_store(path, specs, n_samples=10, request={"model": "m", "layers": ["layer1", "layer3"]},
                     provenance={"model": "m", "revision": None, "versions": {"actkit": "x"}},
                     params={"unembedding": np.arange(12.0).reshape(3, 4)}, inputs_fingerprint="f" * 64)
    rng = np.random.default_rng(0)
    w.append("layer1", rng.normal(size=(40, 8)).astype(np.float32))
    w.append("layer3", rng.normal(size=(10, 6)).astype(np.float16))
    w.checkpoint(10, force=True)
    return w.finalize()


def _raw_ranges(path: Path) -> dict:
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = (obj.id.get_offset(), obj.id.get_storage_size())
        f.visititems(visit)
    return out


def test_metadata_is_outside_the_global_heap(tmp_path):
    path = _small_store(tmp_path / "s.h5")
    assert b"GCOL" not in path.read_bytes()  # no global heap collection in the file
    vlen = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for key in obj.attrs:
                info = h5py.check_string_dtype(obj.attrs.get_id(key).dtype)
                if info is not None and info.length is None:
                    vlen.append(f"{name}:{key}")
        visit("/", f)
        f.visititems(visit)
    assert vlen == []


def test_every_flipped_metadata_byte_is_an_error_or_harmless(tmp_path):
    """XOR 0xFF into every 5th byte of a store (headers, B-trees, heaps, /meta): opening it with
    verification and reading everything either gives the intact values or one StoreError, and
    within a second; never another exception, never silently different values, never a hang."""
    path = _small_store(tmp_path / "s.h5")
    offsets = list(range(0, path.stat().st_size, 5))
    halves = [offsets[0::2], offsets[1::2]]
    procs = []
    for i, part in enumerate(halves):
        folder = tmp_path / f"probe{i}"
        folder.mkdir()
        shutil.copy(path, folder / "s.h5")
        procs.append((folder, subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "_flip_probe.py"), str(folder / "s.h5"), str(folder / "r.json"),
             ",".join(map(str, part))], cwd=REPO, env=_env(), stderr=subprocess.PIPE)))
    records = []
    for folder, proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
        records += json.loads((folder / "r.json").read_text())
    bad = [r for r in records if r["outcome"] not in ("same", "error")]
    assert bad == [], bad[:5]
    assert sum(r["outcome"] == "error" for r in records) > len(records) // 10  # the flips did hit something
    assert max(r["seconds"] for r in records) < 1.0


def test_flipped_data_byte_is_found_by_verify(tmp_path, capsys):
    path = _small_store(tmp_path / "s.h5")
    start, size = _raw_ranges(path)["layers/layer1/data"]
    block_rows = 40  # 40 rows x 8 float32 fit in one 1 MiB block
    raw = bytearray(path.read_bytes())
    raw[start + 5 * 32 + 3] ^= 0x01  # row 5
    path.write_bytes(raw)
    code, text, _ = run_cli(capsys, "info", path)  # info alone does not read the data
    assert code == 0 and "layer1" in text
    expected = f"actkit: error: {path}: layer layer1 block 0 (rows 0-{block_rows - 1}) does not match its checksum"
    assert cli_error(capsys, "verify", path).startswith(expected)
    assert cli_error(capsys, "info", path, "--verify").startswith(expected)
    assert cli_error(capsys, "ica", path, "--layer", "layer1", "--out", tmp_path / "o.h5",
                     "--verify").startswith(expected)
    assert cli_error(capsys, "compare", path, path, "--verify").startswith(expected)
    assert not (tmp_path / "o.h5").exists()


def test_verify_names_the_block_and_passes_intact_stores(tmp_path, capsys):
    path = tmp_path / "big.h5"
    rows = 3000  # 600 float32 features: 436 rows per 1 MiB block, 7 blocks
    w = create_store(path, [LayerSpec("x", rows, 600)], n_samples=rows, request={})
    data = np.random.default_rng(1).normal(size=(rows, 600)).astype(np.float32)
    for s in range(0, rows, 250):  # appends that do not line up with blocks
        w.append("x", data[s:s + 250])
    w.checkpoint(rows, force=True)
    w.finalize()
    code, text, _ = run_cli(capsys, "verify", path)
    assert code == 0 and "ok, 7 blocks (6.87 MiB) in 1 layer and 0 parameters match their checksums" in text
    start, _ = _raw_ranges(path)["layers/x/data"]
    raw = bytearray(path.read_bytes())
    raw[start + 2000 * 600 * 4] ^= 0x80  # row 2000: block 4 (rows 1744-2179)
    path.write_bytes(raw)
    assert "layer x block 4 (rows 1744-2179) does not match" in cli_error(capsys, "verify", path)


def test_flipped_checksum_index_and_param_bytes(tmp_path, capsys):
    for key, needle in (("layers/layer3/checksums", "layer layer3 block 0"),
                        ("layers/layer1/index", "row index of layer layer1"),
                        ("params/unembedding", "parameter unembedding")):
        path = _small_store(tmp_path / f"{key.replace('/', '_')}.h5")
        start, _ = _raw_ranges(path)[key]
        raw = bytearray(path.read_bytes())
        raw[start + 1] ^= 0x10
        path.write_bytes(raw)
        assert needle in cli_error(capsys, "verify", path)


def test_old_format_store_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "old.h5"
    with h5py.File(path, "w") as f:
        f.attrs["actkit_format"] = "actkit-store/1"  # a variable-length string, as format 1 wrote
        f.attrs["complete"] = True
    assert "written by an older actkit (store format actkit-store/1)" in cli_error(capsys, "info", path)


def test_truncated_and_garbage_files_are_one_line(tmp_path, capsys):
    good = _small_store(tmp_path / "g.h5")
    for n in (100, 800, 2000, 5000):
        bad = tmp_path / f"t{n}.h5"
        bad.write_bytes(good.read_bytes()[:n])
        line = cli_error(capsys, "info", bad)
        assert str(bad) in line and ("corrupt" in line or "truncated" in line), line


# ----------------------------------------------------------------------------- random weights
@pytest.fixture(scope="module")
def vit_without_pooler(tmp_path_factory):
    """A ViT checkpoint without pooler weights: AutoModel adds a randomly initialised pooler."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    path = tmp_path_factory.mktemp("vit_nopool")
    torch.manual_seed(7)
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64)
    ViTModel(cfg, add_pooling_layer=False).eval().save_pretrained(path, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def test_random_weights_are_seeded_so_runs_and_resumes_agree(vit_without_pooler, image_npy, tmp_path, capsys,
                                                             monkeypatch, fault):
    import torch

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    argv = lambda out: ["extract", vit_without_pooler, "--inputs", image_npy, "--layers",  # noqa: E731
                        "encoder.layer.0,pooler", "--out", out, "--batch-size", "2", "--checkpoint-every", "0",
                        "--no-progress"]
    rng = torch.get_rng_state()
    code, _, err = run_cli(capsys, *argv(tmp_path / "a.h5"))
    assert code == 0 and "randomly initialised with seed 0, the same in every run" in err
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's RNG is left alone
    torch.manual_seed(123)  # whatever the caller's RNG state, the pooler is the same
    assert run_cli(capsys, *argv(tmp_path / "b.h5"))[0] == 0
    assert _sha(tmp_path / "a.h5") == _sha(tmp_path / "b.h5")
    with open_store(tmp_path / "a.h5") as st:
        assert st.request["request"]["init_seed"] == 0
    fault("enospc:rows:3")  # stop after the first batch, resume in a fresh load
    code, _, err = run_cli(capsys, *argv(tmp_path / "c.h5"))
    assert code == 2 and err.splitlines()[-1].startswith("actkit: error: no space left")
    fault(None)
    torch.manual_seed(456)
    assert run_cli(capsys, *argv(tmp_path / "c.h5"))[0] == 0
    assert _sha(tmp_path / "c.h5") == _sha(tmp_path / "a.h5")


# ----------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def pickled_models(tiny_gpt_neox, tmp_path_factory):
    """Two copies of the tiny GPT-NeoX: a pickle renamed model.safetensors, and a malicious
    pytorch_model.bin whose unpickling would create a marker file."""
    import torch

    root = tmp_path_factory.mktemp("pickled")
    renamed, evil = root / "renamed", root / "evil"
    shutil.copytree(tiny_gpt_neox, renamed)
    from safetensors.torch import load_file

    weights = {k: v.clone() for k, v in load_file(str(tiny_gpt_neox / "model.safetensors")).items()}
    (renamed / "model.safetensors").unlink()
    torch.save(weights, renamed / "model.safetensors")  # a pickle under a safetensors name
    shutil.copytree(tiny_gpt_neox, evil)
    (evil / "model.safetensors").unlink()
    marker = root / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"gpt_neox.embed_in.weight": Payload()}, evil / "pytorch_model.bin")
    return renamed, evil, marker


def test_bad_inputs_are_one_line(refs, pickled_models, tiny_gpt_neox, text_file, tmp_path, capsys):
    src = refs["plain"]
    out = tmp_path / "o.h5"
    renamed, evil, marker = pickled_models
    cases = [
        (["ica", src, "--layer", SRC_LAYER, "--out", out, "--block-rows", "0"], "--block-rows must be a positive"),
        (["whiten", src, "--layer", SRC_LAYER, "--out", out, "--block-rows", "-5"], "got -5"),
        (["dictionary", src, "--layer", SRC_LAYER, "--out", out, "--n-components", "4", "--block-rows", "0"],
         "--block-rows must be a positive"),
        (_extract_argv(tiny_gpt_neox, text_file, out, ["--checkpoint-every", "-1"]),
         "--checkpoint-every must be a number of seconds >= 0"),
        (_extract_argv(renamed, text_file, out), "is not valid safetensors (corrupt, or another format such as "
                                                 "a pickle file renamed)"),
        (_extract_argv(evil, text_file, out, ["--allow-pickle"]), "torch refused a pickle weight file"),
    ]
    for argv, needle in cases:
        line = cli_error(capsys, *argv)
        assert needle in line, line
        assert not out.exists() and not partial_path(out).exists()
    assert not marker.exists()  # the payload never ran


def test_block_rows_validated_in_the_api():
    from actkit.stats import iter_row_blocks

    for bad in (0, -5, 2.5):
        with pytest.raises(ValueError, match="block_rows must be a positive integer"):
            list(iter_row_blocks(np.zeros((4, 2)), bad))


def test_sigterm_is_a_line_exit_143_and_resumes(killed, refs, capsys, monkeypatch):
    code, err, out, argv = killed["sigterm"]
    assert code == 143, err
    assert err.strip().splitlines() == ["actkit: terminated (SIGTERM); rerun the same command to resume"]
    assert json.loads(progress_path(out).read_text())["samples_done"] == 3
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and f"resumed {out} from 3/7 samples" in err
    assert _sha(out) == _sha(refs["plain"])
