"""kill -9 mid-extraction, rerun the identical command: the store is bitwise identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import actkit
from actkit.store import open_store, partial_path, progress_path

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
EPOCH = "1700000000"


@pytest.fixture
def many_texts(tmp_path):
    words = "the quick brown fox jumps over a lazy dog while features hold".split()
    lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 9)) for i in range(500)]
    path = tmp_path / "many.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sigkill_then_resume_is_bitwise_identical(tiny_gpt_neox, many_texts, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "killed.h5"
    opts = dict(layers=["gpt_neox.layers.0", "gpt_neox.layers.2"], pool="none", batch_size=2, final_hidden=True)
    cmd = [sys.executable, "-m", "actkit", "extract", str(tiny_gpt_neox), "--inputs", str(many_texts),
           "--layers", ",".join(opts["layers"]), "--out", str(out), "--batch-size", "2", "--final-hidden",
           "--checkpoint-every", "0", "--no-progress"]
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = json.loads(progress_path(out).read_text())["samples_done"]
            except (OSError, ValueError, KeyError):
                done = 0
            if done >= 10:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert not out.exists() and partial_path(out).exists()
    # a killed store is still readable (as an incomplete store)
    with open_store(out, allow_incomplete=True) as partial:
        assert not partial.info()["complete"]
    state = json.loads(progress_path(out).read_text())
    assert 10 <= state["samples_done"] < 500

    # the identical command resumes: only the remaining batches are computed
    import actkit.extractors.registry as registry

    batches = []
    real = registry.load_model

    def spy(*args, **kwargs):
        adapter = real(*args, **kwargs)
        adapter.model.gpt_neox.embed_in.register_forward_hook(lambda *a: batches.append(1))
        return adapter

    monkeypatch.setattr(registry, "load_model", spy)
    actkit.extract(str(tiny_gpt_neox), many_texts, out, progress=False, **opts)
    assert len(batches) == 1 + (500 - state["samples_done"]) // 2  # probe + remaining batches
    monkeypatch.setattr(registry, "load_model", real)

    reference = tmp_path / "reference.h5"
    actkit.extract(str(tiny_gpt_neox), many_texts, reference, progress=False, **opts)
    assert out.read_bytes() == reference.read_bytes()
    assert not partial_path(out).exists() and not progress_path(out).exists()
