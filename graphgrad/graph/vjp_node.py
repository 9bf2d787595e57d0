"""Layer ``graph``: the ``vjp`` node kind: an op's vjp rule run at run time, on the
concrete values.

Graph differentiation normally calls each vjp rule on Symbols, so the backward pass
becomes ordinary call nodes. A rule that reads a dim the graph does not know (a
placeholder of shape ``(None, 3)`` and ``mean``, which divides by the batch size)
cannot be built that way; for such a node ``grad`` emits one ``vjp`` node instead,
which runs the same rule when the shapes are known. (Its result is not differentiable
again: higher order needs static shapes.)
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value, set_grad_mode

__all__ = ["run_vjp_rule", "fit"]


def fit(ct, shape: tuple, dtype):
    """Reduce a cotangent to ``shape`` and ``dtype``: the one un-broadcast rule, on
    Symbols (static shapes) and tensors alike."""
    cs = ct.shape
    if shape is None or cs is None:
        return ct
    shape, cs = tuple(shape), tuple(cs)
    if cs != shape:
        lead = len(cs) - len(shape)
        dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                          if s == 1 and cs[lead + i] != 1)
        if dims:
            ct = ct.sum(dim=dims, keepdim=True)
        if tuple(ct.shape) != shape and None not in shape:
            ct = ct.reshape(shape)
    if xp.dtype(ct._array.dtype) != xp.dtype(dtype):
        ct = ct.to(xp.dtype(dtype))
    return ct


def _needing(t, needs: bool):
    if not isinstance(t, Value):
        return t
    c = Tensor.__new__(Tensor)
    Tensor.__init__(c, t._array)
    c._rg = needs  # what vjp rules read to skip cotangents nobody wants
    return c


def run_vjp_rule(params: dict, args: list) -> tuple:
    """Run the vjp rule described by a vjp node's ``params`` on concrete ``args``
    (g, out, then the op's tensor inputs); one cotangent per ``wrt`` position."""
    op, op_params = params["op"], params["op_params"]
    literals, wrt, n = params["literals"], params["wrt"], params["n"]
    g, out, rest = args[0], args[1], iter(args[2:])
    full = [literals[k] if k in literals else next(rest) for k in range(n)]
    inputs = [_needing(a, k in wrt) for k, a in enumerate(full)]
    prev = set_grad_mode(False)
    try:
        cts = op.vjp(g, out, *inputs, **op_params)
        res = []
        for k in wrt:
            a = full[k]
            ct = cts[k]
            if ct is None:
                res.append(Tensor(xp.zeros(a._array.shape, a._array.dtype)))
            else:
                if not isinstance(ct, Value):
                    ct = Tensor(xp.asarray(ct, a._array.dtype))
                res.append(fit(ct, a._array.shape, a._array.dtype))
    finally:
        set_grad_mode(prev)
    return tuple(res)
