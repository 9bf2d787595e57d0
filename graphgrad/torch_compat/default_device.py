"""Layer ``torch_compat``: ``torch.set_default_device`` / ``torch.get_default_device``.
graphgrad computes on the CPU only, so the default device is always the CPU. Naming
another one raises at once: a CPU-only PyTorch build accepts ``"cuda"`` here and raises
AssertionError "Torch not compiled with CUDA enabled" at the next tensor it makes;
graphgrad cannot record a CUDA default and honour it later, so it raises that error
now rather than ignore the request."""

from __future__ import annotations

from graphgrad.tensor.device import check_device, device

__all__ = ["set_default_device", "get_default_device"]


def set_default_device(device_) -> None:  # noqa: ANN001 - str, device or None
    """Accept ``None`` (reset), ``"cpu"`` or ``device("cpu")``; raise for any other."""
    check_device(device_)


def get_default_device() -> device:
    return device("cpu")
