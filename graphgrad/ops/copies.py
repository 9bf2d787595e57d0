"""Layer ``ops``: the copying ops of one tensor: a cast to another dtype, a clone, and
the stop-gradient view ``detach``."""

from __future__ import annotations

from graphgrad.backend import to_dtype, xp

from .base import Spec
from .elementwise import Elementwise
from . import taylor as ts

__all__ = ["cast", "clone", "detach"]


class Cast(Elementwise):
    """``tensor.to(dtype)``; differentiable between floating dtypes."""

    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, dtype):
        a = xp.asarray(a)
        if a.dtype.kind in "fc" and xp.dtype(dtype).kind in "iu":
            with xp.errstate(invalid="ignore"):  # NaN and inf become INT_MIN silently, as
                return a.astype(dtype)            # in PyTorch's casts
        return a.astype(dtype)

    @staticmethod
    def holomorphic(*, dtype) -> bool:
        """A cast keeps the analytic value only between complex dtypes."""
        return xp.dtype(dtype).kind == "c"

    @staticmethod
    def vjp(g, out, a, *, dtype):
        return (g.to(a.dtype),)

    @staticmethod
    def jvp(dots, out, a, *, dtype):
        return dots[0].to(out.dtype)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def infer(cls, a, *, dtype) -> Spec:
        return Spec(a.shape, xp.dtype(dtype))


class Clone(Elementwise):
    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, contiguous=False):
        # clone keeps the input's layout (as PyTorch's preserve_format); contiguous() asks
        # for row-major
        return xp.array(a, copy=True, order="C" if contiguous else "K")

    @staticmethod
    def vjp(g, out, a, **params):
        return (g,)

    @staticmethod
    def jvp(dots, out, a, **params):
        return dots[0]

    taylor = classmethod(ts.linear_taylor)


class Detach(Elementwise):
    """Stop-gradient: the value itself, cut off from differentiation (``torch.detach``).
    Eager ``Tensor.detach()`` never dispatches (it makes a leaf directly, which is faster);
    the capture frontends record this op so that a graph can say "no gradient here"."""

    differentiable = False  # results never require grad: that is the whole op
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a):
        return a.view()  # shares memory with the input, as Tensor.detach() does

    @staticmethod
    def vjp(g, out, a):
        return (None,)

    @staticmethod
    def jvp(dots, out, a):
        return None


def clone(input):
    """Elementwise ``clone`` (op ``Clone``)."""
    return Clone.apply(input)


def detach(input):
    """``torch.detach(input)``: the op ``Detach`` (no gradient flows through it)."""
    return Detach.apply(input)


def cast(input, dtype):
    """``input.to(dtype)``; returns ``input`` itself when the dtype already matches."""
    np_dtype = to_dtype(dtype).np
    if input._array.dtype == np_dtype:
        return input
    return Cast.apply(input, dtype=np_dtype)
