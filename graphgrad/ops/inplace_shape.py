"""Layer ``ops``: in-place shape changes (``unsqueeze_``, ``squeeze_``, ``t_``,
``transpose_``, ``swapaxes_``, ``swapdims_``).

These write no values: the tensor becomes the view the out-of-place op makes of it (same
storage, new shape and strides) and, when the graph is recorded, takes that view's
history while its earlier self keeps the edges made before (as every in-place op does,
``ops.inplace``). Its version moves on by one, as PyTorch's.

Views graphgrad keeps of a tensor are replayed from their base's shape when the base is
written in place later, so a tensor that has views, or is one, cannot change its shape
under them: that case raises (PyTorch, whose views keep their own strides, allows it).
"""

from __future__ import annotations

from collections.abc import Callable

from graphgrad.tensor import Tensor, active_modes, is_grad_enabled
from graphgrad.tensor.views import bump_version, old_identity, rebase

from . import shape as S
from .inplace import check_allowed

__all__ = ["SHAPE_INPLACE_METHODS"]


def _in_place(name: str, view: Callable) -> Callable:
    def method(self: Tensor, *args, **kwargs) -> Tensor:
        if active_modes():
            raise NotImplementedError(f"graphgrad: {name} under a transform or a tracer is "
                                      f"not supported yet; use the out-of-place "
                                      f"{name[:-1]}")
        ext = self._extras
        if ext is not None and (ext.base is not None or ext.views):
            raise NotImplementedError(f"graphgrad: {name} on a tensor that is a view or has "
                                      f"views is not supported yet (clone() it first)")
        recording = is_grad_enabled() and self._requires_grad
        if recording:
            check_allowed(self)
            if self._version_counter is None:
                self._version_counter = [0]
            old = old_identity(self)
            result = view(old, *args, **kwargs)
            bump_version(self)
            rebase(self, result, old)
        else:  # (on a bare wrapper of the buffer: the view must not register as ours)
            result = view(Tensor._make(self._array), *args, **kwargs)
            bump_version(self)
        self._array = result._array
        return self
    method.__name__ = name
    method.__doc__ = f"``{name[:-1]}`` in place: the tensor takes the view's shape."
    return method


SHAPE_INPLACE_METHODS = {
    name + "_": _in_place(name + "_", getattr(S, name))
    for name in ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims")}
