"""Layer ``graph``: which ``random`` node stands for a draw that graphgrad's eager random
functions are making, so that the capture frontends record a draw as a node (fresh
samples on every run) instead of freezing the example's samples as a constant.

Every random tensor of graphgrad comes from ``tensor.creation.random_tensor(draw, shape,
dtype, requires_grad, generator)``, called by ``rand``/``randn``/``randint``, their
``*_like`` forms and ``nn.functional.dropout``. ``describe_draw(frame)`` reads a frame of
that function: the distribution from the ``draw`` function's NumPy method (``random``:
uniform on [0, 1), ``standard_normal``, ``integers`` with its bounds), the shape and the
dtype, and from the caller the tensor the shape follows (``input`` of the ``*_like``
functions and of dropout) or the sizes it was given (``size`` of ``rand(*size)``, which
a tracer may hold as traced ints). The node draws from graphgrad's default generator
with the same NumPy call, so after ``manual_seed(s)`` a captured function draws exactly
what the eager function draws. A draw from a user's ``Generator`` or one that requires
grad has no node (None): the frontends keep their old behaviour for it.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, NamedTuple

from graphgrad.tensor import Value
from graphgrad.tensor.creation import random_tensor

from .symbol import Symbol

__all__ = ["Draw", "describe_draw", "draw_frame"]

_RANDOM_TENSOR = random_tensor.__code__


class Draw(NamedTuple):
    """A draw as a random node's arguments (see ``graph.random_node.add_random``)."""

    dist: str            # "uniform", "normal" or "integers"
    params: dict         # the distribution's parameters
    shape: tuple         # ints (None: a Symbol's unknown dim)
    dtype: Any           # NumPy dtype of the samples
    like: Value | None   # the tensor whose shape the draw follows (rand_like, dropout)
    sizes: tuple | None  # the sizes as the caller gave them (possibly traced ints)
    caller: str          # the graphgrad function that draws (for messages)


def draw_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame of ``random_tensor`` at or above ``start`` (default: caller)."""
    frame = start if start is not None else sys._getframe(1)
    while frame is not None and frame.f_code is not _RANDOM_TENSOR:
        frame = frame.f_back
    return frame


def _closure(fn) -> dict:
    cells = fn.__closure__ or ()
    return {name: cell.cell_contents for name, cell in
            zip(fn.__code__.co_freevars, cells, strict=True)}


def _distribution(fn) -> tuple[str, dict] | None:
    names = getattr(getattr(fn, "__code__", None), "co_names", ())
    if names == ("random",):
        return "uniform", {"minval": 0.0, "maxval": 1.0}
    if names == ("standard_normal",):
        return "normal", {"mean": 0.0, "stddev": 1.0}
    if names == ("integers",):
        bounds = _closure(fn)
        try:
            return "integers", {"minval": int(bounds["low"]), "maxval": int(bounds["high"])}
        except (KeyError, TypeError, ValueError):
            return None
    return None


def _shape_of(t: Value) -> tuple:
    """A graph value's static shape (None: unknown dim), else the array's."""
    spec = getattr(getattr(t, "_node", None), "spec", None)
    if isinstance(t, Symbol) and spec is not None and spec.shape is not None:
        return tuple(spec.shape)
    return tuple(t._array.shape)


def _follows(known: tuple, shape: tuple) -> bool:
    """Whether ``shape`` (a Symbol's stand-in reads 1 for an unknown dim) is ``known``."""
    return len(known) == len(shape) and all(
        k is None or k == d for k, d in zip(known, shape, strict=True))


def describe_draw(frame: FrameType | None) -> Draw | None:
    """The random node for the draw ``frame`` (a frame of ``random_tensor``) is making, or
    None where a node cannot reproduce it."""
    if frame is None or frame.f_code is not _RANDOM_TENSOR:
        return None
    local = frame.f_locals
    if local.get("generator") is not None or local.get("requires_grad"):
        return None
    found = _distribution(local.get("draw"))
    if found is None:
        return None
    shape = tuple(None if d is None else int(d) for d in local["shape"])
    caller = frame.f_back
    outer = caller.f_locals if caller is not None else {}
    like = outer.get("input")
    if not isinstance(like, Value) or not _follows(_shape_of(like), shape):
        like = None
    sizes = outer.get("size")
    if isinstance(sizes, tuple) and len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if not isinstance(sizes, tuple) or len(sizes) != len(shape):
        sizes = None
    name = caller.f_code.co_name if caller is not None else "random_tensor"
    return Draw(found[0], found[1], shape, local["dtype"], like, sizes, name)
