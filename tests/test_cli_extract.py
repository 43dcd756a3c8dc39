"""``actkit extract`` / ``actkit layers``: every user mistake gives one line on stderr and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import actkit
from cli_helpers import cli_error as _error, run_cli as _run

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]


def test_extract_cli_writes_store(tiny_gpt_neox, text_file, tmp_path, capsys):
    out = tmp_path / "s.h5"
    code, stdout, _ = _run(capsys, "extract", tiny_gpt_neox, "--inputs", text_file, "--layers",
                           "gpt_neox.layers.0,gpt_neox.layers.1", "--out", out, "--pool", "mean",
                           "--batch-size", "3", "--final-hidden", "--unembedding", "--no-progress")
    assert code == 0 and stdout.strip() == str(out)
    store = actkit.open_store(out)
    assert store.layers == ["gpt_neox.layers.0", "gpt_neox.layers.1", "final_hidden"]
    assert store["final_hidden"].shape == (7, 32) and "unembedding" in store.params


def test_rerun_is_noop_different_command_refused_overwrite_replaces(tiny_gpt_neox, text_file, tmp_path, capsys):
    out = tmp_path / "s.h5"
    args = ["extract", tiny_gpt_neox, "--inputs", text_file, "--layers", "gpt_neox.layers.0", "--out", out,
            "--no-progress"]
    assert _run(capsys, *args)[0] == 0
    before, mtime = out.read_bytes(), out.stat().st_mtime_ns
    assert _run(capsys, *args)[0] == 0  # identical command: no-op
    assert out.read_bytes() == before and out.stat().st_mtime_ns == mtime
    line = _error(capsys, *args[:-1], "--pool", "mean", "--no-progress")
    assert "--overwrite" in line
    assert out.read_bytes() == before  # the existing file is untouched
    assert _run(capsys, *args[:-1], "--pool", "mean", "--overwrite", "--no-progress")[0] == 0
    assert actkit.open_store(out)["gpt_neox.layers.0"].shape == (7, 32)


def test_unknown_layer_suggests_closest(tiny_gpt_neox, text_file, tmp_path, capsys):
    line = _error(capsys, "extract", tiny_gpt_neox, "--inputs", text_file, "--layers", "gpt_neox.layer.1",
                  "--out", tmp_path / "x.h5")
    assert "unknown layer 'gpt_neox.layer.1'" in line and "gpt_neox.layers.1" in line
    assert not list(tmp_path.iterdir())  # nothing written


def test_missing_and_empty_inputs(tiny_gpt_neox, tmp_path, capsys):
    base = ["extract", tiny_gpt_neox, "--layers", "gpt_neox.layers.0", "--out", tmp_path / "x.h5"]
    assert "inputs not found" in _error(capsys, *base, "--inputs", tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    assert "no samples" in _error(capsys, *base, "--inputs", empty)
    folder = tmp_path / "imgs"
    folder.mkdir()
    assert "holds no images" in _error(capsys, *base, "--inputs", folder)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    assert "bad.jsonl:2" in _error(capsys, *base, "--inputs", bad)
    assert "unsupported inputs" in _error(capsys, *base, "--inputs", tiny_gpt_neox / "config.json")


def test_unreadable_image(tiny_vit, image_dir, tmp_path, capsys):
    import shutil

    folder = tmp_path / "imgs"
    shutil.copytree(image_dir, folder)
    (folder / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    line = _error(capsys, "extract", tiny_vit, "--inputs", folder, "--layers", "layers.0", "--out", tmp_path / "x.h5")
    assert "cannot read image" in line and "broken.png" in line


def test_unknown_model_and_missing_directory(text_file, tmp_path, capsys):
    base = ["--inputs", text_file, "--layers", "x", "--out", tmp_path / "x.h5"]
    assert "model directory not found" in _error(capsys, "extract", tmp_path / "no" / "model", *base)
    line = _error(capsys, "extract", "no-such-org/no-such-model-xyz", *base)
    # offline (HF_HUB_OFFLINE=1 in the tests): one whole sentence saying what to do
    assert line.endswith("(HF_HUB_OFFLINE is set); pass a local model folder (save_pretrained), "
                         "or run once online to cache it")
    assert "cannot load no-such-org/no-such-model-xyz: it is not in the local Hugging Face cache" in line
    assert "unknown timm model 'resnet_nope'" in _error(capsys, "extract", "timm:resnet_nope", *base)
    # timm:NAME without --checkpoint wants timm's pretrained weights: offline, a one-line error
    line = _error(capsys, "extract", "timm:resnet18", *base)
    assert "--checkpoint FILE.safetensors" in line and line.endswith("or run once online to cache it")
    assert "model directory not found" in _error(capsys, "extract", f"timm:local-dir:{tmp_path}/nope", *base)
    (tmp_path / "noconfig").mkdir()
    assert "no config.json" in _error(capsys, "extract", tmp_path / "noconfig", *base)


def test_remote_code_refused(text_file, tmp_path, capsys):
    model = tmp_path / "custom"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "my_custom_lm", "architectures": ["MyCustomLM"],
        "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModel": "modeling_my.MyModel"}}))
    line = _error(capsys, "extract", model, "--inputs", text_file, "--layers", "x", "--out", tmp_path / "x.h5")
    assert "--trust-remote-code" in line


def test_unwritable_output(tiny_gpt_neox, text_file, tmp_path, capsys):
    base = ["extract", tiny_gpt_neox, "--inputs", text_file, "--layers", "gpt_neox.layers.0"]
    assert "does not exist" in _error(capsys, *base, "--out", tmp_path / "missing" / "x.h5")
    assert "is a directory" in _error(capsys, *base, "--out", tmp_path)
    assert "does not exist" in _error(capsys, *base, "--out", text_file / "x.h5")


def test_pickle_checkpoints_refused_unless_allowed(tiny_gpt_neox, text_file, tmp_path, capsys):
    import shutil

    import torch
    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_gpt_neox, pickled)
    state = load_file(str(pickled / "model.safetensors"))
    (pickled / "model.safetensors").unlink()
    torch.save(state, pickled / "pytorch_model.bin")
    args = ["extract", pickled, "--inputs", text_file, "--layers", "gpt_neox.layers.0", "--no-progress"]
    assert "--allow-pickle" in _error(capsys, *args, "--out", tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()
    code, _, err = _run(capsys, *args, "--out", tmp_path / "y.h5", "--allow-pickle")
    assert code == 0, err
    ckpt = tmp_path / "resnet.pth"
    ckpt.write_bytes(b"not loaded")
    line = _error(capsys, "extract", "timm:resnet18", "--checkpoint", ckpt, "--inputs", text_file,
                  "--layers", "layer1", "--out", tmp_path / "z.h5")
    assert "--allow-pickle" in line


def test_wrong_input_kind_and_bad_pool(tiny_vit, tiny_timm_resnet, text_file, image_npy, tmp_path, capsys):
    line = _error(capsys, "extract", tiny_vit, "--inputs", text_file, "--layers", "layers.0", "--out", tmp_path / "x.h5")
    assert "takes image inputs" in line
    line = _error(capsys, "extract", tiny_timm_resnet, "--inputs", image_npy, "--layers", "layer1",
                  "--pool", "cls", "--out", tmp_path / "x.h5")
    assert "--pool cls needs a token sequence" in line


def test_layers_command(tiny_gpt_neox, tiny_timm_resnet, text_file, capsys):
    code, out, _ = _run(capsys, "layers", tiny_gpt_neox, "--json")
    assert code == 0
    layers = {x["name"]: x for x in json.loads(out)}
    assert layers["gpt_neox.layers.1"]["extractable"] and layers["gpt_neox.layers.1"]["shape"][-1] == 32
    assert layers["final_hidden"]["shape"][-1] == 32
    code, out, _ = _run(capsys, "layers", tiny_gpt_neox, "--inputs", text_file)
    assert code == 0 and "gpt_neox.layers.2" in out and "GPTNeoXLayer" in out
    line = next(x for x in out.splitlines() if x.startswith("gpt_neox.layers.2 "))
    assert line.split()[-1].endswith("x32")
    code, out, _ = _run(capsys, "layers", tiny_timm_resnet)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("layer3 "))
    assert line.split()[-1] == "256x4x4"  # 64x64 input, stride 16


def test_cli_subprocess_one_line_no_traceback(tiny_gpt_neox, text_file, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("ACTKIT_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "actkit", "extract", str(tiny_gpt_neox), "--inputs", str(text_file),
         "--layers", "gpt_neox.layers.9", "--out", str(tmp_path / "x.h5")],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("actkit: error: unknown layer 'gpt_neox.layers.9'")
    assert np.all([not p.name.startswith("x.h5") for p in tmp_path.iterdir()])
