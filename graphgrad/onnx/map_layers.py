"""Layer ``onnx``: mappings of the layer ops to ONNX's own operators: ``Convolution`` to
Conv or ConvTranspose, max pooling (``MaxPoolIndices`` then ``TakePlanes``) to MaxPool,
``AvgPool`` to AveragePool, ``LstmLayer``/``GruLayer``/``RnnLayer`` to LSTM/GRU/RNN and
``ScaledDotProductAttention`` to MatMul, Softmax and the mask.

The recurrent ops take the input projections ``xg`` (L, N, G*H) that the layer computed
with one GEMM, in PyTorch's gate order; ONNX's LSTM/GRU project the input themselves. So
when ``xg`` is ``F.linear`` of the layer's input with known parameters, that projection is
folded into the ONNX op (``W`` = ``w_ih``, the GEMM is pruned); otherwise ``W`` is the
permutation matrix that reorders ``xg``'s gates. Gates go in ONNX's order (i, o, f, c
for the LSTM, z, r, h for the GRU) in ``W``, ``R`` (``w_hh``) and the biases. An all-zero
initial state (the layer's default, traced as a constant at the traced batch size) is
left out, so the exported layer runs at any batch size.
"""

from __future__ import annotations

import math

from graphgrad.backend import xp
from graphgrad.graph import Node

from .emitter import Emitter, Val
from .errors import UnsupportedOperatorError
from .mapping import onnx_mapping, out_dtype

__all__: list[str] = []


@onnx_mapping("Convolution")
def _convolution(em: Emitter, node: Node, args: list) -> str:
    p = node.params
    dtype = out_dtype(node)
    weight_shape = node.inputs[1].spec.shape
    ins = [em.cast(a, dtype) for a in args[:node.nargs] if a is not None]
    attrs = dict(kernel_shape=[int(k) for k in weight_shape[2:]],
                 strides=list(p["stride"]), dilations=list(p["dilation"]),
                 pads=list(p["padding"]) * 2,  # all begins, then all ends
                 group=int(p["groups"]))
    if p["transposed"]:
        return em.op("ConvTranspose", ins, output_padding=list(p["output_padding"]), **attrs)
    return em.op("Conv", ins, **attrs)


def _pool_pads(em: Emitter, node: Node, name: str, dilation, exact: bool):
    """(pads, ceil_mode) for a pooling node. ONNX's shape rule for ``ceil_mode`` lacks
    PyTorch's "the last window starts inside the input" clause, so the last partial
    window becomes explicit end padding with ceil_mode 0 (the padding never wins a max
    nor, without count_include_pad, counts in an average); ``exact`` False: where that
    padding would count, ceil_mode stays, and a count ONNX's rule disagrees on is
    refused (onnx.checker would reject the file)."""
    p = node.params
    size = node.inputs[0].spec.shape[2:]
    begins, ends = list(p["padding"]), list(p["padding"])
    if not p["ceil_mode"]:
        return begins + ends, 0
    if not all(isinstance(e, int) for e in size):
        # known at run time only: onnxruntime's kernels count windows as PyTorch does
        # (with static input dims its shape inference may still count one more)
        return begins + ends, 1
    out = node.spec.shape[2:]
    extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - (e + 2 * q)) for o, s, d, k, e, q in
             zip(out, p["stride"], dilation, p["kernel_size"], size, p["padding"],
                 strict=True)]
    if exact or not any(extra):
        return begins + [q + x for q, x in zip(ends, extra, strict=True)], 0
    onnx_out = [-(-(e + 2 * q - d * (k - 1) - 1) // s) + 1 for e, q, d, k, s in
                zip(size, p["padding"], dilation, p["kernel_size"], p["stride"],
                    strict=True)]
    if onnx_out != list(out):
        raise UnsupportedOperatorError(name, em.opset, f"ceil_mode gives {list(out)} "
                                       f"windows here, ONNX's rule {onnx_out}.")
    return begins + ends, 1


def _max_pool_values(em: Emitter) -> dict:
    # the exported indices' name -> MaxPool's values output, for TakePlanes to reuse
    return em.memo.setdefault("max_pool_values", {})


@onnx_mapping("MaxPoolIndices")
def _max_pool_indices(em: Emitter, node: Node, args: list) -> str:
    p = node.params
    x: Val = args[0]
    pads, ceil_mode = _pool_pads(em, node, "MaxPool", p["dilation"], exact=True)
    values, flat = em.op("MaxPool", [x.name], outputs=2,
                         kernel_shape=list(p["kernel_size"]), strides=list(p["stride"]),
                         pads=pads, dilations=list(p["dilation"]), ceil_mode=ceil_mode)
    # ONNX numbers positions in the whole (N, C, ...) tensor, PyTorch within each (N, C)
    # plane: the remainder by the plane size converts (unused indices are pruned)
    size = node.inputs[0].spec.shape[2:]
    if all(isinstance(e, int) for e in size):
        plane = em.ints([math.prod(size)])
    else:  # sizes known only at run time (a reshape by the input's shape)
        plane = em.op("ReduceProd", [em.op("Shape", [x.name], start=2)], keepdims=1)
    indices = em.op("Mod", [flat, plane], fmod=0)
    _max_pool_values(em)[indices] = (x.name, values)
    return indices


@onnx_mapping("TakePlanes")
def _take_planes(em: Emitter, node: Node, args: list) -> str:
    x, indices = args[0], args[1]
    found = _max_pool_values(em).get(indices.name)
    if found is not None and found[0] == x.name:  # the values of that max pool
        return em.op("Identity", [found[1]])
    # any other read at flat plane positions: a gather along each flattened plane
    flat_x = em.op("Reshape", [x.name, em.ints([0, 0, -1])])
    flat_i = em.op("Reshape", [em.cast(indices, "int64"), em.ints([0, 0, -1])])
    taken = em.op("GatherElements", [flat_x, flat_i], axis=2)
    return em.op("Reshape", [taken, em.op("Shape", [indices.name])])


@onnx_mapping("AvgPool")
def _avg_pool(em: Emitter, node: Node, args: list) -> str:
    p = node.params
    if p["divisor_override"] is not None:
        raise UnsupportedOperatorError("AvgPool", em.opset, "avg_pool with divisor_override "
                                       "has no ONNX AveragePool equivalent.")
    ones = (1,) * len(p["kernel_size"])
    # padding added for ceil_mode would count in the divisor with count_include_pad
    pads, ceil_mode = _pool_pads(em, node, "AvgPool", ones,
                                 exact=not p["count_include_pad"])
    return em.op("AveragePool", [args[0].name], kernel_shape=list(p["kernel_size"]),
                 strides=list(p["stride"]), pads=pads, ceil_mode=ceil_mode,
                 count_include_pad=int(p["count_include_pad"]))


# ---- recurrent layers ------------------------------------------------------------------

def _gate_rows(order: list[int], hidden: int):
    """The row indices that put PyTorch's gate blocks in ``order``."""
    return xp.concatenate([xp.arange(g * hidden, (g + 1) * hidden) for g in order])


def _reordered(em: Emitter, v: Val, order: list[int], hidden: int, dtype) -> str:
    """``v`` (G*H, ...) with its gate blocks in ``order``, with a leading direction dim."""
    rows = _gate_rows(order, hidden)
    if v.array is not None:  # a parameter: reorder it now
        return em.const(v.array.astype(dtype)[rows][None], "recurrent")
    taken = em.op("Gather", [em.cast(v, dtype), em.ints(rows.tolist())], axis=0)
    return em.unsqueeze(taken, [0])


def _linear_under(em: Emitter, xg: Node):
    """(x, weight, bias or None) when ``xg`` is the layer's input projection
    ``F.linear(x, weight, bias)`` of a (L, N, H_in) ``x`` with known parameters (a
    Linear, possibly between the reshapes that flatten x for the GEMM), else None."""
    values = em.memo["values"]
    node = xg.inputs[0] if _is_call(xg, "Reshape") else xg
    if not _is_call(node, "Linear") or node.nargs not in (2, 3):
        return None
    x = node.inputs[0]
    if _is_call(x, "Reshape") and len(x.inputs[0].spec.shape) == 3:
        x = x.inputs[0]
    if not isinstance(x, Node) or len(x.spec.shape) != 3:
        return None
    w = values[node.inputs[1]].array if isinstance(node.inputs[1], Node) else None
    b = node.inputs[2] if node.nargs == 3 else None
    b = values[b].array if isinstance(b, Node) else None
    if w is None or (node.nargs == 3 and b is None):
        return None
    return values[x], w, b


def _is_call(node, name: str) -> bool:
    return isinstance(node, Node) and node.kind == "call" and node.op.__name__ == name


def _projection(em: Emitter, node: Node, xg: Val, order: list[int], hidden: int, dtype):
    """ONNX's (X, W, Wb): the layer's input and ``w_ih`` (gates reordered) when the input
    projection can be folded in; else ``xg`` itself through a permutation ``W``."""
    rows = _gate_rows(order, hidden)
    found = _linear_under(em, node.inputs[0])
    if found is not None and found[0].dtype == dtype:
        x, w, b = found
        wb = xp.zeros(len(rows), dtype) if b is None else b.astype(dtype)[rows]
        return x.name, em.const(w.astype(dtype)[rows][None], "w_ih"), wb
    permutation = xp.eye(len(rows), dtype=dtype)[rows][None]
    return em.cast(xg, dtype), em.const(permutation, "gates"), xp.zeros(len(rows), dtype)


def _initial_state(em: Emitter, v: Val, dtype) -> str:
    """An initial state (N, H) as (1, N, H); "" (ONNX's zeros) when it is known zero."""
    if v.array is not None and not v.array.any():
        return ""
    return em.unsqueeze(em.cast(v, dtype), [0])


def _check_lstm_users(node: Node, hidden: int, opset: int) -> None:
    """ONNX's LSTM gives every step's h but only the last step's c: the layer's output
    may be read as its h half, or at its last step; anything else reads a c it lacks."""
    steps = node.spec.shape[0]
    last = {-1} | ({steps - 1} if isinstance(steps, int) else set())
    for user in node.graph.users().get(node, []):
        spec = user.params.get("spec") if user.kind == "call" else None
        if user.kind == "call" and user.op.__name__ == "Getitem" and user.nargs == 1 and (
                spec == (Ellipsis, ("slice", None, hidden, None))
                or (len(spec) == 1 and isinstance(spec[0], int) and spec[0] in last)):
            continue
        raise UnsupportedOperatorError("LstmLayer", opset, "ONNX's LSTM returns the cell state "
                                       "of the last step only; this graph reads it at other "
                                       f"steps ({user.target_name} {user.name}).")


@onnx_mapping("LstmLayer")
def _lstm_layer(em: Emitter, node: Node, args: list) -> str:
    xg, h0, c0, w_hh = args[:4]
    dtype = out_dtype(node)
    hidden = int(node.inputs[3].spec.shape[-1])
    _check_lstm_users(node, hidden, em.opset)
    order = [0, 3, 1, 2]  # PyTorch (i, f, g, o) -> ONNX (i, o, f, c)
    x, w, wb = _projection(em, node, xg, order, hidden, dtype)
    bias = em.const(xp.concatenate([wb, xp.zeros_like(wb)])[None], "lstm_bias")
    ys = em.op("LSTM", [x, w, _reordered(em, w_hh, order, hidden, dtype), bias, "",
                        _initial_state(em, h0, dtype), _initial_state(em, c0, dtype)],
               outputs=3, hidden_size=hidden)
    h_seq = em.op("Squeeze", [ys[0], em.ints([1])])  # (L, 1, N, H) -> (L, N, H)
    # the c half holds the last c at every step: only the last step is read (checked)
    c_last = em.op("Squeeze", [ys[2], em.ints([0])])
    c_seq = em.op("Expand", [c_last, em.op("Shape", [h_seq])])
    return em.op("Concat", [h_seq, c_seq], axis=2)


@onnx_mapping("GruLayer")
def _gru_layer(em: Emitter, node: Node, args: list) -> str:
    xg, h0, w_hh = args[:3]
    b_hh = args[3] if node.nargs > 3 else None
    dtype = out_dtype(node)
    hidden = int(node.inputs[2].spec.shape[-1])
    order = [1, 0, 2]  # PyTorch (r, z, n) -> ONNX (z, r, h)
    x, w, wb = _projection(em, node, xg, order, hidden, dtype)
    # B = [Wb, Rb]; Rb = b_hh stays inside the reset gate (linear_before_reset=1)
    if b_hh is None:
        bias = em.const(xp.concatenate([wb, xp.zeros_like(wb)])[None], "gru_bias")
    else:
        bias = em.op("Concat", [em.const(wb[None], "gru_wb"),
                                _reordered(em, b_hh, order, hidden, dtype)], axis=1)
    y = em.op("GRU", [x, w, _reordered(em, w_hh, order, hidden, dtype), bias, "",
                      _initial_state(em, h0, dtype)], hidden_size=hidden,
              linear_before_reset=1)
    return em.op("Squeeze", [y, em.ints([1])])


@onnx_mapping("RnnLayer")
def _rnn_layer(em: Emitter, node: Node, args: list) -> str:
    xg, h0, w_hh = args[:3]
    dtype = out_dtype(node)
    hidden = int(node.inputs[2].spec.shape[-1])
    x, w, wb = _projection(em, node, xg, [0], hidden, dtype)
    # xg carries both biases (outside the activation): B = [Wb, 0]
    bias = em.const(xp.concatenate([wb, xp.zeros_like(wb)])[None], "rnn_bias")
    act = {"tanh": "Tanh", "relu": "Relu"}[node.params["nonlinearity"]]
    y = em.op("RNN", [x, w, _reordered(em, w_hh, [0], hidden, dtype), bias, "",
                      _initial_state(em, h0, dtype)], hidden_size=hidden, activations=[act])
    return em.op("Squeeze", [y, em.ints([1])])


# ---- attention -------------------------------------------------------------------------

@onnx_mapping("ScaledDotProductAttention")
def _attention(em: Emitter, node: Node, args: list) -> str:
    q, k, v = args[:3]
    p = node.params
    dropout = p.get("dropout_p", 0.0) > 0.0
    mask = args[3] if node.nargs > 3 + dropout else None
    dtype = out_dtype(node)
    perm = list(range(k.rank))
    perm[-2:] = perm[-1], perm[-2]
    kt = em.op("Transpose", [em.cast(k, dtype)], perm=perm)
    scores = em.op("Mul", [em.op("MatMul", [em.cast(q, dtype), kt]),
                           em.cast(p["scale"], dtype)])
    if p["is_causal"]:  # key j <= query i: the lower triangle of the (L, S) scores'
        # shape, built at run time so that the sequence lengths may be dynamic axes
        sizes = em.op("Slice", [em.op("Shape", [scores]), em.ints([-2]),
                                em.ints([2**62])])
        ones = em.op("ConstantOfShape", [sizes],
                     value=em.onnx.numpy_helper.from_array(xp.ones(1, xp.float32)))
        keep = em.op("Cast", [em.op("Trilu", [ones], upper=0)],
                     to=em.onnx.TensorProto.BOOL)
        scores = em.op("Where", [keep, scores, em.cast(float("-inf"), dtype)])
    if mask is not None:
        if mask.dtype.kind == "b":
            scores = em.op("Where", [mask.name, scores, em.cast(float("-inf"), dtype)])
        else:
            scores = em.op("Add", [scores, em.cast(mask, dtype)])
    weights = em.op("Softmax", [scores], axis=-1)
    if dropout:  # the keep-mask drawn at export: kept weights scaled by 1/(1-p)
        keep = em.cast(args[node.nargs - 1], dtype)
        factor = 0.0 if p["dropout_p"] >= 1.0 else 1.0 / (1.0 - p["dropout_p"])
        weights = em.op("Mul", [weights, em.op("Mul", [keep, em.cast(factor, dtype)])])
    out = em.op("MatMul", [weights, em.cast(v, dtype)])
    if not p.get("need_weights"):
        return out
    # the op's one buffer: the output, then the weights, flattened
    flat = [em.op("Reshape", [t, em.ints([-1])]) for t in (out, weights)]
    return em.op("Concat", flat, axis=0)


# ---- a linear layer and its relu as one op -------------------------------------------

@onnx_mapping("AddmmActivation")
def _addmm_activation(em: Emitter, node: Node, args: list) -> str:
    """``relu(x @ w.T + b)`` (``ops.addmm_activation``): Gemm, then Relu."""
    from .map_reduce import _linear
    return em.op("Relu", [_linear(em, node, args)])
