"""Torch devices: one resolver for every part of actkit that takes a ``device`` argument.

CPU work in the estimators stays in numpy (:func:`is_accelerator` is False for ``"cpu"``);
any other torch device runs their torch kernels.
"""

from __future__ import annotations

from actkit.errors import ValidationError

__all__ = ["is_accelerator", "check_device", "resolve_device"]


def is_accelerator(device) -> bool:
    """True for a torch device other than the CPU (CPU work never imports torch)."""
    return str(device).split(":")[0] != "cpu"


def resolve_device(device):
    """``torch.device`` for ``device`` (None means CPU), or a one-line
    :class:`~actkit.errors.ValidationError`.

    Refuses a string torch does not know, a CUDA device on a machine without one, and
    device types other than cpu, cuda and mps."""
    import torch  # torch: ~1.2 s at import (measured); is_accelerator and check_device serve CPU work without it

    name = "cpu" if device is None else str(device)
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValidationError(f"unknown device {name!r} (use 'cpu', 'cuda' or 'cuda:N')") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValidationError(f"device {name!r} requested but torch sees no CUDA GPU here; use 'cpu'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValidationError(f"unsupported device {name!r} (use 'cpu' or 'cuda')")
    return dev


def check_device(device) -> None:
    """:func:`resolve_device`, free for the CPU (the estimators call it in ``fit``)."""
    if is_accelerator(device):
        resolve_device(device)
