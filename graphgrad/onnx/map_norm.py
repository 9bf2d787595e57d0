"""Layer ``onnx``: batch norm in eval mode and layer norm exported as ONNX's
BatchNormalization and LayerNormalization. ``F.layer_norm`` is one op
(``NativeLayerNorm``) and maps directly; the patterns below find the norms written
as arithmetic (eval batch norm, or a layer norm a user composed).

graphgrad composes both norms of primitive ops (``nn.functional.normalization``):
``centered * rsqrt(var + eps)``, then ``* weight`` and ``+ bias``, where layer norm's
``centered = x - x.mean(dims)``, ``var = (centered * centered).mean(dims)`` over trailing
dims, and eval batch norm's ``centered = x - running_mean`` and ``var = running_var``
(per channel, known at export time). The ``Mul`` and ``Add`` mappings recognize that
pattern and emit the norm op; each affine step emits it again with the weight or bias
folded in, and the export prunes what no output reads (the primitive ops, the earlier
norm nodes). Anything that does not match exactly is exported as the arithmetic it is.
"""

from __future__ import annotations

from typing import NamedTuple

from graphgrad.backend import xp
from graphgrad.graph import Node

from .emitter import Emitter, Val
from .map_elementwise import _binary
from .mapping import onnx_mapping, out_dtype

__all__: list[str] = []


class _Norm(NamedTuple):
    kind: str            # "layer" or "batch"
    x: Val
    eps: float
    shape: tuple         # the parameters' shape: normalized_shape, or (channels,)
    mean: object = None  # batch norm: the running statistics, per channel
    var: object = None
    scale: object = None
    bias: object = None


def _call(node, name: str) -> bool:
    return isinstance(node, Node) and node.kind == "call" and node.op.__name__ == name


def _norms(em: Emitter) -> dict:
    return em.memo.setdefault("norms", {})  # exported value name -> _Norm


def _trailing(dims, rank: int) -> int | None:
    """-k when ``dims`` are the last k dims of a rank-``rank`` tensor, else None."""
    dims = sorted(d % rank for d in ((dims,) if isinstance(dims, int) else dims))
    k = len(dims)
    return -k if k and dims == list(range(rank - k, rank)) else None


def _known(em: Emitter, node) -> object:
    v = em.memo["values"].get(node) if isinstance(node, Node) else None
    return None if v is None else v.array


def _core(em: Emitter, node: Node) -> _Norm | None:
    """``centered * rsqrt(var + eps)`` of layer norm or of eval batch norm, or None."""
    if node.nargs != 2 or out_dtype(node).kind != "f":
        return None
    for centered, r in (node.inputs, node.inputs[::-1]):
        if not (_call(centered, "Sub") and _call(r, "Rsqrt") and _call(r.inputs[0], "Add")):
            continue
        var, eps = r.inputs[0].inputs[:2]
        if isinstance(var, (int, float)):
            var, eps = eps, var
        x, m = centered.inputs[:2]
        if not isinstance(eps, float) or not isinstance(x, Node):
            continue
        rank = len(x.spec.shape)
        xv = em.memo["values"][x]
        if xv.dtype != out_dtype(node):
            continue
        if (_call(m, "Mean") and m.inputs[0] is x and m.params.get("keepdim")
                and _call(var, "Mean") and var.params.get("keepdim")
                and var.params.get("dim") == m.params.get("dim")
                and _call(var.inputs[0], "Mul") and var.inputs[0].inputs[:2] == (centered,
                                                                                  centered)):
            axis = _trailing(m.params.get("dim"), rank)
            shape = x.spec.shape[axis:] if axis is not None else ()
            if shape and all(isinstance(e, int) for e in shape):
                return _Norm("layer", xv, eps, tuple(shape))
        mean, variance = _known(em, m), _known(em, var)
        channels = x.spec.shape[1] if rank >= 2 else None
        per_channel = (1, channels, *(1,) * (rank - 2))
        if (mean is not None and variance is not None and isinstance(channels, int)
                and mean.shape == per_channel and variance.shape == per_channel):
            return _Norm("batch", xv, eps, (channels,), mean.reshape(-1), variance.reshape(-1))
    return None


def _emit(em: Emitter, norm: _Norm, dtype) -> str:
    """The norm op for ``norm``; remembered so that a following affine step folds in."""
    if norm.kind == "layer":
        scale = xp.ones(norm.shape, dtype) if norm.scale is None else norm.scale
        out = em.op("LayerNormalization",
                    [norm.x.name, em.const(scale.astype(dtype), "ln_scale"),
                     "" if norm.bias is None else em.const(norm.bias.astype(dtype), "ln_bias")],
                    axis=-len(norm.shape), epsilon=norm.eps)
    else:
        c = norm.shape[0]
        scale = xp.ones(c, dtype) if norm.scale is None else norm.scale
        bias = xp.zeros(c, dtype) if norm.bias is None else norm.bias
        out = em.op("BatchNormalization",
                    [norm.x.name, em.const(scale.astype(dtype), "bn_scale"),
                     em.const(bias.astype(dtype), "bn_bias"),
                     em.const(norm.mean.astype(dtype), "bn_mean"),
                     em.const(norm.var.astype(dtype), "bn_var")], epsilon=norm.eps)
    _norms(em)[out] = norm
    return out


def _affine(em: Emitter, node: Node, args: list, what: str) -> _Norm | None:
    """A norm output times a weight (``what`` "scale") or plus a bias ("bias"), the
    weight known and shaped as the norm's parameters."""
    if node.nargs != 2:
        return None
    for a, b in (args[:2], args[1::-1]):
        norm = _norms(em).get(a.name) if isinstance(a, Val) else None
        if norm is None or not isinstance(b, Val) or b.array is None or norm.bias is not None:
            continue
        if ((what == "scale" and norm.scale is not None) or b.array.ndim > norm.x.rank
                or out_dtype(node) != norm.x.dtype):  # a broadcast or a promotion
            continue
        w = b.array
        while w.ndim and w.shape[0] == 1 and w.ndim > len(norm.shape):
            w = w[0]  # leading dims of size 1 broadcast away
        if norm.kind == "batch":
            ok = b.array.shape == (1, *norm.shape, *(1,) * (norm.x.rank - 2))
            w = b.array.reshape(-1)
        else:
            ok = w.shape == norm.shape
        if ok:
            return norm._replace(**{what: w})
    return None


@onnx_mapping("Mul")
def _mul(em: Emitter, node: Node, args: list) -> str:
    norm = _core(em, node) or _affine(em, node, args, "scale")
    return _binary(em, node, args) if norm is None else _emit(em, norm, out_dtype(node))


@onnx_mapping("Add")
def _add(em: Emitter, node: Node, args: list) -> str:
    norm = _affine(em, node, args, "bias")
    return _binary(em, node, args) if norm is None else _emit(em, norm, out_dtype(node))


@onnx_mapping("NativeLayerNorm")
def _native_layer_norm(em: Emitter, node: Node, args: list) -> str:
    """The fused layer-norm op (``ops.layer_norm``): LayerNormalization over its
    trailing ``normalized_shape`` dims (a missing weight is ones)."""
    dtype = out_dtype(node)
    shape = tuple(node.params["normalized_shape"])
    x, *affine = args[:node.nargs]
    scale = em.cast(affine[0], dtype) if affine else em.const(xp.ones(shape, dtype), "ln_scale")
    bias = em.cast(affine[1], dtype) if len(affine) > 1 else ""
    return em.op("LayerNormalization", [em.cast(x, dtype), scale, bias],
                 axis=-len(shape) if shape else -1, epsilon=node.params["eps"])
