"""Architecture-independent layer names (``embed``, ``resid.{i}``, ``resid.all``, ``final_hidden``,
tower prefixes): resolved on the model, recorded in the store next to the module path, and
accepted by the store (so by ``compare``) under either name. The whole matrix of families is
``tests/test_model_matrix.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import actkit
from actkit.errors import LayerError
from cli_helpers import cli_error, run_cli

from _model_matrix import FAMILIES

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return next(f for f in FAMILIES if f.name == "Llama").build(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return next(f for f in FAMILIES if f.name == "CLIP").build(tmp_path_factory.mktemp("clip"))


def test_aliases_equal_hidden_states_and_the_store_records_both(llama, text_file, tmp_path):
    path = actkit.extract(llama, text_file, tmp_path / "a.h5", layers="embed,resid.all,resid.-1,final_hidden",
                          max_samples=1, progress=False)
    store = actkit.open_store(path)
    assert store.layers == ["embed", "resid.0", "resid.1", "resid.2", "resid.-1", "final_hidden"]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(llama).eval()
    ids = AutoTokenizer.from_pretrained(llama)(text_file.read_text().splitlines()[0], return_tensors="pt")
    last = {}
    model.model.layers[-1].register_forward_hook(lambda m, a, out: last.update(x=out))  # returns None
    with torch.inference_mode():
        out = model.model(**ids, output_hidden_states=True)
    last = last["x"][0] if isinstance(last["x"], tuple) else last["x"]
    refs = {"embed": out.hidden_states[0], "resid.0": out.hidden_states[1], "resid.1": out.hidden_states[2],
            "resid.2": last, "resid.-1": last, "final_hidden": out.last_hidden_state}
    for name, ref in refs.items():
        np.testing.assert_allclose(store[name][:], ref[0].numpy(), atol=1e-5, rtol=1e-5, err_msg=name)
    assert not np.allclose(store["resid.2"][:], store["final_hidden"][:])  # before vs after the final norm
    attrs = store["resid.1"].attrs
    assert attrs["module"] == "model.layers.1" and attrs["aliases"] == ["resid.-2"]
    assert store["model.layers.1"].name == "resid.1" and store["resid.-2"].name == "resid.1"
    # a module path is recorded with its alias too
    other = actkit.open_store(actkit.extract(llama, text_file, tmp_path / "b.h5", layers="model.layers.1",
                                             max_samples=1, progress=False))
    assert other["model.layers.1"].attrs["aliases"] == ["resid.1", "resid.-2"]
    assert other["resid.1"].name == "model.layers.1"


def _store(path, name, attrs, X, index):
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec(name, X.shape[0], X.shape[1], index=index, attrs=attrs)],
                     n_samples=int(index[:, 0].max()) + 1, request={"p": str(path)}, inputs_fingerprint="in")
    w.append(name, X.astype(np.float32))
    w.checkpoint(int(index[:, 0].max()) + 1)
    return w.finalize()


def test_compare_accepts_the_alias_or_the_module_path(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.laplace(size=(400, 5))
    index = np.stack([np.arange(400), np.full(400, -1)], 1)
    a = _store(tmp_path / "a.h5", "resid.1", {"module": "model.layers.1", "aliases": ["resid.-2"]}, X, index)
    b = _store(tmp_path / "b.h5", "model.layers.1", {"module": "model.layers.1", "aliases": ["resid.1", "resid.-2"]},
               X @ rng.normal(size=(5, 5)), index)
    for args in (["--layers", "resid.1"], ["--layers", "model.layers.1"], ["--layers", "resid.-2"],
                 ["--layer-a", "resid.1", "--layer-b", "resid.1"]):
        code, out, err = run_cli(capsys, "compare", a, b, *args, "--quiet")
        assert code == 0, (args, err)
    line = cli_error(capsys, "compare", a, b, "--layers", "resid.7", "--quiet")
    assert "unknown layer 'resid.7'" in line


def test_two_tower_prefixes(clip, text_file, image_npy, tmp_path, capsys):
    img = actkit.open_store(actkit.extract(clip, image_npy, tmp_path / "i.h5", layers="vision.resid.1,vision.embed",
                                           max_samples=1, progress=False))
    assert img["vision.resid.1"].attrs["module"] == "vision_model.encoder.layers.1"
    txt = actkit.open_store(actkit.extract(clip, text_file, tmp_path / "t.h5", layers="text.resid.-1",
                                           final_hidden=True, max_samples=1, progress=False))
    assert txt.layers == ["text.resid.-1", "text.final_hidden"]
    line = cli_error(capsys, "extract", clip, "--inputs", image_npy, "--layers", "resid.1", "--out", tmp_path / "x.h5")
    assert "vision.resid.1" in line and "text.resid.1" in line
    line = cli_error(capsys, "extract", clip, "--inputs", image_npy, "--layers", "text.resid.1",
                     "--out", tmp_path / "x.h5")
    assert "text tower" in line
    assert not (tmp_path / "x.h5").exists()


def test_layers_command_shows_alias_next_to_module_path(llama, capsys):
    code, out, err = run_cli(capsys, "layers", llama)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["model.layers.1"][1] == "resid.1" and rows["model.layers.1"][-1] == "28x32"
    assert rows["embed"][1:4] == ["input", "of", "model.layers.0"]
    assert rows["final_hidden"][1] == "model"


def test_bad_aliases_are_one_line(llama, text_file, tmp_path, capsys):
    line = cli_error(capsys, "extract", llama, "--inputs", text_file, "--layers", "resid.3", "--out", tmp_path / "x.h5")
    assert "has 3 blocks" in line and "resid.-3" in line
    assert not list(tmp_path.iterdir())


def test_a_model_without_blocks_says_which_layers_to_use():
    from actkit.extractors.naming import expand

    class Plain:
        name = "plain"
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

        def final_module(self):
            raise LayerError("no")

    with pytest.raises(LayerError, match=r"no list of blocks .* --layers 0,2"):
        expand(Plain(), ["resid.0"])
    assert expand(Plain(), ["0", "2"])[0] == ["0", "2"]
