"""Layer ``ops``: joining and splitting: cat, stack, pad; split, chunk, unbind (which are
slices, so they need no op of their own)."""

from __future__ import annotations

from graphgrad.backend import result_float_dtype, xp

from .base import Op, Spec, normalize_dim, int_arg
from .batching import all_to_front, to_front
from .index import getitem
from .refusals import int_tuple_arg
from . import taylor as ts

__all__ = ["cat", "concat", "concatenate", "stack", "pad", "split", "chunk", "unbind",
           "hstack", "vstack", "tensor_split"]


def _dense(dots, inputs):
    """Tangents with absent ones as zeros (cat and stack are linear in all inputs)."""
    return [d if d is not None else x.new_zeros(tuple(x.shape)).to(_first(dots).dtype)
            for d, x in zip(dots, inputs, strict=True)]


def _first(dots):
    return next(d for d in dots if d is not None)


def _slice_along(t, dim: int, start: int, stop: int):
    return getitem(t, (slice(None),) * dim + (slice(start, stop),))


class _Join(Op):
    """cat and stack: linear in all their inputs together. Their dtype follows PyTorch's
    promotion (float32 with int64 gives float32, where NumPy gives float64)."""

    holomorphic = True
    saves_inputs = ()

    @classmethod
    def jvp(cls, dots, out, *inputs, dim):
        return cls.apply(*_dense(dots, inputs), dim=dim)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return cls.apply(*all_to_front(vals, bdims), dim=dim + 1), 0


class Cat(_Join):
    @staticmethod
    def forward(*arrays, dim):
        return xp.concatenate(arrays, axis=dim)

    @staticmethod
    def vjp(g, out, *inputs, dim):
        grads, start = [], 0
        for t in inputs:
            stop = start + t.shape[dim]
            grads.append(_slice_along(g, dim, start, stop))
            start = stop
        return tuple(grads)


    @classmethod
    def infer(cls, *specs, dim) -> Spec:
        first = specs[0]
        for i, s in enumerate(specs):
            if s.ndim != first.ndim:
                raise RuntimeError(f"cat: Tensors must have same number of dimensions: got "
                                   f"{first.ndim} and {s.ndim}")
            for d in range(first.ndim):
                if d != dim and None not in (s.shape[d], first.shape[d]) \
                        and s.shape[d] != first.shape[d]:
                    raise RuntimeError(f"cat: Sizes of tensors must match except in dimension "
                                       f"{dim}. Expected size {first.shape[d]} but got size "
                                       f"{s.shape[d]} for tensor number {i} in the list.")
        sizes = [s.shape[dim] for s in specs]
        total = None if None in sizes else sum(sizes)
        shape = first.shape[:dim] + (total,) + first.shape[dim + 1:]
        return Spec(shape, _promoted(specs))


class Stack(_Join):
    @staticmethod
    def forward(*arrays, dim):
        if _c_order_pays(arrays):
            # C order, as torch.stack's result: NumPy lays the result out as its inputs
            # lie, so a stack of permuted views comes out permuted and a reshape of it
            # copies it again (passes/simplify.py stacks the permuted cotangents of
            # attention's q, k, v for that reshape to be a view)
            shape, d = arrays[0].shape, dim % (arrays[0].ndim + 1)
            out = xp.empty((*shape[:d], len(arrays), *shape[d:]), xp.result_type(*arrays))
            return xp.stack(arrays, axis=dim, out=out)
        return xp.stack(arrays, axis=dim)

    @staticmethod
    def vjp(g, out, *inputs, dim):
        return tuple(getitem(g, (slice(None),) * dim + (i,)) for i in range(len(inputs)))


    @classmethod
    def infer(cls, *specs, dim) -> Spec:
        first = specs[0]
        for i, s in enumerate(specs):
            if s.shape != first.shape:
                raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                                   f"{list(first.shape)} at entry 0 and {list(s.shape)} at "
                                   f"entry {i}")
        shape = first.shape[:dim] + (len(specs),) + first.shape[dim:]
        return Spec(shape, _promoted(specs))


def _c_order_pays(arrays) -> bool:
    """Whether some input is not C-contiguous but every input's last dim is unit-stride:
    then writing the stack in C order copies runs of whole rows. Where a last dim is
    strided (a transposed matrix), C order would be an element-by-element gather, and
    NumPy's layout (the inputs') copies in runs instead; C-contiguous inputs give a
    C-contiguous stack either way."""
    strided = False
    for a in arrays:
        if a.flags.c_contiguous:
            continue
        if a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
            return False
        strided = True
    return strided


class Pad(Op):
    """Constant padding; ``pad`` lists (before, after) pairs from the last dim backwards,
    as ``torch.nn.functional.pad`` does."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, pad, value):
        widths = _widths(a.ndim, pad)
        if any(lo < 0 or hi < 0 for lo, hi in widths):
            crop = tuple(slice(-lo if lo < 0 else 0, hi if hi < 0 else None)
                         for lo, hi in widths)
            a = a[crop]
            widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
        return xp.pad(a, widths, mode="constant", constant_values=value)

    @staticmethod
    def vjp(g, out, a, *, pad, value):
        widths = _widths(a.ndim, pad)
        # undo the padding: negative pads (crops) become zero-padding of the gradient
        back = []
        for lo, hi in reversed(widths):
            back += [-lo, -hi]
        return (Pad.apply(g, pad=tuple(back), value=0.0),)

    @staticmethod
    def jvp(dots, out, a, *, pad, value):
        return Pad.apply(dots[0], pad=pad, value=0.0)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, pad, value):
        return cls.apply(to_front(vals[0], bdims[0]), pad=pad, value=value), 0


def _promoted(specs) -> xp.dtype:
    """The dtype dispatch gives cat and stack: NumPy's, less any float64 that no input
    has."""
    dtypes = [s.dtype for s in specs]
    dt = xp.result_type(*dtypes)
    cast = result_float_dtype(dt, *dtypes)
    return xp.dtype(cast if cast is not None else dt)


def _widths(ndim: int, pad: tuple) -> list:
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise RuntimeError(f"Padding length must be divisible by 2 and at most twice the number "
                           f"of dimensions of the input ({ndim}), got {len(pad)}")
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


def cat(tensors, dim: int = 0):
    tensors = tuple(tensors)
    if type(dim) is not int:  # PyTorch's argument parser refuses it first
        dim = int_arg(dim, "cat", "dim", 2)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be "
                               f"concatenated")
    # PyTorch skips 1-d empty tensors in cat (legacy behaviour kept for compatibility)
    kept = tuple(t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)) or tensors[:1]
    d = normalize_dim(dim, kept[0].ndim, "cat")
    return Cat.apply(*kept, dim=d)


concat = concatenate = cat


def stack(tensors, dim: int = 0):
    tensors = tuple(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    d = normalize_dim(dim, tensors[0].ndim + 1, "stack")
    return Stack.apply(*tensors, dim=d)


def hstack(tensors):
    tensors = tuple(tensors)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in tensors], 0)


def pad(input, pad, mode: str = "constant", value=None):
    if mode != "constant":
        raise NotImplementedError(f"pad: mode={mode!r} is not supported yet (only 'constant')")
    return Pad.apply(input, pad=tuple(int(p) for p in pad),
                     value=0.0 if value is None else value)


def split(tensor, split_size_or_sections, dim: int = 0):
    """Pieces of ``split_size`` along ``dim`` (the last may be smaller), or of the listed
    sizes."""
    if not isinstance(split_size_or_sections, int):  # PyTorch's argument parser first
        split_size_or_sections = int_tuple_arg(split_size_or_sections, "split_with_sizes",
                                               "split_sizes", 2)
    if tensor.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = normalize_dim(dim, tensor.ndim, "split")
    size = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and size:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {size}")
        bounds = [(s, min(s + step, size)) for s in range(0, size, step)] if size else [(0, 0)]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sections}")
        bounds, start = [], 0
        for s in sections:
            bounds.append((start, start + s))
            start += s
    return tuple(_slice_along(tensor, d, a, b) for a, b in bounds)


def chunk(input, chunks: int, dim: int = 0):
    chunks = int_arg(chunks, "chunk", "chunks", 1)
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = normalize_dim(dim, input.ndim, "chunk")
    size = input.shape[d]
    if not size:  # PyTorch: ``chunks`` empty pieces
        return tuple(_slice_along(input, d, 0, 0) for _ in range(chunks))
    return split(input, -(-size // chunks), d)


def tensor_split(input, indices_or_sections, dim: int = 0):
    d = normalize_dim(dim, input.ndim, "tensor_split")
    size = input.shape[d]
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        sizes = [size // n + (1 if i < size % n else 0) for i in range(n)]
        return split(input, sizes, d)
    cuts = [0, *indices_or_sections, size]
    return tuple(_slice_along(input, d, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True))


def unbind(input, dim: int = 0):
    d = normalize_dim(dim, input.ndim, "unbind")
    return tuple(getitem(input, (slice(None),) * d + (i,)) for i in range(input.shape[d]))

