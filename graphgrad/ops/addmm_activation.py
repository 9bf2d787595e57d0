"""Layer ``ops``: ``relu(input @ weight.T + bias)`` as one op, PyTorch's
``_addmm_activation`` (its Transformer layers' fast path): a feed-forward block's first
layer and its activation.

As two ops the linear layer's output stays alive until backward only because the relu
node holds it as its input (neither rule reads it): for a Transformer layer the largest
activation, (rows, dim_feedforward). Here the relu is applied in place on the product's
buffer and the op keeps what its rules read: the input, the weight and its output (the
relu's mask). The rules are Linear's composed with the relu's.
"""

from __future__ import annotations

from .base import Op, Spec
from .compare import Gt
from .arithmetic import Mul
from .linalg import Linear
from .unary import Relu, relu_array

__all__: list[str] = []


class AddmmActivation(Op):
    """``relu(x @ w.T + b)`` for x (N, in), w (out, in) and an optional bias (out,)."""

    saves_output = True  # the relu's mask
    saves_inputs = Linear.saves_inputs

    @staticmethod
    def forward(x, w, b=None):
        out = Linear.forward(x, w, b)
        return relu_array(out, out=out)

    @staticmethod
    def vjp(g, out, x, w, b=None):
        return Linear.vjp(Mul.apply(g, Gt.apply(out, 0)), out, x, w, b)

    @staticmethod
    def jvp(dots, out, x, w, b=None):
        return Mul.apply(Linear.jvp(dots, out, x, w, b), Gt.apply(out, 0))

    @staticmethod
    def taylor(series, out, x, w, b=None):
        # relu is linear away from its kink: every coefficient of the product is masked
        # (Relu's own rule)
        mask = Gt.apply(out, 0)
        return [None if t is None else Mul.apply(t, mask)
                for t in Linear.taylor(series, out, x, w, b)]

    @classmethod
    def batch(cls, vals, bdims):
        out, bdim = Linear.batch(vals, bdims)
        return Relu.apply(out), bdim

    @classmethod
    def infer(cls, x, w, b=None) -> Spec:
        return Linear.infer(x, w, b)


def linear_relu(input, weight, bias=None):
    """``relu(F.linear(input, weight, bias))`` for a weight (out, in), a bias (out,) or
    None and an input (..., in) of real floats: the rows of every leading dim as one
    matrix (as ``F.linear``), one op."""
    args = (weight,) if bias is None else (weight, bias)
    if input.ndim == 2:
        return AddmmActivation.apply(input, *args)
    rows = input.reshape(-1, input.shape[-1])
    return AddmmActivation.apply(rows, *args).reshape(*input.shape[:-1], weight.shape[0])
