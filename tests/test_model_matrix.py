"""The model matrix: every family of ``tests/_model_matrix.py`` (tiny random models, built here),
every block extracted through the architecture-independent names (``embed``, ``resid.all``,
``final_hidden``), per token and pooled, equal to the framework's own outputs to 1e-5:

* transformers: ``output_hidden_states`` (``hidden_states[0]`` is ``embed``, ``hidden_states[i + 1]``
  is ``resid.i``), a forward hook on the last block (a decoder's last hidden state is taken
  after the final norm), ``last_hidden_state`` for ``final_hidden``;
* timm: ``forward_intermediates`` (intermediate ``i`` is ``resid.i``), a forward pre-hook on
  the first block for ``embed``, ``forward_features`` for ``final_hidden``.

``docs/models.md`` is generated from the same families: the last test fails when it differs;
``ACTKIT_REGEN_MODELS_DOC=1 python -m pytest tests/test_model_matrix.py -k doc`` rewrites it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import actkit

from _model_matrix import FAMILIES

pytestmark = pytest.mark.usefixtures("torch_one_thread")

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "A short one."]
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every family saved once; the inputs (two texts of different lengths, two images)."""
    root = tmp_path_factory.mktemp("matrix")
    specs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, family in enumerate(FAMILIES):
            folder = root / f"{i:02d}"
            folder.mkdir()
            specs[family.name] = family.build(folder)
    (root / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    rng = np.random.default_rng(0)
    np.save(root / "images.npy", rng.integers(0, 256, size=(2, 40, 48, 3), dtype=np.uint8))
    return specs, root / "texts.txt", root / "images.npy"


def _rows(t: torch.Tensor, layout="NCHW") -> np.ndarray:
    """(B, T, C), (B, C, H, W) or (B, H, W, C) -> rows (sample-major, then token / h, w)."""
    t = t.detach().float()
    if t.ndim == 4 and layout == "NCHW":
        t = t.permute(0, 2, 3, 1)
    return t.reshape(-1, t.shape[-1]).numpy()


def _means(t: torch.Tensor, layout="NCHW") -> np.ndarray:
    t = t.detach().float()
    if t.ndim == 4:
        return t.mean((2, 3) if layout == "NCHW" else (1, 2)).numpy()
    return t.mean(1).numpy()


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _hf_forward(base, blocks_path, kwargs):
    """``output_hidden_states`` of ``base`` plus the last block's raw output (a forward hook)."""
    last = {}
    blocks = base.get_submodule(blocks_path)
    def hook(module, args, out):  # returns None: the output is left as it is
        last["x"] = _first(out)

    handle = blocks[-1].register_forward_hook(hook)
    try:
        with torch.inference_mode():
            out = base(**kwargs, output_hidden_states=True)
    finally:
        handle.remove()
    hs = list(out.hidden_states)
    assert len(hs) == len(blocks) + 1  # the blocks actkit found are the framework's
    return {"embed": hs[0], **{f"resid.{i}": h for i, h in enumerate(hs[1:-1])},
            f"resid.{len(blocks) - 1}": last["x"], "final_hidden": out.last_hidden_state}


def _blocks_path(store, prefix=""):
    path = store[f"{prefix}resid.0"].attrs["module"]
    return path.rsplit(".", 1)[0]


def _reference_text(family, spec, store, prefix=""):
    """Per sample (unpadded, one at a time): {name: (rows, pooled row)}."""
    import transformers
    from transformers import AutoTokenizer

    info = store.provenance
    cls = getattr(transformers, info["loaded_with"])
    model = cls.from_pretrained(spec).eval()
    tower = prefix[:-1]
    if tower:
        base = getattr(model, f"{tower}_model")
        blocks = _blocks_path(store, prefix)[len(tower) + len("_model."):]
    else:
        base = model.base_model if info["loaded_with"] == "AutoModelForCausalLM" else model
        blocks = _blocks_path(store)
        blocks = blocks[len(_path_of(model, base)) + 1:] if _path_of(model, base) else blocks
    tok = AutoTokenizer.from_pretrained(spec)
    per = [_hf_forward(base, blocks, dict(tok(text, return_tensors="pt"))) for text in TEXTS]
    return {prefix + k: (np.concatenate([_rows(p[k]) for p in per]), np.concatenate([_means(p[k]) for p in per]))
            for k in per[0]}


def _path_of(model, module):
    return next(n for n, m in model.named_modules() if m is module)


def _reference_hf_image(family, spec, store, images, prefix=""):
    import transformers
    from transformers import AutoImageProcessor

    cls = getattr(transformers, store.provenance["loaded_with"])
    model = cls.from_pretrained(spec).eval()
    pixels = AutoImageProcessor.from_pretrained(spec)(images=list(images), return_tensors="pt")["pixel_values"]
    kwargs = {"pixel_values": pixels}
    base = model
    blocks = _blocks_path(store, prefix)
    if prefix:
        base = model.vision_model
        blocks = blocks[len("vision_model."):]
    if model.config.model_type == "vit_mae":  # every patch, in order (as actkit runs it)
        model.config.mask_ratio = 0.0
        n = model.embeddings.patch_embeddings.num_patches
        kwargs["noise"] = torch.arange(n, dtype=torch.float32).expand(len(images), n)
    out = _hf_forward(base, blocks, kwargs)
    return {prefix + k: (_rows(v), _means(v)) for k, v in out.items()}


def _reference_timm(spec, images):
    import timm
    from PIL import Image

    model = timm.create_model("local-dir:" + spec, pretrained=True).eval()
    cfg = timm.data.resolve_model_data_config(model)
    tf = timm.data.create_transform(**cfg, is_training=False)
    x = torch.stack([tf(Image.fromarray(img)) for img in images])
    layout = getattr(model, "output_fmt", "NCHW")
    layout = getattr(layout, "value", layout)
    modules = [f["module"] for f in model.feature_info]
    seen = {}
    def pre_hook(module, args):  # returns None: the input is left as it is
        seen["embed"] = args[0]

    handle = model.get_submodule(modules[0]).register_forward_pre_hook(pre_hook)
    with torch.inference_mode():
        if hasattr(model, "num_prefix_tokens"):  # token models: prefix tokens (CLS) first, then patches
            inter = model.forward_intermediates(x, indices=len(modules), intermediates_only=True, output_fmt="NLC",
                                                return_prefix_tokens=True)
            inter = [torch.cat([prefix, patches], 1) for patches, prefix in inter]
        else:
            inter = model.forward_intermediates(x, indices=len(modules), intermediates_only=True)
        final = model.forward_features(x)
    handle.remove()
    out = {f"resid.{i}": (_rows(t), _means(t)) for i, t in enumerate(inter)}
    out["final_hidden"] = (_rows(final, layout), _means(final, layout))
    if modules[0].endswith(".0"):
        out["embed"] = (_rows(seen["embed"], layout), _means(seen["embed"], layout))
    return out


def _extract(spec, inputs, out, layers, pool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return actkit.open_store(actkit.extract(spec, inputs, out, layers=layers, pool=pool, batch_size=2,
                                                progress=False))


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_block_equals_the_framework(family, built, tmp_path):
    specs, texts, images_npy = built
    spec = specs[family.name]
    images = np.load(images_npy)
    runs = {"text": [("", texts)], "image": [("", images_npy)],
            "text+image": [("text.", texts), ("vision.", images_npy)]}[family.kind]
    for prefix, inputs in runs:
        layers = ",".join(prefix + a for a in ("embed", "resid.all", "final_hidden"))
        if family.library == "timm":
            ref = _reference_timm(spec, images)
            if "embed" not in ref:  # a stem, not a block, comes first (ResNet, RegNet): no embed
                layers = "resid.all,final_hidden"
        tokens = _extract(spec, inputs, tmp_path / f"{prefix}none.h5", layers, "none")
        pooled = _extract(spec, inputs, tmp_path / f"{prefix}mean.h5", layers, "mean")
        if family.library == "timm":
            pass
        elif inputs == texts:
            ref = _reference_text(family, spec, tokens, prefix)
        else:
            ref = _reference_hf_image(family, spec, tokens, images, prefix)
        assert set(ref) == set(tokens.layers) and len(ref) >= 4, (sorted(ref), tokens.layers)
        for name in tokens.layers:
            rows, means = ref[name]
            np.testing.assert_allclose(tokens[name][:], rows, **TOL, err_msg=f"{family.name} {name} per token")
            np.testing.assert_allclose(pooled[name][:], means, **TOL, err_msg=f"{family.name} {name} pooled")


# --- docs/models.md -----------------------------------------------------------------------------

HEADER = """# Tested models

<!-- generated by tests/test_model_matrix.py from tests/_model_matrix.py; do not edit by hand:
     ACTKIT_REGEN_MODELS_DOC=1 python -m pytest tests/test_model_matrix.py -k doc -->

Every family below is built by the test suite from a tiny random config (no download), and
`tests/test_model_matrix.py` extracts every block through the names of this page and checks
the rows equal the framework's own outputs to 1e-5, per token (or spatial position) and
mean-pooled: transformers' `output_hidden_states` (`hidden_states[0]` = `embed`,
`hidden_states[i + 1]` = `resid.i`), a forward hook on the last block (a decoder's last
`hidden_states` entry is taken after the final norm, `resid.-1` before it) and
`last_hidden_state` (`final_hidden`); timm's `forward_intermediates` (intermediate `i` =
`resid.i`), a forward pre-hook on the first block (`embed`) and `forward_features`
(`final_hidden`).

## The names

| name | what it is |
| --- | --- |
| `embed` | the input of block 0: the embeddings as the first block sees them (positions, scaling, a pre-norm or projection included) |
| `resid.{i}` | the raw output of block `i`, from 0; `resid.-1` is the last block (before a decoder's final norm) |
| `resid.all` | every `resid.{i}` |
| `final_hidden` | `last_hidden_state` (after the final norm where there is one); timm: the output of `forward_features` |
| `vision.NAME`, `text.NAME` | a tower of a two-tower model (CLIP), loaded whole: image inputs run `vision.*`, text inputs `text.*` |

`actkit layers MODEL` prints each module's alias next to its module path; a store records
both for every layer (`module` and `aliases` in its attributes), and `Store[...]` (so
`actkit compare --layers`) takes either. The blocks are found without a list of families
(the `nn.ModuleList` holding the most parameters; timm: the modules of `feature_info`), so a
family with the usual layout works without new code: the rows marked *extra* are families no
code of actkit names. Where no list of blocks is found, actkit says so and names module paths
to pass to `--layers` instead.

## The matrix

"""

FOOTER = """
*Stages*: `resid.i` is a stage (hierarchical models, where the resolution changes), as timm's
`forward_intermediates` and transformers' `hidden_states` index them; *blocks*: one
transformer block each.

Models whose code lives in their repository need `--trust-remote-code` (actkit says so in
one line). A quantised checkpoint (a `quantization_config` in `config.json`: bitsandbytes,
GPTQ, AWQ...) needs its package and a GPU: actkit names both in one line (`pip install
bitsandbytes`, `--device cuda` or `--device-map auto`) and lets the quantisation config choose
the dtypes (this path is tested only for its messages, here on CPU). A model too large for
one device: `--device-map auto` (needs `accelerate`); running out of memory while loading
says so. A whole encoder-decoder (`T5ForConditionalGeneration`) cannot run without decoder
inputs: save its encoder alone (`T5EncoderModel`) and extract from that folder. timm models load from a
local folder (`config.json` with `"architecture"`), `timm:NAME` (timm's weights) or
`timm:NAME --checkpoint FILE.safetensors`.
"""


def _describe(family, spec):
    """One table row of ``family``, from the loaded model (actkit's own view of it)."""
    from actkit.extractors.naming import schemes
    from actkit.extractors.registry import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapter = load_model(spec)
    cells, units = [], set()
    for scheme in schemes(adapter):
        p = scheme.prefix
        names = ([f"`{p}embed`"] if scheme.embed and scheme.blocks else []) + [
            f"`{p}resid.0`…`{p}resid.{len(scheme.blocks) - 1}`"] + ([f"`{p}final_hidden`"] if scheme.final else [])
        first, last = scheme.blocks[0], scheme.blocks[-1]
        if first.endswith(".0") and last.rsplit(".", 1)[0] == first[:-2]:
            blocks = f"`{first}`…`{last}`"
        else:  # a stem, then stages (ResNet: act1, layer1, ...)
            blocks = ", ".join(f"`{b}`" for b in scheme.blocks)
        cells.append((", ".join(names), blocks))
        model = adapter.model
        reductions = {f.get("reduction") for f in (getattr(model, "feature_info", None) or [])}
        stage = len(reductions) > 1 or "stage" in type(model.get_submodule(scheme.blocks[0])).__name__.lower()
        units.add("stages" if stage else "blocks")
    if family.library == "timm":
        loads = "timm local folder (`timm.create_model`)"
        checked = "`forward_intermediates`, pre-hook, `forward_features`"
    else:
        loads = f"`{adapter.info['loaded_with']}`"
        checked = "`output_hidden_states`, last-block hook, `last_hidden_state`"
    name = family.name + (" *extra*" if family.extra else "")
    return (f"| {name} | `{family.cls}` | {loads} | {'<br>'.join(c[0] for c in cells)} | "
            f"{'<br>'.join(c[1] for c in cells)} ({'/'.join(sorted(units))}) | {checked} | ✓ | ✓ |")


def generated_doc(specs) -> str:
    lines = ["| family | class | loads with | names | `resid.i` is | checked equal to | per token (position) | pooled (mean) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [_describe(f, specs[f.name]) for f in FAMILIES]
    return HEADER + "\n".join(lines) + "\n" + FOOTER


def test_models_doc_is_generated(built):
    text = generated_doc(built[0])
    if os.environ.get("ACTKIT_REGEN_MODELS_DOC") == "1":
        DOC.write_text(text, encoding="utf-8")
    assert DOC.is_file() and DOC.read_text(encoding="utf-8") == text, (
        "docs/models.md differs from the table the test generates; regenerate it with "
        "ACTKIT_REGEN_MODELS_DOC=1 python -m pytest tests/test_model_matrix.py -k doc")
    readme = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "docs/models.md" in readme
