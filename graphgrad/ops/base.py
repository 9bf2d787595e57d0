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

import re
from typing import Any, NamedTuple

from graphgrad.backend import from_numpy_dtype, stand_in, xp
from graphgrad.tensor import Value, dispatch

__all__ = ["Op", "Residuals", "REGISTRY", "Spec", "spec_of", "broadcast_shapes", "NO_PARAMS",
           "fmt_shape", "saved_inputs", "torch_error_type", "int_arg",
           "scalar_name", "SCALAR_NAMES", "C_NAMES",
           "tensor_type_name", "dtype_of_type_name"]

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
    # PyTorch refuses operands of different dtypes (matmul): in complex-step mode the real
    # operands are cast to the complex dtype first
    same_dtypes = False
    jvp = None              # forward-mode rule, added by the forward-AD issue
    batch = None            # batching rule, added by the vmap issue
    # Taylor-mode rule (func.jet): taylor(series, out, *inputs, **params) -> [y_1..y_K],
    # see ops/taylor.py; None: the op has none and a jet through it raises
    taylor = None
    # cotangent_window(*inputs, **params) -> a basic NumPy index into input 0 where the
    # output's cotangent lands unchanged (slicing), or None. A plain eager backward then
    # adds the cotangent into one gradient buffer in place, instead of the vjp's zero
    # array per piece (chunk, split, unbind); see autograd/engine.py
    cotangent_window = None
    # the engine passes ``vjp`` the cotangent in a one-item list it holds nowhere else,
    # so the rule can let it go before it ends (a compiled backward, which frees each
    # input after its last read; backends/aot.py)
    boxed_grad = False

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
        """Turn a failure inside ``forward`` into an error naming the op, shapes and dtypes,
        of the type PyTorch raises (NumPy's own types and wording never reach the user).
        It must never fail itself: it runs on every bad input."""
        name = _SNAKE.sub("_", cls.__name__).lower()  # LogSoftmax -> log_softmax
        for i, a in enumerate(args):  # PyTorch's argument parser refuses these first
            if isinstance(a, (str, bytes, list, tuple, dict, set)) or (
                    a is None and isinstance(err, TypeError) and "NoneType" in str(err)):
                what = f"'{('input', 'other')[i]}' (position {i + 1})" if len(args) == 2 \
                    else f"{i + 1}"
                return TypeError(f"{name}(): argument {what} must be Tensor, not "
                                 f"{type(a).__name__}")
        try:
            cls.infer(*[spec_of(a) for a in args], **params)
        except (RuntimeError, ValueError, TypeError, IndexError) as rule_err:
            err, params = rule_err, None  # the rule's own message says enough
        except Exception:  # noqa: BLE001 - the original error is more telling then
            pass
        msg = _numpy_reworded(name, err, args)
        if not msg.startswith(name):
            msg = f"{name}: {msg}"
        if params is not None:
            described = ", ".join(
                f"{fmt_shape(a._array.shape)} {from_numpy_dtype(a._array.dtype).name}"
                if isinstance(a, Value) else _short_repr(a) for a in args)
            msg += f" (inputs: {described}" + (f"; {params}" if params else "") + ")"
        return torch_error_type(err)(msg)


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")
# NumPy's refusals that PyTorch words its own way (bool arithmetic)
_BOOL_MESSAGES = {
    "boolean subtract": "Subtraction, the `-` operator, with two bool tensors is not supported. "
                        "Use the `^` or `logical_xor()` operator instead.",
    "boolean negative": "Negation, the `-` operator, on a bool tensor is not supported. If you "
                        "are trying to invert a mask, use the `~` or `logical_not()` operator "
                        "instead.",
}
# graphgrad's own messages start with the op's name and a colon; NumPy's never do
_OWN_MESSAGE = re.compile(r"^[A-Za-z_][\w.]*(\(\))?: ")


def torch_error_type(err: Exception) -> type:
    """The exception type PyTorch raises where NumPy (or Python) raised ``err``: NumPy's
    AxisError is PyTorch's IndexError (dimension out of range); its ValueErrors
    (broadcasting, empty reductions), ufunc type errors ("no loop"), overflow and division
    by zero are PyTorch's RuntimeError. graphgrad's own checks already raise PyTorch's type."""
    if isinstance(err, xp.exceptions.AxisError):
        return IndexError
    t = type(err)
    if _no_loop(err):
        return NotImplementedError  # PyTorch's "... not implemented for 'Float'"
    if any(f in str(err) for f in _BOOL_MESSAGES):
        return RuntimeError
    if t in (RuntimeError, IndexError, TypeError, NotImplementedError):
        return t
    if t is ValueError and _OWN_MESSAGE.match(str(err)):
        return ValueError  # a graphgrad check that mirrors a PyTorch ValueError
    return RuntimeError


def _no_loop(err: Exception) -> bool:
    """NumPy has no kernel for these dtypes (PyTorch: RuntimeError "not implemented for")."""
    msg = str(err)
    return isinstance(err, TypeError) and (type(err) is not TypeError
                                           or "not supported for the input types" in msg
                                           or "did not contain a loop" in msg)


def _numpy_reworded(name: str, err: Exception, args: tuple) -> str:
    """``err``'s message, with NumPy's wording replaced by PyTorch's where they differ."""
    msg = str(err)
    arrays = [a._array for a in args if isinstance(a, Value)]
    for fragment, torch_msg in _BOOL_MESSAGES.items():
        if fragment in msg:
            return torch_msg
    if "could not be broadcast" in msg:
        try:
            broadcast_shapes(name, *[xp.shape(a._array if isinstance(a, Value) else a)
                                     for a in args])
        except RuntimeError as e:
            return str(e)
        except Exception:  # noqa: BLE001 - keep the generic wording below
            pass
        return f"{name}: the shapes {', '.join(fmt_shape(a.shape) for a in arrays)} cannot " \
               "be broadcast together"
    if _no_loop(err):
        dtype = scalar_name(arrays[0].dtype) if arrays else type(args[0]).__name__
        return f'"{name}_cpu" not implemented for \'{dtype}\''
    too_many = re.match(r"too many indices for array: array is (\d+)-dimensional", msg)
    if too_many:
        return f"too many indices for tensor of dimension {too_many.group(1)}"
    if isinstance(err, IndexError) and "out of bounds for axis" in msg:
        return msg.replace("for axis", "for dimension")  # an advanced index
    if isinstance(err, xp.exceptions.AxisError):
        return msg.replace("axis", "dimension").replace("array of dimension", "tensor of dimension")
    if isinstance(err, ZeroDivisionError) or not msg:
        return type(err).__name__ + (f": {msg}" if msg else "")  # PyTorch: "ZeroDivisionError"
    return msg


def _short_repr(a) -> str:
    r = repr(a)
    return r if len(r) <= 60 else r[:57] + "..."


def saved_inputs(op, inputs: tuple, params: dict):
    """The positions of the inputs whose values ``op``'s vjp reads (True: all)."""
    s = op.saves_inputs
    if callable(s):
        return s(*inputs, **params)
    return s


# PyTorch's ScalarType names, which its messages print
SCALAR_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long",
                "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


# the C type names some PyTorch messages print (masked_fill, matmul)
C_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "int32": "int",
           "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
           "float16": "c10::Half", "complex64": "c10::complex<float>",
           "complex128": "c10::complex<double>", "bool": "bool"}


def scalar_name(np_dtype) -> str:
    name = xp.dtype(np_dtype).name
    return SCALAR_NAMES.get(name, name)


def tensor_type_name(np_dtype) -> str:
    """The legacy tensor type PyTorch's ``Tensor.type()`` and saved-tensor errors print
    (``torch.FloatTensor``), under graphgrad's name."""
    return f"graphgrad.{scalar_name(np_dtype)}Tensor"


def dtype_of_type_name(name: str):
    """The NumPy dtype of a legacy type name, ``torch.FloatTensor`` or
    ``graphgrad.FloatTensor``; None if it is not one (PyTorch refuses a bare name)."""
    prefix, _, short = name.partition(".")
    if prefix not in ("torch", "graphgrad") or not short.endswith("Tensor"):
        return None
    for np_name, scalar in SCALAR_NAMES.items():
        if scalar + "Tensor" == short:
            return xp.dtype(np_name)
    return None


def int_arg(value, op: str, arg: str, position: int) -> int:
    """``value`` as an int, or PyTorch's argument-parser TypeError naming ``arg``."""
    if isinstance(value, bool) or not isinstance(value, int) and (
            not hasattr(value, "__index__") or isinstance(value, float)):
        raise TypeError(f"{op}(): argument '{arg}' (position {position}) must be int, not "
                        f"{type(value).__name__}")
    return value if isinstance(value, int) else value.__index__()


def normalize_dim(dim: int, ndim: int, op: str = "") -> int:
    if not isinstance(dim, int):
        if not hasattr(dim, "__index__") or isinstance(dim, (float, bool)):
            raise TypeError(f"{op}(): argument 'dim' must be int, not {type(dim).__name__}")
        dim = dim.__index__()
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
    elif isinstance(dim, str) or not hasattr(dim, "__iter__"):
        raise TypeError(f"{op}(): argument 'dim' must be tuple of ints, not "
                        f"{type(dim).__name__}")
    seen = []
    for d in dim:
        d = normalize_dim(d, ndim, op)
        if d in seen:
            raise RuntimeError(f"{op}: dim {d} appears multiple times in the list of dims")
        seen.append(d)
    if ndim == 0:  # dim 0 (or -1) of a 0-d tensor is the tensor itself: nothing to reduce
        return ()
    return tuple(sorted(seen))


class Residuals:
    """What one call of an op keeps for its gradient, passed as its parameter ``run``
    (``_CrossEntropyStep``, a compiled graph's op): it lives with the node until the
    first backward reads it and lets it go."""

    __slots__ = ("values",)

    def __init__(self):
        self.values: tuple | None = None

    def __eq__(self, other) -> bool:   # (identity: params must compare and hash)
        return self is other

    __hash__ = object.__hash__
