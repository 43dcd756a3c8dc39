"""Model adapters that turn checkpoints into activation stores (installed as ``actkit.extractors``).

The folder ``extractors/`` sits at the top of the repository; setuptools' ``package-dir``
installs it as :mod:`actkit.extractors`.

This package is the only place that imports ``transformers`` and ``timm``; it writes
through :mod:`actkit.store` and nothing on the analysis side imports it. The entry point
is :func:`actkit.extractors.extract.extract` (exposed as :func:`actkit.extract`), and
:func:`actkit.extractors.layers.list_layers` (exposed as :func:`actkit.list_layers`).

Modules
-------
registry      model spec string -> adapter (transformers hub id / local dir, ``timm:NAME``)
hf_text       causal / masked language models (GPT-NeoX / Pythia, ...)
hf_vision     ViT and ViTMAE (ordered noise: every patch, in patch order)
timm_vision   timm models (resnet*, vit_*, MAE-pretrained ViTs)
_hooks        capture by dotted module path, stop the forward after the deepest layer
inputs        text files, jsonl, image folders, uint8 ``.npy`` arrays; inputs fingerprint
hf_datasets   Hugging Face datasets: save_to_disk folders, parquet/arrow files, hf:NAME
windows       token windows: the text stream packed into exactly-L windows
distributed   torchrun: one shard per rank, rank 0 writes the virtual-dataset store
extract       the driver: row counts up front, batching, resume, progress
_options      pooling, dtype and token-window options, the output path
_plan         layer plans: module outputs -> store rows (pooling)
_buffer       rows buffered per layer into large appends
layers        list_layers: every module with its output shape
record        record_inputs: the inputs of a store that did not record them, read again
"""



def __getattr__(name):
    """``actkit.extractors.record_inputs`` and ``decoded_text``, imported when first used (they
    load a model or a tokenizer)."""
    if name in ("record_inputs", "decoded_text"):
        from . import record  # transformers and torch: only when it is used

        return getattr(record, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
