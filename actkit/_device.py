"""Torch devices for the estimators: CPU work stays in numpy, other devices run torch kernels."""

from __future__ import annotations

__all__ = ["is_accelerator", "check_device"]


def is_accelerator(device) -> bool:
    """True for a torch device other than the CPU (CPU work never imports torch)."""
    return str(device).split(":")[0] != "cpu"


def check_device(device) -> None:
    """Refuse, with a one-line ``ValueError``, a device string torch does not know or a
    CUDA device on a machine without one."""
    if not is_accelerator(device):
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} requested but torch sees no CUDA GPU here")
