"""Layer ``ops``: ops that move elements without computing: reshape (and view, flatten,
squeeze, unsqueeze), permute (and transpose, .T, .mT), expand/broadcast_to, repeat, flip."""

from __future__ import annotations

import math

from graphgrad.backend import xp
from graphgrad.tensor import Value

from graphgrad.tensor.creation import invalid_arguments

from .base import Op, Spec, int_arg, normalize_dim, scalar_name
from .batching import align, to_front
from .refusals import NOT_GIVEN, int_tuple_arg, is_int
from . import taylor as ts

__all__ = ["reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose",
           "swapaxes", "swapdims", "permute", "t", "expand", "expand_as", "broadcast_to",
           "repeat", "tile", "flip", "movedim", "ravel", "atleast_1d", "broadcast_tensors",
           "sum_to_size"]


class _Linear(Op):
    """Ops linear in their first input (any others are indices, which carry no tangent):
    J v is the op applied to v."""

    saves_inputs = ()
    promotes = False

    @classmethod
    def jvp(cls, dots, out, a, *rest, **params):
        return cls.apply(dots[0], *rest, **params)

    taylor = classmethod(ts.linear_taylor)


class _Movement(_Linear):
    """View ops. ``write_back(base, values, **params)`` is ``base`` with the elements the
    view shows replaced by ``values``, in graphgrad ops: an in-place op on the view in a
    recorded graph writes its result into the base with it (PyTorch's CopySlices), so the
    base's history sees the change."""

    view = True


class Reshape(_Movement):
    holomorphic = True
    infers_unknown_rank = True  # the output's rank is len(shape), whatever the input's

    @staticmethod
    def forward(a, *, shape):
        return xp.reshape(a, shape)

    @staticmethod
    def vjp(g, out, a, *, shape):
        return (g.reshape(a.shape),)

    @staticmethod
    def write_back(base, values, *, shape):
        return values.reshape(tuple(base.shape))  # the view shows every element

    @classmethod
    def batch(cls, vals, bdims, *, shape):
        a = to_front(vals[0], bdims[0])
        return cls.apply(a, shape=(a.shape[0], *shape)), 0

    @classmethod
    def infer(cls, a, *, shape) -> Spec:
        numel = math.prod(a.shape) if a.shape is not None and None not in a.shape else None
        if shape.count(-1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        known = math.prod(s for s in shape if s != -1)
        if numel is None:
            if -1 in shape:
                shape = tuple(None if s == -1 else s for s in shape)
            return Spec(tuple(shape), a.dtype)
        _check_sizes(shape)
        if -1 in shape:
            if known == 0 or numel % known:
                raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
            shape = tuple(numel // known if s == -1 else s for s in shape)
        elif known != numel:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        return Spec(tuple(shape), a.dtype)


class Permute(_Movement):
    holomorphic = True

    @staticmethod
    def forward(a, *, dims):
        return xp.transpose(a, dims)

    @staticmethod
    def vjp(g, out, a, *, dims):
        return (Permute.write_back(a, g, dims=dims),)

    @staticmethod
    def write_back(base, values, *, dims):
        inverse = [0] * len(dims)
        for i, d in enumerate(dims):
            inverse[d] = i
        return values.permute(*inverse)

    @classmethod
    def batch(cls, vals, bdims, *, dims):
        a = to_front(vals[0], bdims[0])
        return cls.apply(a, dims=(0, *(d + 1 for d in dims))), 0

    @classmethod
    def infer(cls, a, *, dims) -> Spec:
        if sorted(dims) != list(range(a.ndim)):
            raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input "
                               f"does not match the length of the desired ordering of "
                               f"dimensions i.e. input.dim() = {a.ndim} is not equal to "
                               f"len(dims) = {len(dims)}" if len(dims) != a.ndim else
                               f"permute(): duplicate dims are not allowed in {list(dims)}")
        return Spec(tuple(a.shape[d] for d in dims), a.dtype)


class Expand(_Movement):
    """Broadcast to ``shape`` without copying; the engine sums the cotangent back."""

    holomorphic = True

    @staticmethod
    def forward(a, *, shape):
        return xp.broadcast_to(a, shape)

    @staticmethod
    def vjp(g, out, a, *, shape):
        return (g,)

    @staticmethod
    def write_back(base, values, *, shape):
        if math.prod(shape) != math.prod(base.shape):
            raise RuntimeError("unsupported operation: more than one element of the written-to "
                               "tensor refers to a single memory location. Please clone() the "
                               "tensor before performing the operation.")
        return values.reshape(tuple(base.shape))  # only dims of size 1 were added

    @classmethod
    def batch(cls, vals, bdims, *, shape):
        a = align(vals[0], bdims[0], len(shape))
        return cls.apply(a, shape=(a.shape[0], *shape)), 0

    @classmethod
    def infer(cls, a, *, shape) -> Spec:
        if len(shape) < a.ndim:
            raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be "
                               f"greater or equal to the number of dimensions in the tensor "
                               f"({a.ndim})")
        lead = len(shape) - a.ndim
        for i, s in enumerate(a.shape):
            if s is not None and s != 1 and shape[lead + i] not in (s, None):
                raise RuntimeError(
                    f"The expanded size of the tensor ({shape[lead + i]}) must match the "
                    f"existing size ({s}) at non-singleton dimension {lead + i}.  Target sizes: "
                    f"{list(shape)}.  Tensor sizes: {list(a.shape)}")
        return Spec(tuple(shape), a.dtype)


class SumToSize(_Linear):
    """``tensor.sum_to_size(*size)``: the sum over the dims that expanding to the input's
    shape would have broadcast (the leading ones, and those of size 1 in ``shape``), i.e.
    Expand's transpose. Graph differentiation un-broadcasts a cotangent with it where a
    dim is known only at run time (TF's BroadcastGradientArgs and Sum in one op)."""

    holomorphic = True

    @staticmethod
    def forward(a, *, shape):
        lead = a.ndim - len(shape)
        dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                          if s == 1 and a.shape[lead + i] != 1)
        return xp.reshape(xp.sum(a, axis=dims, keepdims=True) if dims else a, shape)

    @staticmethod
    def vjp(g, out, a, *, shape):
        return (g.expand(a.shape),)

    @classmethod
    def batch(cls, vals, bdims, *, shape):
        a = to_front(vals[0], bdims[0])
        extra = a.ndim - 1 - len(shape)
        if extra:   # the example's leading dims: summed here, after the batch dim
            a = a.sum(dim=tuple(range(1, 1 + extra)))
        return cls.apply(a, shape=(a.shape[0], *shape)), 0

    @classmethod
    def infer(cls, a, *, shape) -> Spec:
        lead = len(a.shape) - len(shape)
        if lead < 0 or any(s is not None and d is not None and s != 1 and s != d
                           for s, d in zip(shape, a.shape[lead:], strict=True)):
            raise RuntimeError(f"size {{{list(shape)}}} is not expandable to size "
                               f"{{{list(a.shape)}}}.")
        return Spec(tuple(shape), a.dtype)


class Repeat(_Linear):
    """``tensor.repeat(*repeats)``: tile the tensor (a copy, unlike expand)."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, repeats):
        if len(repeats) < a.ndim:
            raise RuntimeError("Number of dimensions of repeat dims can not be smaller than "
                               "number of dimensions of tensor")
        return xp.tile(a, repeats)

    @staticmethod
    def vjp(g, out, a, *, repeats):
        padded = (1,) * (len(repeats) - a.ndim) + tuple(a.shape)
        pairs = []
        for r, s in zip(repeats, padded, strict=True):
            pairs += [r, s]
        summed = g.reshape(pairs).sum(dim=tuple(range(0, 2 * len(repeats), 2)))
        return (summed.reshape(a.shape),)

    @classmethod
    def batch(cls, vals, bdims, *, repeats):
        a = align(vals[0], bdims[0], len(repeats))
        return cls.apply(a, repeats=(1, *repeats)), 0


class Flip(_Linear):
    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, dims):
        return xp.flip(a, dims).copy() if a.ndim else a.copy()  # a 0-d flip is itself

    @staticmethod
    def vjp(g, out, a, *, dims):
        return (g.flip(dims),)

    @classmethod
    def batch(cls, vals, bdims, *, dims):
        a = to_front(vals[0], bdims[0])
        return cls.apply(a, dims=tuple(d + 1 for d in dims)), 0


class ViewDtype(Op):
    """``tensor.view(dtype)``: the same bytes read as another dtype, a view (writes through
    either show in the other). A different element size scales the last dim. Not
    differentiable, as in PyTorch: its results never require grad."""

    differentiable = False
    promotes = False
    saves_inputs = ()
    view = True

    @staticmethod
    def forward(a, *, dtype):
        new = xp.dtype(dtype)
        old_size, new_size = a.dtype.itemsize, new.itemsize
        if old_size == new_size:
            return a.view(new)
        what = f"to view {scalar_name(a.dtype)} as {scalar_name(new)} (different element sizes)"
        if a.ndim == 0:
            raise RuntimeError(f"self.dim() cannot be 0 {what}")
        strides = [st // old_size for st in a.strides]
        if a.size and not any(strides):  # a stand-in (shape rules): no memory to check
            shape = (*a.shape[:-1], a.shape[-1] * old_size // new_size)
            return xp.broadcast_to(xp.zeros((), new), shape)
        ratio = max(old_size, new_size) // min(old_size, new_size)
        if new_size > old_size and a.shape[-1] % ratio:
            raise RuntimeError(f"self.size(-1) must be divisible by {ratio} {what}, but got "
                               f"{a.shape[-1]}")
        if strides[-1] != 1 and a.shape[-1] != 1:
            raise RuntimeError(f"self.stride(-1) must be 1 {what}, but got {strides[-1]}")
        for i, st in enumerate(strides[:-1]):
            if new_size > old_size and st % ratio:
                raise RuntimeError(f"self.stride({i}) must be divisible by {ratio} {what}, "
                                   f"but got {st}")
        if a.shape[-1] == 1 and strides[-1] != 1:  # NumPy wants the last axis contiguous
            a = xp.lib.stride_tricks.as_strided(a, a.shape, (*a.strides[:-1], old_size))
        return a.view(new)

    @classmethod
    def batch(cls, vals, bdims, *, dtype):
        return cls.apply(to_front(vals[0], bdims[0]), dtype=dtype), 0


# ---- user functions ------------------------------------------------------------------

def _shape_arg(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    # ints pass as they are: a JIT trace's sizes are int subclasses that must stay traced;
    # so do sizes known only at run time (a graph's 0-d Symbols, in graph differentiation)
    return tuple(s if isinstance(s, int) and type(s) is not bool or run_time_size(s)
                 else int(s) for s in shape)


def run_time_size(s) -> bool:
    """Whether the size ``s`` is a graph's 0-d int tensor, valued only at run time."""
    return isinstance(s, Value) and getattr(type(s), "symbolic", False)


def _distinct_dims(dims, ndim: int, op: str) -> tuple:
    """``dims`` normalized; PyTorch refuses a dim named twice."""
    dims = tuple(normalize_dim(d, ndim, op) for d in dims)
    for i, d in enumerate(dims):
        if d in dims[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return dims


def _check_sizes(shape: tuple) -> None:
    """-1 is the one size to infer; NumPy would take any negative size for it."""
    for i, s in enumerate(shape):
        if s is not None and not run_time_size(s) and s < -1:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(shape)}")


def reshape(input, *shape):
    shape = _shape_arg(shape)
    _check_sizes(shape)
    return Reshape.apply(input, shape=shape)


def view(input, *shape):
    """``reshape`` that never copies: PyTorch refuses a shape the strides cannot give;
    ``view(dtype)`` reinterprets the bytes."""
    if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)) \
            and not hasattr(shape[0], "__index__"):
        from graphgrad.backend import to_dtype
        return ViewDtype.apply(input, dtype=to_dtype(shape[0]).np)
    shape = _shape_arg(shape)
    _check_sizes(shape)
    arr = input._array
    if not arr.flags.c_contiguous and arr.size:
        try:
            arr.reshape(Reshape.infer(Spec(arr.shape, arr.dtype), shape=shape).shape, copy=False)
        except ValueError:
            raise RuntimeError("view size is not compatible with input tensor's size and stride "
                               "(at least one dimension spans across two contiguous subspaces)."
                               " Use .reshape(...) instead.") from None
    return Reshape.apply(input, shape=shape)


def ravel(input):
    return reshape(input, -1)


def flatten(input, start_dim: int = 0, end_dim: int = -1):
    if type(start_dim) is not int or type(end_dim) is not int:  # PyTorch's argument parser
        start_dim = int_arg(start_dim, "flatten", "start_dim", 2)
        end_dim = int_arg(end_dim, "flatten", "end_dim", 3)
    nd = input.ndim
    s = normalize_dim(start_dim, nd, "flatten")
    e = normalize_dim(end_dim, nd, "flatten")
    if nd == 0:
        return reshape(input, 1)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = tuple(input.shape)
    merged = shape[s:e + 1]
    return reshape(input, _inferred(shape[:s] + (None if None in merged else math.prod(merged),)
                                    + shape[e + 1:]))


def unflatten(input, dim: int, sizes):
    d = normalize_dim(dim, input.ndim, "unflatten")
    shape = tuple(input.shape)
    return reshape(input, _inferred(shape[:d] + tuple(sizes) + shape[d + 1:]))


def _inferred(shape: tuple) -> tuple:
    """``shape`` with its one dim known only at run time (None: a captured graph's dynamic
    size, as a Symbol's ``shape`` reports it) given as -1, which reshape infers from the
    others, as the run-time shape would give it. More than one such dim, or a 0 among the
    others (-1 would be ambiguous), are left as they are: capture then breaks the graph
    there and runs the call eagerly, with the same result."""
    if None not in shape or shape.count(None) > 1 or -1 in shape or 0 in shape:
        return shape
    return tuple(-1 if d is None else d for d in shape)


_SQUEEZE_OVERLOADS = ("Tensor input", "Tensor input, int dim", "Tensor input, tuple of ints dim")


def squeeze(input, dim=NOT_GIVEN):
    shape = tuple(input.shape)
    if dim is None:  # no overload of PyTorch's takes None
        raise invalid_arguments("squeeze", (input, dim), _SQUEEZE_OVERLOADS)
    if dim is NOT_GIVEN:
        dims = {i for i, s in enumerate(shape) if s == 1}
        known = None not in shape
    else:
        dims = _distinct_dims(dim if isinstance(dim, (tuple, list)) else (dim,), len(shape),
                              "squeeze")
        known = not shape or all(shape[d] is not None for d in dims)
        dims = {d for d in dims if shape and shape[d] == 1}
    out = tuple(s for i, s in enumerate(shape) if i not in dims)
    # a dim known only at run time may be 1 there, which squeezes it: left unknown, so
    # that capture runs the call eagerly instead
    return reshape(input, _inferred(out) if known else out)


def unsqueeze(input, dim: int):
    shape = list(input.shape)
    d = normalize_dim(dim, len(shape) + 1, "unsqueeze")
    shape.insert(d, 1)
    return reshape(input, _inferred(tuple(shape)))


def permute(input, *dims):
    dims = _shape_arg(dims)
    nd = input.ndim
    if len(dims) != nd:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {nd} is not equal to len(dims) = {len(dims)}")
    return Permute.apply(input, dims=tuple(normalize_dim(d, nd, "permute") for d in dims))


def transpose(input, dim0: int, dim1: int, *, _names=("transpose", "dim0", "dim1")):
    if type(dim0) is not int or type(dim1) is not int:  # PyTorch's argument parser first
        op, name0, name1 = _names
        dim0, dim1 = int_arg(dim0, op, name0, 2), int_arg(dim1, op, name1, 3)
    nd = input.ndim
    d0, d1 = normalize_dim(dim0, nd, "transpose"), normalize_dim(dim1, nd, "transpose")
    if nd == 0:
        return input
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return Permute.apply(input, dims=tuple(dims))


def swapaxes(input, axis0: int, axis1: int):
    return transpose(input, axis0, axis1, _names=("swapaxes", "axis0", "axis1"))


def swapdims(input, dim0: int, dim1: int):
    return transpose(input, dim0, dim1, _names=("swapdims", "dim0", "dim1"))


_MOVEDIM_OVERLOADS = ("Tensor input, tuple of ints source, tuple of ints destination",
                      "Tensor input, int source, int destination")


def movedim(input, source, destination):
    """Move dim(s) ``source`` to position(s) ``destination`` (ints or sequences of them);
    the other dims keep their order."""
    nd = input.ndim
    if not (is_int(source) and is_int(destination) or _int_sequence(source)
            and _int_sequence(destination)):
        raise invalid_arguments("movedim", (input, source, destination), _MOVEDIM_OVERLOADS)
    src = list(source) if isinstance(source, (tuple, list)) else [source]
    dst = list(destination) if isinstance(destination, (tuple, list)) else [destination]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) "
                           f"should contain the same number of dims as destination ({dst} dims)")
    src = [normalize_dim(d, nd, "movedim") for d in src]
    dst = [normalize_dim(d, nd, "movedim") for d in dst]
    for name, dims, given in (("source", src, source), ("destination", dst, destination)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({list(given)})")
    rest = iter(i for i in range(nd) if i not in src)
    placed = dict(zip(dst, src, strict=True))
    order = [placed[i] if i in placed else next(rest) for i in range(nd)]
    return Permute.apply(input, dims=tuple(order))


def t(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input


def expand(input, *sizes):
    sizes = _shape_arg(sizes)
    lead = len(sizes) - input.ndim
    shape = tuple(input.shape)
    resolved = tuple(shape[i - lead] if isinstance(s, int) and s == -1 and i >= lead else s
                     for i, s in enumerate(sizes))
    if len(resolved) == len(shape) and all(
            r is d or not run_time_size(r) and not run_time_size(d) and r == d
            for r, d in zip(resolved, shape, strict=True)):
        return input
    return Expand.apply(input, shape=resolved)


def sum_to_size(input, *size):
    return SumToSize.apply(input, shape=_shape_arg(size))


def broadcast_to(input, shape):
    return expand(input, *shape)


def expand_as(input, other):
    return expand(input, *other.shape)


def broadcast_tensors(*tensors):
    shape = xp.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(expand(t, *shape) for t in tensors)


def repeat(input, *repeats):
    repeats = _shape_arg(repeats)
    padded = (1,) * (len(repeats) - input.ndim) + tuple(input.shape)
    shape = [s * r for s, r in zip(padded, repeats, strict=False)]
    if any(s < 0 for s in shape) and len(repeats) >= input.ndim:
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{next(s for s in shape if s < 0)}: {shape}")
    return Repeat.apply(input, repeats=repeats)


def tile(input, *dims):
    dims = _shape_arg(dims)  # tile(2), tile(2, 1), tile((2, 1))
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return repeat(input, *dims)


def _int_sequence(v) -> bool:
    return isinstance(v, (tuple, list)) and all(is_int(d) for d in v)


def flip(input, dims):
    """``torch.flip(x, dims)``: dims is a tuple or list (the method ``x.flip(0, 1)`` also
    takes ints)."""
    dims = int_tuple_arg(dims, "flip", "dims", 2, single=False)
    return Flip.apply(input, dims=_distinct_dims(dims, input.ndim, "flip"))


def atleast_1d(input):
    return reshape(input, 1) if input.ndim == 0 else input

