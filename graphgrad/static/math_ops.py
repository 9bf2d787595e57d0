"""Layer ``static``: the math ops under TensorFlow's names, each one a call of the same
graphgrad op eager code uses (no second op set), made while a builder is active."""

from __future__ import annotations

import functools
import inspect
from numbers import Number

import graphgrad.ops as ops
from graphgrad.backend import to_dtype, xp
from graphgrad.graph import GraphBuilder, Symbol, symbol
from graphgrad.graph.random_node import DEFAULT_GRAPH_SEED, add_random
from graphgrad.ops import REGISTRY
from graphgrad.tensor.modes import current_mode

from .graph import get_default_graph
from .tensors import constant, convert_to_tensor, np_dtype

__all__ = ["add", "subtract", "multiply", "divide", "truediv", "matmul", "reduce_sum",
           "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "exp", "log", "sigmoid",
           "tanh", "relu", "square", "sqrt", "pow", "maximum", "minimum", "less", "greater",
           "less_equal", "greater_equal", "equal", "cast", "reshape", "shape", "transpose",
           "negative", "abs", "softmax", "where", "logical_and", "logical_or", "logical_not",
           "zeros", "ones", "zeros_like", "ones_like", "random_normal", "random_uniform",
           "truncated_normal", "set_random_seed", "random",
           "sin", "cos", "stop_gradient", "size", "squeeze", "expand_dims", "concat", "stack",
           "argmax", "nn"]


def _tensorize(a):
    if isinstance(a, Symbol) or isinstance(a, Number) or a is None:
        return a
    if isinstance(a, (list, tuple)) and any(isinstance(e, Symbol) for e in a):
        return a
    return convert_to_tensor(a)


_TENSOR_ARGS = {"x", "y", "a", "b", "input_tensor", "tensor", "logits", "condition", "input",
                "labels"}


def _op(fn):
    """Run ``fn`` with the default graph's builder active (or the one on top); its tensor
    arguments (by name) may be lists or arrays, made constants as TF does."""
    names = list(inspect.signature(fn).parameters)
    convert = [k for k, n in enumerate(names) if n in _TENSOR_ARGS]

    at = names.index("name") if "name" in names else None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = tuple(_tensorize(a) if k in convert else a for k, a in enumerate(args))
        for k in list(kwargs):
            if k in _TENSOR_ARGS:
                kwargs[k] = _tensorize(kwargs[k])
        name = kwargs.get("name") or (args[at] if at is not None and len(args) > at else None)
        if isinstance(current_mode(), GraphBuilder):
            return _named(fn, args, kwargs, name, current_mode().graph)
        with get_default_graph().building() as b:
            return _named(fn, args, kwargs, name, b.graph)
    return wrapper


def _named(fn, args: tuple, kwargs: dict, name: str | None, graph):
    """``fn(*args, **kwargs)`` with TF's ``name=``: the op's node, if this call made it,
    takes the name (made unique: "A", "A_1"...), so printed graphs, drawings and
    ``Session.log`` show it."""
    before = len(graph.nodes)
    out = fn(*args, **kwargs)
    node = getattr(out, "_node", None)
    if name and node is not None and node.kind == "call" and node in graph.nodes[before - 1:]:
        node.name = graph.unique_name(name)
    return out


def _dims(axis, x):
    if axis is None:
        return None
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


@_op
def add(x, y, name=None):
    return ops.add(x, y)


@_op
def subtract(x, y, name=None):
    return ops.sub(x, y)


@_op
def multiply(x, y, name=None):
    return ops.mul(x, y)


@_op
def divide(x, y, name=None):
    return ops.div(x, y)


truediv = divide


@_op
def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    if transpose_a:
        a = a.transpose(-1, -2)
    if transpose_b:
        b = b.transpose(-1, -2)
    return ops.matmul(a, b)


def _reduce(method):
    @_op
    def reduce(input_tensor, axis=None, keepdims=False, name=None):
        x = input_tensor
        dims = _dims(axis, x)
        if dims is None:
            return getattr(x, method)() if not keepdims else getattr(x, method)(
                dim=tuple(range(x.ndim)), keepdim=True)
        return getattr(x, method)(dim=dims, keepdim=keepdims)
    reduce.__name__ = "reduce_" + method
    return reduce


reduce_sum = _reduce("sum")
reduce_mean = _reduce("mean")
reduce_prod = _reduce("prod")


@_op
def reduce_max(input_tensor, axis=None, keepdims=False, name=None):
    return input_tensor.amax(dim=_dims(axis, input_tensor) if axis is not None else
                             tuple(range(input_tensor.ndim)), keepdim=keepdims)


@_op
def reduce_min(input_tensor, axis=None, keepdims=False, name=None):
    return input_tensor.amin(dim=_dims(axis, input_tensor) if axis is not None else
                             tuple(range(input_tensor.ndim)), keepdim=keepdims)


def _unary(method):
    @_op
    def unary(x, name=None):
        return getattr(x, method)()
    unary.__name__ = method
    return unary


exp = _unary("exp")
log = _unary("log")
sigmoid = _unary("sigmoid")
tanh = _unary("tanh")
relu = _unary("relu")
sqrt = _unary("sqrt")
negative = _unary("neg")
abs = _unary("abs")  # noqa: A001 - TF's name
sin = _unary("sin")
cos = _unary("cos")
logical_not = _unary("logical_not")


@_op
def stop_gradient(input, name=None):
    """The value of ``input``; ``gradients`` treat it as a constant (a ``Detach`` node)."""
    return ops.detach(input)


@_op
def square(x, name=None):
    return x * x


@_op
def pow(x, y, name=None):  # noqa: A001 - TF's name
    return x ** y


@_op
def maximum(x, y, name=None):
    return ops.maximum(x, y)


@_op
def minimum(x, y, name=None):
    return ops.minimum(x, y)


@_op
def less(x, y, name=None):
    return x < y


@_op
def greater(x, y, name=None):
    return x > y


@_op
def less_equal(x, y, name=None):
    return x <= y


@_op
def greater_equal(x, y, name=None):
    return x >= y


@_op
def equal(x, y, name=None):
    return x == y


@_op
def logical_and(x, y, name=None):
    return ops.logical_and(x, y)


@_op
def logical_or(x, y, name=None):
    return ops.logical_or(x, y)


@_op
def where(condition, x, y, name=None):
    return ops.where(condition, x, y)


@_op
def cast(x, dtype, name=None):
    return x.to(to_dtype(dtype))


@_op
def transpose(a, perm=None, name=None):
    perm = tuple(reversed(range(a.ndim))) if perm is None else tuple(perm)
    return a.permute(*perm)


@_op
def softmax(logits, axis=-1, name=None):
    return logits.softmax(dim=axis)


@_op
def squeeze(x, axis=None, name=None):
    return x.squeeze() if axis is None else x.squeeze(axis)


@_op
def expand_dims(x, axis, name=None):
    return x.unsqueeze(axis)


@_op
def concat(values, axis, name=None):
    return ops.cat([convert_to_tensor(v) for v in values], dim=axis)


@_op
def stack(values, axis=0, name=None):
    return ops.stack([convert_to_tensor(v) for v in values], dim=axis)


@_op
def argmax(input, axis=None, name=None):  # noqa: A002 - TF's name
    return input.argmax(dim=0 if axis is None else axis)


@_op
def shape(input, name=None, out_type=None):  # noqa: A002 - TF's name
    """The shape as an int64 vector known at run time (TF: int32 by default)."""
    return current_mode().shape_of(input)


@_op
def size(input, name=None):  # noqa: A002 - TF's name
    return shape(input).prod()


@_op
def reshape(tensor, shape, name=None):
    """``shape`` may hold Python ints, 0-d int tensors or be a 1-D int tensor: run-time
    dims (TF's Reshape takes its shape as a tensor)."""
    if isinstance(shape, Symbol):
        n = shape.shape[0] if shape.shape else None
        if n is None:
            raise ValueError(f"reshape: the shape tensor {shape!r} must have a known length")
        shape = [shape[i] for i in range(n)]
    dims = tuple(int(d) if isinstance(d, Number) else d for d in shape)
    if not any(isinstance(d, Symbol) for d in dims):
        return tensor.reshape(*dims)
    return REGISTRY["Reshape"].apply(tensor, shape=dims)


def zeros(shape, dtype=None, name=None) -> Symbol:
    return constant(xp.zeros(tuple(shape), np_dtype(dtype)), name=name or "zeros")


def ones(shape, dtype=None, name=None) -> Symbol:
    return constant(xp.ones(tuple(shape), np_dtype(dtype)), name=name or "ones")


@_op
def zeros_like(x, dtype=None, name=None):
    return x * 0 if dtype is None else cast(x * 0, dtype)


@_op
def ones_like(x, dtype=None, name=None):
    return x * 0 + 1 if dtype is None else cast(x * 0 + 1, dtype)


def _seed_pair(seed):
    """TF1's seeds: (graph seed, op seed), or None for "no seed" (the global generator).
    A graph seed alone derives the op seed from the graph's size; an op seed alone
    pairs with TF's default graph seed."""
    g = get_default_graph()
    if g.seed is None and seed is None:
        return None
    if seed is None:
        return (g.seed, len(g.ir.nodes))
    return (DEFAULT_GRAPH_SEED if g.seed is None else g.seed, int(seed))


def _dims_of(shape) -> list:
    """A shape as ints and 0-d int Symbols (a 1-D int Symbol is split into its dims)."""
    if isinstance(shape, Symbol):
        n = shape.shape[0] if shape.shape else None
        if n is None:
            raise ValueError(f"random: the shape tensor {shape!r} must have a known length")
        return [shape[i] for i in range(n)]
    if isinstance(shape, Number):
        return [int(shape)]
    return [d if isinstance(d, Symbol) else int(d) for d in shape]


def _random(dist: str, shape, dtype, params: dict, seed, name):
    b = current_mode()
    sym = symbol(add_random(b, dist, _dims_of(shape), np_dtype(dtype), params,
                            _seed_pair(seed), name))
    return sym


@_op
def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None, name=None) -> Symbol:
    """Normal samples, drawn afresh at every ``Session.run`` (a random node)."""
    if isinstance(mean, Number) and isinstance(stddev, Number):
        return _random("normal", shape, dtype, {"mean": float(mean), "stddev": float(stddev)},
                       seed, name or "random_normal")
    z = _random("normal", shape, dtype, {"mean": 0.0, "stddev": 1.0}, seed,
                name or "random_normal")
    return z * stddev + mean


@_op
def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None, name=None) -> Symbol:
    """Normal samples, those beyond two standard deviations drawn again."""
    z = _random("truncated_normal", shape, dtype, {"mean": 0.0, "stddev": 1.0}, seed,
                name or "truncated_normal")
    if isinstance(mean, Number) and isinstance(stddev, Number) and (mean, stddev) == (0, 1):
        return z
    return z * stddev + mean


@_op
def random_uniform(shape, minval=0, maxval=None, dtype=None, seed=None,
                   name=None) -> Symbol:
    """Uniform samples in ``[minval, maxval)``; an int dtype draws integers (TF1 then
    requires ``maxval``)."""
    dt = np_dtype(dtype)
    name = name or "random_uniform"
    if dt.kind in "iu":
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype tf.{dt.name}")
        if not (isinstance(minval, Number) and isinstance(maxval, Number)):
            raise TypeError("random_uniform: integer bounds must be Python numbers")
        if minval >= maxval:
            raise ValueError(f"Need minval < maxval: {minval} >= {maxval}")
        return _random("integers", shape, dt, {"minval": int(minval), "maxval": int(maxval)},
                       seed, name)
    maxval = 1 if maxval is None else maxval
    if isinstance(minval, Number) and isinstance(maxval, Number):
        return _random("uniform", shape, dt, {"minval": float(minval),
                                              "maxval": float(maxval)}, seed, name)
    u = _random("uniform", shape, dt, {"minval": 0.0, "maxval": 1.0}, seed, name)
    return u * (maxval - minval) + minval


def set_random_seed(seed) -> None:
    """The default graph's seed (TF1's ``tf.set_random_seed``): with it, unseeded random
    ops get reproducible sequences too."""
    get_default_graph().seed = None if seed is None else int(seed)


class random:  # noqa: N801 - the ``tf.random`` namespace
    normal = staticmethod(random_normal)
    uniform = staticmethod(random_uniform)
    truncated_normal = staticmethod(truncated_normal)
    set_random_seed = staticmethod(set_random_seed)
    set_seed = staticmethod(set_random_seed)


class nn:  # noqa: N801 - the ``tf.nn`` namespace
    relu = staticmethod(relu)
    sigmoid = staticmethod(sigmoid)
    tanh = staticmethod(tanh)
    softmax = staticmethod(softmax)

    @staticmethod
    @_op
    def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None):
        return -(labels * logits.log_softmax(dim=axis)).sum(dim=axis)

