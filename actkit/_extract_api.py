"""``actkit.extract``: the public entry point of extraction (imports ``extractors`` lazily)."""

from __future__ import annotations

import pathlib


def extract(
    model,
    inputs,
    out,
    *,
    layers,
    pool: str = "none",
    revision: str | None = None,
    checkpoint=None,
    batch_size: int = 32,
    device: str = "cpu",
    dtype: str = "float32",
    storage_dtype: str | None = None,
    max_length: int | None = None,
    max_samples: int | None = None,
    final_hidden: bool = False,
    unembedding: bool = False,
    overwrite: bool = False,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    compression: str | None = None,
    progress: bool = True,
    checkpoint_every: float = 5.0,
) -> pathlib.Path:
    """Extract layer activations of a pretrained model into an HDF5 store.

    One forward pass per batch captures every requested layer (by hooks on the modules) and
    stops after the deepest one. The store is written crash-safely: if the process dies, the
    identical call resumes where it stopped and ends with the same bytes as an uninterrupted
    run; the identical call on a finished store returns at once; a different call aimed at an
    existing store is refused unless ``overwrite=True``.

    Parameters
    ----------
    model : str
        A Hugging Face hub id (``"EleutherAI/pythia-70m"``), a local ``save_pretrained``
        directory, ``"timm:NAME"`` (``"timm:resnet18"``, ``"timm:vit_base_patch16_224.mae"``),
        ``"timm:local-dir:PATH"``, or a local timm folder (``config.json`` with
        ``"architecture"``).
    inputs : str or path
        ``.txt`` (one sample per line), ``.jsonl`` (``"text"`` field), a folder of images
        (recursive, sorted) or a uint8 ``.npy`` array of shape (N, H, W, 3).
    out : str or path
        The store to write (``.h5``).
    layers : str or sequence of str
        Dotted module paths from ``model.named_modules()`` (comma-separated in a string);
        ``"final_hidden"`` (causal LMs) is the final hidden state after the final norm.
        ``actkit layers MODEL`` lists them.
    pool : {"none", "mean", "last", "cls"}
        ``none``: one row per real token / ViT token / spatial position, index
        ``[sample, position]``; ``mean``: mean of those rows per sample; ``last``: the last
        real token; ``cls``: the first token. Pooled rows have index ``[sample, -1]``.
    revision : str, optional
        Hub revision (branch, tag or commit), e.g. ``"step143000"`` for Pythia.
    checkpoint : path, optional
        Weights for ``timm:NAME`` (``.safetensors``; pickle only with ``allow_pickle``).
    batch_size : int
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype : {"float32", "float16", "bfloat16"}
        Compute dtype.
    storage_dtype : {"float32", "float16"}, optional
        Default: ``dtype`` for float32/float16, float32 for bfloat16.
    max_length : int, optional
        Truncate texts to this many tokens.
    max_samples : int, optional
        Use only the first ``max_samples`` inputs.
    final_hidden : bool
        Also store the final hidden state (after the final norm) as layer ``final_hidden``.
    unembedding : bool
        Store the unembedding (lm_head) matrix, shape (vocab_size, hidden_size), as the
        store parameter ``unembedding``.
    overwrite : bool
        Replace an existing store made by a different call.
    trust_remote_code : bool
        Allow models whose code comes from their repository.
    allow_pickle : bool
        Allow pickle weight files (``.bin``, ``.pt``), which can run code when loaded.
    compression : {None, "gzip", "lzf"}
        HDF5 compression (slower writes; off by default).
    progress : bool
        Show a tqdm bar (samples/s and rows written) when on a terminal.
    checkpoint_every : float
        Seconds between resume checkpoints.

    Returns
    -------
    pathlib.Path
        The finished store; open it with :func:`actkit.open_store`.

    Raises
    ------
    actkit.errors.ActkitError
        Unknown model or layer, missing or unreadable inputs, unwritable output, a store
        made by a different call, ...

    Examples
    --------
    >>> import actkit  # doctest: +SKIP
    >>> path = actkit.extract("EleutherAI/pythia-70m", "texts.txt", "pythia.h5",
    ...                       layers=["gpt_neox.layers.3"], revision="step143000")
    >>> actkit.open_store(path)["gpt_neox.layers.3"].shape
    (n_tokens, 512)
    """
    from extractors.extract import extract as _extract

    return _extract(
        model, inputs, out, layers=layers, pool=pool, revision=revision, checkpoint=checkpoint,
        batch_size=batch_size, device=device, dtype=dtype, storage_dtype=storage_dtype,
        max_length=max_length, max_samples=max_samples, final_hidden=final_hidden,
        unembedding=unembedding, overwrite=overwrite, trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle, compression=compression, progress=progress,
        checkpoint_every=checkpoint_every,
    )
