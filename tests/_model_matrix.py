"""The model matrix: tiny random models of each family, built from configs and saved locally.

Used by ``tests/test_model_matrix.py`` (which checks every block against the framework's
own outputs and writes ``docs/models.md``) and by ``tests/test_model_fixes.py``. No
network: every model is made from a config (random weights), every tokenizer is trained
here on a few sentences, every image processor is built from its arguments.

Each entry of :data:`FAMILIES` is ``Family(name, library, cls, kind, build)``;
``build(folder)`` saves the model there and returns the spec ``actkit.extract`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Activations of pretrained models hold features.",
    "A short one.",
]

H = 32  # hidden width of every transformers model
L = 3   # blocks of every transformers model


@dataclass
class Family:
    name: str
    library: str      # "transformers" or "timm"
    cls: str          # the class the folder is saved as
    kind: str         # "text", "image" or "text+image"
    build: Callable = field(repr=False)
    extra: bool = False  # outside the list: checks that a new family needs no new code


def tokenizer():
    """A 300-token byte-level BPE tokenizer trained on a few sentences (no pad token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(SENTENCES)] * 4 + SENTENCES, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def image_processor(size, clip=False):
    from transformers import CLIPImageProcessor, ViTImageProcessor

    if clip:
        return CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                  image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return ViTImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)


def _save_hf(model, folder, *, tok=None, proc=None):
    import torch

    with torch.no_grad():  # random, not zero, biases and norms: a wrong layout cannot pass by accident
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower():
                p.add_(0.1 * torch.randn_like(p))
    model.eval().save_pretrained(folder, safe_serialization=True)
    if tok is not None:
        tok.save_pretrained(folder)
    if proc is not None:
        proc.save_pretrained(folder)
    return str(folder)


def _text(config_cls, model_cls, **kw):
    def build(folder):
        import torch
        import transformers

        tok = tokenizer()
        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(vocab_size=len(tok), **kw)
        return _save_hf(getattr(transformers, model_cls)(cfg), folder, tok=tok)

    return build


_LM = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=4, intermediate_size=64,
           max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
_BERT = dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64, pad_token_id=0)


def _vision(config_cls, model_cls, size=32, **kw):
    def build(folder):
        import torch
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(image_size=size, **kw)
        return _save_hf(getattr(transformers, model_cls)(cfg), folder, proc=image_processor(size))

    return build


def _t5(folder):
    import torch
    from transformers import T5Config, T5EncoderModel

    tok = tokenizer()
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(tok), d_model=H, d_kv=8, d_ff=64, num_layers=L, num_heads=4, pad_token_id=0,
                   eos_token_id=0, decoder_start_token_id=0)
    return _save_hf(T5EncoderModel(cfg), folder, tok=tok)


def _clip(folder):
    import torch
    from transformers import CLIPConfig, CLIPModel

    tok = tokenizer()
    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=H, num_hidden_layers=L, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=H, num_hidden_layers=L,
                           num_attention_heads=4, intermediate_size=64),
        projection_dim=16)
    return _save_hf(CLIPModel(cfg), folder, tok=tok, proc=image_processor(32, clip=True))


def _timm(name, size, **args):
    def build(folder):
        import timm
        import torch
        from timm.models import save_for_hf

        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=5, **args)
        with torch.no_grad():  # non-trivial BN statistics, so eval-mode BN matters
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        save_for_hf(model, str(folder), safe_serialization=True,
                    data_config={"input_size": (3, size, size), "crop_pct": 1.0, "interpolation": "bilinear",
                                 "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)},
                    model_args={"num_classes": 5, **args})
        return str(folder)

    return build


_VIT = dict(patch_size=8, hidden_size=H, num_hidden_layers=L, num_attention_heads=4, intermediate_size=64)
_TVIT = dict(img_size=32, patch_size=8, embed_dim=H, depth=L, num_heads=2)

FAMILIES = [
    Family("Llama", "transformers", "LlamaForCausalLM", "text",
           _text("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_LM)),
    Family("Qwen2", "transformers", "Qwen2ForCausalLM", "text",
           _text("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **_LM)),
    Family("Gemma 2", "transformers", "Gemma2ForCausalLM", "text",
           _text("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=8, sliding_window=8,
                 **_LM)),
    Family("Mistral", "transformers", "MistralForCausalLM", "text",
           _text("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, **_LM)),
    Family("Phi-3", "transformers", "Phi3ForCausalLM", "text",
           _text("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0, **_LM)),
    Family("GPT-2", "transformers", "GPT2LMHeadModel", "text",
           _text("GPT2Config", "GPT2LMHeadModel", n_embd=H, n_layer=L, n_head=4, n_positions=64,
                 bos_token_id=0, eos_token_id=0)),
    Family("GPT-NeoX", "transformers", "GPTNeoXForCausalLM", "text",
           _text("GPTNeoXConfig", "GPTNeoXForCausalLM", rotary_pct=0.25, **_LM)),
    Family("OPT", "transformers", "OPTForCausalLM", "text",
           _text("OPTConfig", "OPTForCausalLM", hidden_size=H, num_hidden_layers=L, num_attention_heads=4,
                 ffn_dim=64, word_embed_proj_dim=H, max_position_embeddings=64, pad_token_id=0,
                 bos_token_id=0, eos_token_id=0)),
    Family("BERT", "transformers", "BertModel", "text", _text("BertConfig", "BertModel", **_BERT)),
    Family("RoBERTa", "transformers", "RobertaModel", "text",
           _text("RobertaConfig", "RobertaModel", **{**_BERT, "pad_token_id": 1})),
    Family("T5 encoder", "transformers", "T5EncoderModel", "text", _t5),
    Family("CLIP", "transformers", "CLIPModel", "text+image", _clip),
    Family("DINOv2", "transformers", "Dinov2Model", "image",
           _vision("Dinov2Config", "Dinov2Model", **{k: v for k, v in _VIT.items() if k != "intermediate_size"},
                   mlp_ratio=2)),
    Family("ViT", "transformers", "ViTModel", "image", _vision("ViTConfig", "ViTModel", **_VIT)),
    Family("ViTMAE", "transformers", "ViTMAEModel", "image", _vision("ViTMAEConfig", "ViTMAEModel", **_VIT)),
    Family("Swin", "transformers", "SwinModel", "image",
           _vision("SwinConfig", "SwinModel", patch_size=2, embed_dim=8, depths=[1, 1, 1], num_heads=[1, 1, 1],
                   window_size=2)),
    Family("ConvNeXt", "transformers", "ConvNextModel", "image",
           _vision("ConvNextConfig", "ConvNextModel", hidden_sizes=[8, 16, 24], depths=[1, 1, 1],
                   num_stages=3)),
    Family("timm ResNet", "timm", "test_resnet", "image", _timm("test_resnet", 32)),
    Family("timm ConvNeXt", "timm", "convnext_atto", "image",
           _timm("convnext_atto", 32, dims=(8, 16, 24, 32), depths=(1, 1, 1, 1))),
    Family("timm EfficientNet", "timm", "test_efficientnet", "image", _timm("test_efficientnet", 32)),
    Family("timm Swin", "timm", "swin_tiny_patch4_window7_224", "image",
           _timm("swin_tiny_patch4_window7_224", 32, img_size=32, embed_dim=16, depths=(1, 1, 1, 1),
                 num_heads=(1, 1, 1, 1), window_size=2)),
    Family("timm DeiT", "timm", "deit_tiny_patch16_224", "image", _timm("deit_tiny_patch16_224", 32, **_TVIT)),
    Family("timm EVA", "timm", "eva02_tiny_patch14_224", "image",
           _timm("eva02_tiny_patch14_224", 28, img_size=28, patch_size=7, embed_dim=H, depth=L, num_heads=2)),
    Family("timm RegNet", "timm", "regnetx_002", "image", _timm("regnetx_002", 32)),
    Family("timm ViT-MAE", "timm", "vit_base_patch16_224.mae", "image",
           _timm("vit_base_patch16_224.mae", 32, global_pool="", **_TVIT)),
    # outside the list: a family no code names, with the usual layout
    Family("OLMo", "transformers", "OlmoForCausalLM", "text",
           _text("OlmoConfig", "OlmoForCausalLM", num_key_value_heads=2, **_LM), extra=True),
    Family("ELECTRA", "transformers", "ElectraModel", "text",
           _text("ElectraConfig", "ElectraModel", embedding_size=16, **_BERT), extra=True),
]
