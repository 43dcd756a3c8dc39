"""The adapter protocol shared by every model family.

An adapter owns a loaded model and knows how to turn a slice of :class:`Inputs` into the
keyword arguments of one forward pass. The driver (:mod:`extractors.extract`) does the rest
(hooks, pooling, rows, store), so every family behaves the same.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from actkit._versions import library_versions as _versions
from actkit.errors import ActkitError, InputError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Batch:
    """One forward pass worth of inputs.

    Attributes
    ----------
    kwargs : dict
        Keyword arguments of the model call (tensors already on the device).
    mask : torch.Tensor of shape (B, T), bool, or None
        Real (non-padding) token positions, text only.
    lengths : torch.Tensor of shape (B,), int64, or None
        Real tokens per sample, text only.
    size : int
        Number of samples B.
    keep : torch.Tensor of shape (B, T), bool, or None
        The token positions stored as per-token rows when they are not all the real ones
        (``skip_special_tokens``: the tokenizer's special tokens left out).
    """

    kwargs: dict
    size: int
    mask: torch.Tensor | None = None
    lengths: torch.Tensor | None = None
    keep: torch.Tensor | None = None


@dataclass
class Adapter(ABC):
    """A loaded model plus its preprocessing (abstract: one subclass per model family).

    Attributes
    ----------
    kind : {"text", "image"}
        Which inputs the model takes.
    model : torch.nn.Module
        In eval mode, on ``device``, in the compute dtype.
    name : str
        The model spec the user gave.
    device : torch.device
    info : dict
        Provenance: model class, revision, weights hash, library versions.
    """

    kind: str
    model: torch.nn.Module
    name: str
    device: torch.device
    info: dict = field(default_factory=dict)

    # -- preprocessing --------------------------------------------------------------
    @abstractmethod
    def preprocessing(self) -> dict:
        """JSON-serialisable description of the preprocessing (part of the inputs fingerprint)."""

    def prepare(self, inputs, max_length: int | None) -> None:
        """Preprocess what must be known before the store is created (text: tokenise all)."""

    def prepare_windows(self, inputs, context_length, max_tokens=None, progress=True) -> None:
        """Pack text into token windows (text models only)."""
        raise ActkitError(f"--context-length packs text into token windows; {self.name} takes {self.kind} inputs")

    def n_samples(self, inputs) -> int:
        """Samples (rows of a pooled layer) after :meth:`prepare`: inputs, or token windows."""
        return len(inputs)

    def lengths(self) -> np.ndarray | None:
        """Tokens per sample after :meth:`prepare` (text), ``None`` for images."""
        return None

    def record_inputs(self, inputs) -> dict | None:
        """What each sample was, after :meth:`prepare`, for the store's ``/inputs``
        (:func:`actkit.store.text_record` / :func:`actkit.store.image_record`); None: nothing
        to record."""
        return None

    def skip_special_tokens(self) -> None:
        """Leave the tokenizer's special tokens out of per-token rows (text models only)."""
        raise ActkitError(f"--skip-special-tokens leaves a tokenizer's special tokens out; {self.name} takes "
                          f"{self.kind} inputs")

    def kept_positions(self) -> list | None:
        """Per sample, the token positions stored as per-token rows when not all of them are
        (after :meth:`skip_special_tokens`), else None."""
        return None

    @abstractmethod
    def batch(self, inputs, start: int, stop: int) -> Batch:
        """Model inputs for samples ``start:stop``."""

    def batch_of(self, inputs, ids) -> Batch:
        """Model inputs for the samples ``ids`` (int array), in that order: a length-sorted
        batch (:mod:`extractors._batching`); text adapters only."""
        raise TypeError(f"{type(self).__name__} runs its samples in input order")

    @abstractmethod
    def dummy_batch(self) -> Batch:
        """A one-sample batch for layer discovery without user inputs."""

    def forward(self, batch: Batch):
        return self.model(**batch.kwargs)

    def for_inputs(self, kind: str) -> "Adapter":
        """The adapter that runs inputs of ``kind`` (``"text"`` / ``"image"``): this one, or
        the matching tower of a two-tower model (CLIP)."""
        if kind != self.kind:
            raise InputError(f"{self.name} takes {self.kind} inputs, not {kind}s")
        return self

    def map_layout(self, name: str, module: torch.nn.Module) -> str:
        """``"NCHW"`` or ``"NHWC"``: the axis order of a 4-d output of ``module``."""
        return "NCHW"

    # -- causal LM extras ----------------------------------------------------------
    def final_module(self) -> torch.nn.Module:
        """Module whose output is the final hidden state after the final norm."""
        raise ActkitError(
            f"--final-hidden needs a causal language model; {self.name} is not one"
        )

    def unembedding(self) -> np.ndarray:
        """Unembedding (lm_head) matrix, shape (vocab_size, hidden_size), float32."""
        raise ActkitError(f"--unembedding needs a causal language model; {self.name} is not one")


def sha256_file(path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def state_sha256(model: torch.nn.Module) -> str:
    """Hex sha256 over the model's state dict (names, shapes, dtypes and float32 bytes)."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().to("cpu")
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(str(t.dtype).encode())
        if t.is_floating_point():
            t = t.float()
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def library_versions() -> dict:
    """Versions of the libraries that shape the numbers (:func:`actkit._versions.library_versions`)."""
    return _versions(("actkit", "torch", "numpy", "transformers", "timm", "h5py"))
