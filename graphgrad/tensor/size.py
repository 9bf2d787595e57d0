"""Layer ``tensor``: ``Size``, the type of ``tensor.shape`` (PyTorch's ``torch.Size``)."""

from __future__ import annotations

__all__ = ["Size"]


class Size(tuple):
    """``tensor.shape``: a tuple that prints like ``torch.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"graphgrad.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    # slices and concatenations stay Sizes, as torch.Size's
    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return Size(out) if isinstance(i, slice) else out

    def __add__(self, other) -> Size:
        return Size(tuple.__add__(self, tuple(other)))

    def __radd__(self, other) -> Size:
        return Size(tuple(other) + tuple(self))

    def __mul__(self, n) -> Size:
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__

