"""Shared fixtures: tiny models built from configs and saved locally (no network).

Session-scoped, each in its own temporary directory:

``tiny_gpt_neox``   GPT-NeoX causal LM dir (safetensors) + a BPE tokenizer with no pad token
``tiny_vit``        ViT dir + ViTImageProcessor (32x32 images, 8x8 patches)
``tiny_vitmae``     ViTMAEForPreTraining dir + image processor
``timm_resnet``     (dir, checkpoint): timm ``resnet18`` random init as ``weights.safetensors``
``tiny_timm_vit``   timm local folder (config.json + model.safetensors) of a 32x32 ViT
``tiny_timm_resnet`` timm local folder of a resnet18 with 64x64 input
``text_file``       a .txt file of 7 sentences;  ``image_dir`` 7 PNGs in nested folders;
``image_npy``       a uint8 (7, 40, 48, 3) array.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pytest

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Activations of pretrained models hold features.",
    "A short one.",
    "Independent components are identifiable up to permutation and scale, under assumptions.",
    "Whitening then rotation.",
    "Sparse dictionaries find more features than dimensions in the residual stream of a model.",
    "End.",
]


@pytest.fixture(scope="module")
def torch_one_thread():
    """Run a test module with one torch thread (tiny models on a shared, busy machine are many
    times faster that way, and results match subprocesses started with OMP_NUM_THREADS=1)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _corpus():
    words = " ".join(SENTENCES) + " hello world this is a probe sample text for the tokenizer"
    return [words] * 4 + SENTENCES


@pytest.fixture(scope="session")
def tiny_gpt_neox(tmp_path_factory):
    """Directory of a 3-layer GPT-NeoX causal LM with a BPE tokenizer that has no pad token."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny_gpt_neox")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    assert fast.pad_token is None
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=len(fast), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, rotary_pct=0.25,
                        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    model = GPTNeoXForCausalLM(cfg).eval()
    model.save_pretrained(path, safe_serialization=True)
    return path


def _image_processor(size):
    from transformers import ViTImageProcessor

    return ViTImageProcessor(size={"height": size, "width": size}, do_resize=True, do_normalize=True,
                             image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


@pytest.fixture(scope="session")
def tiny_vit(tmp_path_factory):
    """Directory of a 2-layer ViT (32x32 images, 8x8 patches) with its image processor."""
    import torch
    from transformers import ViTConfig, ViTModel

    path = tmp_path_factory.mktemp("tiny_vit")
    torch.manual_seed(1)
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=64)
    ViTModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    _image_processor(32).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_vitmae(tmp_path_factory):
    """Directory of a ViTMAEForPreTraining checkpoint (mask_ratio 0.75 as in the real ones)."""
    import torch
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    path = tmp_path_factory.mktemp("tiny_vitmae")
    torch.manual_seed(2)
    cfg = ViTMAEConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                       intermediate_size=64, decoder_hidden_size=16, decoder_num_hidden_layers=1,
                       decoder_num_attention_heads=2, decoder_intermediate_size=32, mask_ratio=0.75)
    ViTMAEForPreTraining(cfg).eval().save_pretrained(path, safe_serialization=True)
    _image_processor(32).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def timm_resnet(tmp_path_factory):
    """``("resnet18", path/to/weights.safetensors)``: random-init weights saved as safetensors."""
    import timm
    import torch
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("timm_resnet")
    torch.manual_seed(3)
    model = timm.create_model("resnet18", pretrained=False)
    ckpt = path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt))
    return "resnet18", ckpt


def _save_timm(model, path, data_config, model_args=None):
    from timm.models import save_for_hf

    save_for_hf(model, str(path), safe_serialization=True, data_config=data_config, model_args=model_args)
    return path


@pytest.fixture(scope="session")
def tiny_timm_resnet(tmp_path_factory):
    """timm local folder: resnet18 (random init, BN statistics randomised) at 64x64 input."""
    import timm
    import torch

    path = tmp_path_factory.mktemp("tiny_timm_resnet")
    torch.manual_seed(4)
    model = timm.create_model("resnet18", pretrained=False)
    with torch.no_grad():  # non-trivial BN statistics, so eval-mode BN matters
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return _save_timm(model, path, {"input_size": (3, 64, 64), "crop_pct": 1.0})


@pytest.fixture(scope="session")
def tiny_timm_vit(tmp_path_factory):
    """timm local folder: a 3-block ViT (32x32 input, 8x8 patches, width 32)."""
    import timm
    import torch

    path = tmp_path_factory.mktemp("tiny_timm_vit")
    torch.manual_seed(5)
    args = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 3, "num_heads": 2, "num_classes": 5}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **args)
    return _save_timm(model, path, {"input_size": (3, 32, 32), "crop_pct": 1.0}, model_args=args)


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    """A .txt file with 7 sentences (one per line) and a blank line that is skipped."""
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    lines = SENTENCES[:3] + [""] + SENTENCES[3:]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_images(n=7, h=40, w=48, seed=0):
    """``n`` random uint8 RGB images, shape (n, h, w, 3)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="session")
def image_npy(tmp_path_factory):
    path = tmp_path_factory.mktemp("npy") / "images.npy"
    np.save(path, make_images())
    return path


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """7 PNG images in nested folders; sorted relative paths give the array order of make_images()."""
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    imgs = make_images()
    names = ["a/0.png", "a/1.png", "b/c/2.png", "b/d.png", "e.png", "f.PNG", "g/h/i.png"]
    assert names == sorted(names, key=str)
    for name, img in zip(names, imgs):
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(target)
    return root
