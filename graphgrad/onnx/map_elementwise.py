"""Layer ``onnx``: mappings of elementwise ops: arithmetic, comparisons, ``where``,
activations and other unary functions, casts."""

from __future__ import annotations

import math

from graphgrad.graph import Node

from .emitter import Emitter, Val
from .mapping import onnx_mapping, out_dtype

__all__: list[str] = []

_BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Pow": "Pow", "Maximum": "Max",
           "Minimum": "Min", "BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr",
           "BitwiseXor": "BitwiseXor"}
_LOGICAL = {"LogicalAnd": "And", "LogicalOr": "Or", "LogicalXor": "Xor"}
_COMPARE = {"Eq": "Equal", "Lt": "Less", "Le": "LessOrEqual", "Gt": "Greater",
            "Ge": "GreaterOrEqual"}
_UNARY = {"Neg": "Neg", "Abs": "Abs", "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt",
          "Sin": "Sin", "Cos": "Cos", "Tan": "Tan", "Tanh": "Tanh", "Sigmoid": "Sigmoid",
          "Relu": "Relu", "Erf": "Erf", "Floor": "Floor", "Ceil": "Ceil",
          "Reciprocal": "Reciprocal", "Sign": "Sign", "Sinh": "Sinh", "Cosh": "Cosh",
          "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Asinh": "Asinh", "Acosh": "Acosh",
          "Atanh": "Atanh", "Isnan": "IsNaN", "BitwiseNot": "BitwiseNot",
          "Detach": "Identity", "Clone": "Identity"}


def _operands(em: Emitter, node: Node, args: list, dtype=None) -> list[str]:
    dtype = out_dtype(node) if dtype is None else dtype
    return [em.cast(a, dtype) for a in args[:node.nargs]]


@onnx_mapping(*_BINARY)
def _binary(em: Emitter, node: Node, args: list) -> str:
    return em.op(_BINARY[node.op.__name__], _operands(em, node, args))


@onnx_mapping("Div")
def _div(em: Emitter, node: Node, args: list) -> str:
    mode = node.params.get("rounding_mode")
    if mode is None:
        return em.op("Div", _operands(em, node, args))
    if mode == "floor":
        return _floor_divide(em, node, args)
    a, b = _operands(em, node, args)  # "trunc"
    if out_dtype(node).kind in "iu":
        return em.op("Div", [a, b])  # integer Div truncates
    q = em.op("Div", [a, b])
    return em.op("Where", [em.op("Less", [q, em.cast(0, out_dtype(node))]),
                           em.op("Ceil", [q]), em.op("Floor", [q])])


@onnx_mapping("FloorDivide")
def _floor_divide(em: Emitter, node: Node, args: list) -> str:
    a, b = _operands(em, node, args)
    if out_dtype(node).kind in "iu":
        # a - (a mod b) is a multiple of b (Mod with fmod=0 takes b's sign, as Python's
        # %), so the truncating integer Div is exact and gives the floor
        return em.op("Div", [em.op("Sub", [a, em.op("Mod", [a, b], fmod=0)]), b])
    return em.op("Floor", [em.op("Div", [a, b])])


@onnx_mapping("Remainder")
def _remainder(em: Emitter, node: Node, args: list) -> str:
    a, b = _operands(em, node, args)
    if out_dtype(node).kind in "iu":
        return em.op("Mod", [a, b], fmod=0)
    return em.op("Sub", [a, em.op("Mul", [em.op("Floor", [em.op("Div", [a, b])]), b])])


@onnx_mapping("Fmod")
def _fmod(em: Emitter, node: Node, args: list) -> str:
    return em.op("Mod", _operands(em, node, args), fmod=1)


@onnx_mapping(*_COMPARE, "Ne")
def _compare(em: Emitter, node: Node, args: list) -> str:
    operands = _operands(em, node, args, em.promoted(args[:node.nargs]))
    if node.op.__name__ == "Ne":
        return em.op("Not", [em.op("Equal", operands)])
    return em.op(_COMPARE[node.op.__name__], operands)


@onnx_mapping(*_LOGICAL)
def _logical(em: Emitter, node: Node, args: list) -> str:
    return em.op(_LOGICAL[node.op.__name__], _operands(em, node, args, "bool"))


@onnx_mapping("LogicalNot")
def _logical_not(em: Emitter, node: Node, args: list) -> str:
    return em.op("Not", [em.cast(args[0], "bool")])


@onnx_mapping("Where")
def _where(em: Emitter, node: Node, args: list) -> str:
    cond, a, b = args[:3]
    return em.op("Where", [em.cast(cond, "bool"), em.cast(a, out_dtype(node)),
                           em.cast(b, out_dtype(node))])


@onnx_mapping(*_UNARY)
def _unary(em: Emitter, node: Node, args: list) -> str:
    dtype = "bool" if node.op.__name__ == "Isnan" else out_dtype(node)
    x = em.cast(args[0], args[0].dtype if node.op.__name__ == "Isnan" else dtype)
    return em.op(_UNARY[node.op.__name__], [x])


@onnx_mapping("Isinf")
def _isinf(em: Emitter, node: Node, args: list) -> str:
    return em.op("IsInf", [args[0].name])


@onnx_mapping("Rsqrt")
def _rsqrt(em: Emitter, node: Node, args: list) -> str:
    return em.op("Reciprocal", [em.op("Sqrt", [em.cast(args[0], out_dtype(node))])])


@onnx_mapping("Log1p", "Expm1")
def _log1p_expm1(em: Emitter, node: Node, args: list) -> str:
    x = em.cast(args[0], out_dtype(node))
    one = em.cast(1, out_dtype(node))
    if node.op.__name__ == "Log1p":
        return em.op("Log", [em.op("Add", [x, one])])
    return em.op("Sub", [em.op("Exp", [x]), one])


@onnx_mapping("Log2", "Log10")
def _log_base(em: Emitter, node: Node, args: list) -> str:
    x = em.cast(args[0], out_dtype(node))
    base = 2.0 if node.op.__name__ == "Log2" else 10.0
    return em.op("Div", [em.op("Log", [x]), em.cast(math.log(base), out_dtype(node))])


@onnx_mapping("Exp2")
def _exp2(em: Emitter, node: Node, args: list) -> str:
    return em.op("Pow", [em.cast(2.0, out_dtype(node)), em.cast(args[0], out_dtype(node))])


@onnx_mapping("Round")
def _round(em: Emitter, node: Node, args: list) -> str:
    decimals = node.params.get("decimals", 0)
    x = em.cast(args[0], out_dtype(node))
    if not decimals:
        return em.op("Round", [x])  # half to even, as torch.round
    scale = em.cast(10.0 ** decimals, out_dtype(node))
    return em.op("Div", [em.op("Round", [em.op("Mul", [x, scale])]), scale])


@onnx_mapping("Gelu")
def _gelu(em: Emitter, node: Node, args: list) -> str:
    approximate = node.params.get("approximate", "none")
    dtype = out_dtype(node)
    x = em.cast(args[0], dtype)
    if em.opset >= 20:  # Gelu is an ONNX op from opset 20
        return em.op("Gelu", [x], approximate=approximate)
    half_x = em.op("Mul", [x, em.cast(0.5, dtype)])
    if approximate == "tanh":
        cube = em.op("Mul", [em.op("Mul", [x, x]), x])
        inner = em.op("Add", [x, em.op("Mul", [cube, em.cast(0.044715, dtype)])])
        t = em.op("Tanh", [em.op("Mul", [inner, em.cast(math.sqrt(2 / math.pi), dtype)])])
    else:
        t = em.op("Erf", [em.op("Div", [x, em.cast(math.sqrt(2.0), dtype)])])
    return em.op("Mul", [half_x, em.op("Add", [t, em.cast(1.0, dtype)])])


@onnx_mapping("Softplus")
def _softplus(em: Emitter, node: Node, args: list) -> str:
    dtype = out_dtype(node)
    beta, threshold = node.params.get("beta", 1.0), node.params.get("threshold", 20.0)
    x = em.cast(args[0], dtype)
    bx = em.op("Mul", [x, em.cast(beta, dtype)])
    soft = em.op("Div", [em.op("Softplus", [bx]), em.cast(beta, dtype)])
    return em.op("Where", [em.op("Greater", [bx, em.cast(threshold, dtype)]), x, soft])


@onnx_mapping("Clamp")
def _clamp(em: Emitter, node: Node, args: list) -> str:
    dtype = out_dtype(node)
    lo, hi = node.params.get("min"), node.params.get("max")
    x = em.cast(args[0], dtype)
    return em.op("Clip", [x, "" if lo is None else em.cast(lo, dtype),
                          "" if hi is None else em.cast(hi, dtype)])


@onnx_mapping("Cast")
def _cast(em: Emitter, node: Node, args: list) -> str:
    v = args[0]
    if isinstance(v, Val) and v.dtype == out_dtype(node):
        return em.op("Identity", [v.name])
    return em.cast(v, out_dtype(node))

