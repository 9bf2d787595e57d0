"""Layer ``ops``: the ``Op`` base class, the op registry, and the shared shape rules.

An op is one class with, side by side:

* ``forward(*arrays, **params)``: the computation on arrays (the only place that
  touches NumPy);
* ``vjp(g, out, *inputs, **params)``: one cotangent per input (``None`` for none),
  written in graphgrad ops so that the backward pass is itself a graph and can be
  differentiated again. The engine reduces each cotangent to its input's shape;
  no rule un-broadcasts for itself;
* ``infer(*specs, **params)``: the output's shape and dtype without computing it;
* ``jvp`` and ``batch``: the forward-mode and vmap rules, added by those layers' issues
  in this same class (None until then).

Data are positional; parameters are keyword-only and hashable. Subclassing registers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from graphgrad.backend import from_numpy_dtype, stand_in, xp
from graphgrad.tensor import Value, dispatch

__all__ = ["Op", "REGISTRY", "Spec", "spec_of", "broadcast_shapes", "NO_PARAMS", "fmt_shape",
           "saved_inputs"]

REGISTRY: dict[str, type[Op]] = {}
NO_PARAMS: dict = {}  # shared, never mutated: the params of every op call without any


class Spec(NamedTuple):
    """What a shape rule sees of a tensor: its shape (a dim may be None: unknown) and
    its NumPy dtype."""

    shape: tuple
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)


def spec_of(a) -> Spec | Any:
    """The Spec of a tensor or array; Python scalars pass through (they are weakly typed)."""
    if isinstance(a, Value):
        return Spec(a._array.shape, a._array.dtype)
    if isinstance(a, Spec):
        return a
    if isinstance(a, xp.ndarray):
        return Spec(a.shape, a.dtype)
    return a


def fmt_shape(shape) -> str:
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + (
        ",)" if len(shape) == 1 else ")")


def broadcast_shapes(op_name: str, *shapes: tuple) -> tuple:
    """NumPy broadcasting of shapes (None = unknown dim) with PyTorch's error message."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-1, -ndim - 1, -1):  # from the last dim, as PyTorch reports the first clash
        dims = [s[i] if len(s) >= -i else 1 for s in shapes]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            if len(shapes) == 2:
                raise RuntimeError(f"{op_name}: The size of tensor a ({dims[0]}) must match the "
                                   f"size of tensor b ({dims[1]}) at non-singleton dimension "
                                   f"{ndim + i}")
            raise RuntimeError(f"{op_name}: shapes {', '.join(map(fmt_shape, shapes))} cannot be "
                               f"broadcast together (at dimension {ndim + i})")
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    out.reverse()
    return tuple(out)


class Op:
    """Base class of every operator. Never instantiated: dispatch passes the class."""

    differentiable = True   # False: results never require grad (comparisons, argmax...)
    promotes = True         # apply PyTorch's "no float64 out of float32 inputs" rule
    view = False            # the output may share memory with input 0
    # which inputs vjp reads: True (all), a tuple of positions, or a function of the
    # inputs and params returning one (when it depends on which inputs need grad)
    saves_inputs = True
    saves_output = False    # whether vjp reads the output
    holomorphic = False     # complex inputs give the analytic continuation (complex step)
    # the result is right for inputs of every rank (elementwise ops, matmul): jit.script
    # runs one generic graph for inputs of unknown rank only when each op is
    rank_free = False
    jvp = None              # forward-mode rule, added by the forward-AD issue
    batch = None            # batching rule, added by the vmap issue

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.__name__.startswith("_"):
            if cls.__name__ in REGISTRY:
                raise TypeError(f"op {cls.__name__} is defined twice")
            REGISTRY[cls.__name__] = cls

    @staticmethod
    def forward(*arrays, **params):
        raise NotImplementedError

    @staticmethod
    def vjp(g, out, *inputs, **params):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **params):
        """Call the op through the one dispatch point."""
        return dispatch(cls, args, params or NO_PARAMS)

    @classmethod
    def infer(cls, *specs, **params) -> Spec:
        """Shape and dtype of the output. The default runs ``forward`` on zero-stride
        stand-ins of the inputs (no memory for the inputs): exact for every op with known
        shapes. Op families override it where unknown dims must flow through."""
        args = []
        for s in specs:
            if isinstance(s, Spec):
                if any(d is None for d in s.shape):
                    raise NotImplementedError(f"{cls.__name__}: no shape rule for unknown dims")
                args.append(stand_in(tuple(s.shape), s.dtype))
            else:
                args.append(s)
        out = cls.forward(*args, **params)
        return Spec(out.shape, out.dtype)

    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        """Turn a failure inside ``forward`` into an error naming the op, shapes and dtypes."""
        name = cls.__name__.lower()
        try:
            cls.infer(*[spec_of(a) for a in args], **params)
        except (RuntimeError, ValueError, TypeError, IndexError) as rule_err:
            msg = str(rule_err)
            if not msg.startswith(name):
                msg = f"{name}: {msg}"
            return type(rule_err)(msg)
        except Exception:  # noqa: BLE001 - the original error is more telling then
            pass
        described = ", ".join(
            f"{fmt_shape(a._array.shape)} {from_numpy_dtype(a._array.dtype).name}"
            if isinstance(a, Value) else repr(a) for a in args)
        return type(err)(f"{name}: {err} (inputs: {described}"
                         + (f"; {params}" if params else "") + ")") \
            if isinstance(err, (RuntimeError, ValueError, TypeError, IndexError)) \
            else RuntimeError(f"{name}: {type(err).__name__}: {err} (inputs: {described})")


def saved_inputs(op, inputs: tuple, params: dict):
    """The positions of the inputs whose values ``op``'s vjp reads (True: all)."""
    s = op.saves_inputs
    if callable(s):
        return s(*inputs, **params)
    return s


def normalize_dim(dim: int, ndim: int, op: str = "") -> int:
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= dim <= hi:
        raise IndexError(f"{op + ': ' if op else ''}Dimension out of range (expected to be in "
                         f"range of [{lo}, {hi}], but got {dim})")
    return dim % ndim if ndim else 0


def normalize_dims(dim, ndim: int, op: str = "") -> tuple:
    """``dim`` as a sorted tuple of non-negative axes; None means all."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    out = tuple(sorted({normalize_dim(d, ndim, op) for d in dim}))
    if ndim == 0:  # dim 0 (or -1) of a 0-d tensor is the tensor itself: nothing to reduce
        return ()
    if len(out) != len(dim):
        raise RuntimeError(f"{op}: dim {dim} appears multiple times in the list of dims")
    return out
