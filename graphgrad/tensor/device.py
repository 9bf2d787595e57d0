"""Layer ``tensor``: ``graphgrad.device`` and ``graphgrad.cuda``, so that the first lines of
most PyTorch scripts (``device = torch.device("cuda" if torch.cuda.is_available() else
"cpu")``, ``model.to(device)``, ``x.to(device)``) run. graphgrad computes on the CPU only:
a CUDA device can be named, as in a PyTorch build without CUDA, but not used.

A ``device`` is a ``str`` (``"cpu"``, ``"cuda:1"``) with PyTorch's ``type``, ``index`` and
``repr``, so every place that takes a device string takes it too (unlike PyTorch it also
compares equal to its string)."""

from __future__ import annotations

from types import SimpleNamespace

__all__ = ["device", "cuda", "check_device"]

_TYPES = ("cpu", "cuda", "mps", "meta", "xpu")


class device(str):  # noqa: N801 - PyTorch's name
    """``device("cpu")``, ``device("cuda:1")``, ``device("cuda", 0)``."""

    __slots__ = ()

    def __new__(cls, type: str, index: int | None = None) -> device:  # noqa: A002
        kind, _, num = str(type).partition(":")
        if kind not in _TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of "
                               f"device string: {type}")
        if num and index is not None:
            raise RuntimeError(f"type (string) must not include an index because index was "
                               f"passed explicitly: {type}")
        if index is not None:
            num = str(int(index))
        return super().__new__(cls, f"{kind}:{num}" if num else kind)

    @property
    def type(self) -> str:
        return self.partition(":")[0]

    @property
    def index(self) -> int | None:
        num = self.partition(":")[2]
        return int(num) if num else None

    def __repr__(self) -> str:
        index = self.index
        return f"device(type='{self.type}'" + (f", index={index})" if index is not None else ")")


def check_device(d) -> None:
    """Accept the CPU (``None``, ``"cpu"``, ``device("cpu")``); refuse other devices as a
    CPU-only PyTorch does, so nothing is silently made somewhere else than asked."""
    if d is None:
        return
    kind = device(d).type if isinstance(d, str) else None
    if kind == "cpu":
        return
    if kind == "cuda":
        _not_compiled()
    if kind == "meta":
        raise NotImplementedError("graphgrad has no meta (shape-only) tensors")
    raise RuntimeError(f"graphgrad runs on the CPU only; device {str(d)!r} is not available")


def _not_compiled(*args, **kwargs):
    raise AssertionError("Torch not compiled with CUDA enabled (graphgrad runs on the CPU only)")


def _no_op(*args, **kwargs) -> None:
    return None


# torch.cuda of a build without CUDA: nothing is available; seeding is a no-op there too
cuda = SimpleNamespace(
    is_available=lambda: False, device_count=lambda: 0, is_initialized=lambda: False,
    manual_seed=_no_op, manual_seed_all=_no_op, empty_cache=_no_op,
    synchronize=_not_compiled, current_device=_not_compiled)
