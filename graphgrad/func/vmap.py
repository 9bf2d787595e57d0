"""Layer ``func``: ``vmap``, vectorizing a function over a batch dimension.

A vmap level is a mode on the dispatch stack. Inside it, a mapped input is a
``BatchedTensor``: to the user's function it looks like one example (``shape`` has no
batch dim), while it holds the whole batch (``_phys``) with the batch at ``_bdim``.
Each op call on batched tensors is handed to the op's batching rule, which rewrites
it into one op call on the physical tensors (no Python loop over examples). Levels
nest (a value batched at two levels is ``BatchedTensor(inner level, BatchedTensor(outer
level, physical))``).

Reverse mode sees two graphs. The batching rules' ops are ordinary ops on the physical
tensors, so the physical graph is recorded as usual: a backward *outside* vmap (through
vmap's results) walks it. Each batched result is also a node of the *logical* graph at its
level (its op and logical inputs): a backward *inside* vmap (``vmap(grad(f))``,
``vmap(jacrev(f))``, ``vmap(hessian(f))``) walks that one, so every vjp rule is an op call
on logical tensors that goes through the dispatch stack like any other: cotangents
batched at another level stay batched there, forward-AD levels above see the saved values'
tangents, and an unbatched input gets one gradient per example.
"""

from __future__ import annotations

import functools

from collections.abc import Callable

from graphgrad.backend import stand_in, xp
from graphgrad.ops.inplace import (apply_inplace, check_allowed, fill_inplace,
                                   inplace_error_of_vmap, write_back_of)
from graphgrad.ops.arithmetic import needs_grad
from graphgrad.tensor import Mode, Tensor, Value, dispatch, pop_mode, push_mode, record
from graphgrad.tensor import is_grad_enabled as _grad_enabled
from graphgrad.tensor.views import bump_version, rebase, take_history

from .pytree import tree_flatten, tree_unflatten

__all__ = ["vmap", "BatchedTensor", "VmapLevel"]

_ITEM = ("vmap: It looks like you're calling .item() on a Tensor. We don't support vmap over "
         "calling .item() on a Tensor, please try to rewrite what you're doing with other "
         "operations.")
_CONTROL = ("vmap: It looks like you're attempting to use a Tensor in some data-dependent "
            "control flow. We don't support that yet, please shout over at "
            "https://github.com/pytorch/functorch/issues/257 .")


class BatchedTensor(Tensor):
    """One example's view of a batch: logical shape without the batch dim."""

    __slots__ = ("_phys", "_bdim", "_level")

    def __init__(self, phys: Value, bdim: int, level: VmapLevel):
        shape = list(phys._array.shape)
        del shape[bdim]
        # a zero-stride stand-in gives the logical shape and dtype to code that reads
        # _array's metadata; values must come from _phys
        self._init(stand_in(tuple(shape), phys._array.dtype),
                   requires_grad=phys._requires_grad)
        self._phys = phys
        self._bdim = bdim
        self._level = level

    def __repr__(self) -> str:
        return f"BatchedTensor(lvl={self._level.index}, bdim={self._bdim}, value=\n{self._phys!r})"

    __str__ = __repr__

    def item(self):
        raise RuntimeError(_ITEM)

    def tolist(self):
        raise RuntimeError(_ITEM.replace(".item()", ".tolist()"))

    def numpy(self, *, force: bool = False):
        raise RuntimeError("vmap: It looks like you're calling .numpy() on a Tensor. We don't "
                           "support that inside vmap.")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("vmap: a batched tensor cannot be converted to a NumPy array inside "
                           "vmap (the function would see one example's zeros)")

    def __bool__(self):
        raise RuntimeError(_CONTROL)

    def __float__(self):
        raise RuntimeError(_ITEM)

    def __int__(self):
        raise RuntimeError(_ITEM)

    __index__ = __int__

    def requires_grad_(self, requires_grad: bool = True) -> BatchedTensor:
        self._phys.requires_grad_(requires_grad)
        self._requires_grad = self._phys._requires_grad
        return self

    def detach(self) -> BatchedTensor:
        return BatchedTensor(self._phys.detach(), self._bdim, self._level)

    # in-place ops write into the physical tensor through these two (process_inplace)
    def _physical_value(self, v):
        """``v``, a value of this tensor's logical shape batched at most at this level and
        those below, laid out as ``_phys`` (unbatched values are expanded)."""
        b = self._bdim
        if isinstance(v, BatchedTensor) and v._level is self._level:
            return v._phys.movedim(v._bdim, b) if v._bdim != b else v._phys
        v = v.unsqueeze(b)
        return v.expand(*(v.shape[:b] + (self._level.size,) + v.shape[b + 1:]))

    def _snapshot(self) -> BatchedTensor:
        """This tensor as it is now, for the graph an in-place op is about to extend: the
        physical values are copied (the write will overwrite them) and the logical node
        is this one's."""
        with self._level.lowered():
            phys = self._phys.clone()
        old = BatchedTensor(phys, self._bdim, self._level)
        take_history(old, self)
        # its own counter at the current version: the edges made to it now carry that
        # version, which resolves to it (not to an older identity) in backward
        if self._version_counter is not None:
            old._version_counter = [self._version_counter[0]]
        ext = self._extras
        if ext is not None:
            e = old._ensure_extras()
            e.previous, e.rebased_at = ext.previous, ext.rebased_at  # older changes resolve
        return old


def unwrap(t) -> tuple:
    """The physical tensor behind ``t`` (batched at any number of levels), and the
    batched tensors on the way, outermost first."""
    wrappers = []
    while isinstance(t, BatchedTensor):
        wrappers.append(t)
        t = t._phys
    return t, wrappers


class VmapLevel(Mode):
    _count = 0

    def __init__(self, size: int, randomness: str):
        self.size = size
        self.randomness = randomness
        self.index = VmapLevel._count
        VmapLevel._count += 1

    def __repr__(self) -> str:
        return f"VmapLevel({self.index}, size={self.size})"

    def batched_random(self, sample, shape: tuple) -> BatchedTensor:
        """randomness="different": one sample per example, drawn in one go."""
        return BatchedTensor(sample((self.size, *shape)), 0, self)

    def process(self, op, args: tuple, params: dict):
        vals, bdims, batched = [], [], False
        for a in args:
            if isinstance(a, BatchedTensor) and a._level is self:
                vals.append(a._phys)
                bdims.append(a._bdim)
                batched = True
            else:
                vals.append(a)
                bdims.append(None)
        with self.lowered():
            if not batched:
                return dispatch(op, args, params)
            if op.batch is None:
                raise NotImplementedError(f"vmap: there is no batching rule for the op "
                                          f"{op.__name__} yet")
            out, bdim = op.batch(tuple(vals), tuple(bdims), **params)
        if bdim is None:
            return out
        out = BatchedTensor(out, bdim, self)
        if _grad_enabled() and op.differentiable and out._array.dtype.kind in "fc":
            for a in args:
                if isinstance(a, Value) and a._requires_grad:
                    _record_logical(out, op, args, params)
                    break
        return out


    def batches(self, t) -> bool:
        return isinstance(t, BatchedTensor) and t._level is self

    def process_inplace(self, t, fn: Callable, args: tuple, kw: dict, name: str,
                        below: Callable):
        """A write into a tensor batched at this level is this level's (``_inplace_
        batched``); a write into any other tensor must not make it batched here."""
        if isinstance(t, BatchedTensor) and t._level is self:
            return _inplace_batched(t, fn, args, kw, name)

        def unbatched(old, *a, **k):
            result = fn(old, *a, **k)
            if isinstance(result, BatchedTensor) and result._level is self:
                raise inplace_error_of_vmap(name)
            return result
        return below(unbatched)


def _inplace_batched(t: BatchedTensor, fn: Callable, args: tuple, kw: dict,
                     name: str) -> BatchedTensor:
    """An in-place op on a batched tensor: the new logical value is computed out of
    place, written into the physical tensor (an in-place op one level down, so the
    tensors that alias it see the change, as in PyTorch), and the batched tensor
    becomes its node in the logical graph."""
    recording = _grad_enabled() and (t._requires_grad or any(needs_grad(a) for a in args))
    if recording:
        check_allowed(t)
        if t._extras is not None and t._extras.base is not None:
            return _inplace_on_batched_view(t, fn, args, kw, name)
    old = t._snapshot() if recording else t
    result = fn(old, *args, **kw)
    if tuple(result.shape) != tuple(t.shape):
        raise RuntimeError(f"{name}: output with shape {list(t.shape)} doesn't match the "
                           f"broadcast shape {list(result.shape)}")
    fill_inplace(t._phys, t._physical_value(result), name)
    if recording and result.op is not None:
        # rebase t in the logical graph, as for a plain tensor: edges made before the
        # change lead to its old identity (the snapshot) through the version counter
        bump_version(t)
        rebase(t, result, old)
    return t


def _inplace_on_batched_view(t: BatchedTensor, fn: Callable, args: tuple, kw: dict,
                             name: str) -> BatchedTensor:
    """An in-place op on a view of a batched tensor, while recording: the base takes the
    new values (an in-place op on it, so its logical history sees the change) and the
    view becomes a fresh view of the rebased base."""
    view_op, view_args, view_params = t._extras.view_call
    base = t._extras.base
    write_back = write_back_of(t._extras.view_call, f"vmap: {name}", "a batched tensor")
    old = t._snapshot()
    new_values = fn(old, *args, **kw)
    apply_inplace(base, write_back, new_values, name=name)
    fresh = view_op.apply(base, *view_args[1:], **view_params)
    bump_version(t)
    rebase(t, fresh, old)
    return t


def _record_logical(out: BatchedTensor, op, args: tuple, params: dict) -> None:
    """Make ``out`` a graph node at this level, with the logical args as inputs.

    The batching rule's ops recorded the physical graph (what a backward *outside*
    vmap walks); reverse mode *inside* vmap walks this logical one instead, so its vjp
    rules run on logical tensors through the dispatch stack: a cotangent batched at
    another vmap level stays batched there (``vmap(jacrev(f))``), forward-AD levels
    above this one see the saved values' tangents (``vmap(hessian(f))``), and the
    gradient w.r.t. an unbatched input is one per example, not their sum."""
    record(op, args, params, None, node=out)
    if op.view and isinstance(args[0], Value):
        # a view in the logical graph: an in-place op on it writes through to its base
        # there too (the physical buffers are shared already)
        phys, base_phys = unwrap(out)[0], unwrap(args[0])[0]
        if xp.may_share_memory(phys._array, base_phys._array):
            ext = out._ensure_extras()
            ext.base, ext.view_call = args[0], (op, args, params)


def _in_dims_leaves(in_dims, args_spec, name: str, args) -> list:
    """One in_dim per leaf of the flattened args. ``in_dims`` is a prefix of the args'
    structure (torch.func's rule): an int or None stands for a whole subtree, and each
    container must match the args' container (same kind, length and dict keys)."""
    if isinstance(in_dims, int) or in_dims is None:
        return [in_dims] * args_spec.num_leaves
    if not isinstance(in_dims, tuple):
        raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): expected `in_dims` to "
                         f"be int or a (potentially nested) tuple matching the structure of "
                         f"inputs, got: {type(in_dims)}.")
    out: list = []
    if not _match_prefix(in_dims, tuple(args), out):
        raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not "
                         f"compatible with the structure of `inputs`. in_dims has structure "
                         f"{tree_flatten(in_dims)[1]} but inputs has structure {args_spec}.")
    return out


def _match_prefix(dims, tree, out: list) -> bool:
    """Append one dim per leaf of ``tree``; False when ``dims`` is not a prefix of it."""
    if isinstance(dims, int) or dims is None:
        out += [dims] * tree_flatten(tree)[1].num_leaves
        return True
    if isinstance(dims, dict):
        if not isinstance(tree, dict) or set(dims) != set(tree):
            return False
        return all(_match_prefix(dims[k], tree[k], out) for k in tree)
    if isinstance(dims, (tuple, list)):
        if type(dims) is list and not isinstance(tree, list) or \
                type(dims) is not list and not isinstance(tree, tuple) or len(dims) != len(tree):
            return False
        return all(_match_prefix(d, t, out) for d, t in zip(dims, tree, strict=True))
    return False


def _fn_name(f) -> str:
    return getattr(f, "__name__", type(f).__name__)


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """Vectorize ``func`` over dim ``in_dims`` of its inputs; outputs get the batch dim at
    ``out_dims``. ``in_dims``/``out_dims`` are ints, None (not mapped) or pytrees of them."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got "
                         f"{chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        name = _fn_name(func)
        if not args:
            raise ValueError(f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add "
                             f"inputs, or you are trying to vmap over a function with no "
                             f"inputs. The latter is unsupported.")
        flat, spec = tree_flatten(args)
        dims = _in_dims_leaves(in_dims, spec, name, args)
        size = None
        sizes = []
        for x, d in zip(flat, dims, strict=True):
            if d is None:
                continue
            if not isinstance(x, Value):
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got "
                                 f"in_dim={d} for an input but the input is of type "
                                 f"{type(x)}. We cannot vmap over non-Tensor arguments, please "
                                 f"use None as the respective in_dim")
            if not -x.ndim <= d < max(x.ndim, 1) or x.ndim == 0:
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got "
                                 f"in_dim={d} for some input, but that input is a Tensor of "
                                 f"dimensionality {x.ndim} so expected in_dim to satisfy "
                                 f"-{x.ndim} <= in_dim < {x.ndim}.")
            sizes.append(x.shape[d])
        if not sizes:
            raise ValueError("vmap: Expected at least one Tensor to vmap over")
        if len(set(sizes)) > 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                             f"dimension, got sizes {sizes} for the mapped dimension")
        size = sizes[0]
        if chunk_size is not None and chunk_size < size:
            return _chunked(func, flat, spec, dims, size, kwargs)
        return _run(func, flat, spec, dims, size, kwargs, out_dims, randomness, name)

    def _chunked(f, flat, spec, dims, size, kwargs):
        from graphgrad.ops import cat
        pieces = []
        for start in range(0, size, chunk_size):
            part = [x.narrow(d, start, min(chunk_size, size - start)) if d is not None else x
                    for x, d in zip(flat, dims, strict=True)]
            pieces.append(_run(f, part, spec, dims, min(chunk_size, size - start), kwargs,
                               out_dims, randomness, _fn_name(f)))
        leaves0, ospec = tree_flatten(pieces[0])
        odims = _out_dims_leaves(out_dims, ospec, _fn_name(f))
        columns = [tree_flatten(p)[0] for p in pieces]
        joined = [cat([c[i] for c in columns], dim=odims[i]) for i in range(len(leaves0))]
        return tree_unflatten(joined, ospec)

    return wrapped


def _out_dims_leaves(out_dims, out_spec, name):
    if isinstance(out_dims, int) or out_dims is None:
        return [out_dims] * out_spec.num_leaves
    leaves = tree_flatten(out_dims, none_is_leaf=True)[0]
    if len(leaves) != out_spec.num_leaves:
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not "
                         f"compatible with the structure of `outputs`. out_dims has structure "
                         f"{tree_flatten(out_dims)[1]} but outputs has structure {out_spec}.")
    return leaves


def _run(func, flat, spec, dims, size, kwargs, out_dims, randomness, name):
    level = VmapLevel(size, randomness)
    push_mode(level)
    try:
        wrapped_args = [BatchedTensor(x, d % x.ndim, level) if d is not None else x
                        for x, d in zip(flat, dims, strict=True)]
        out = func(*tree_unflatten(wrapped_args, spec), **kwargs)
    finally:
        pop_mode(level)
    leaves, ospec = tree_flatten(out)
    odims = _out_dims_leaves(out_dims, ospec, name)
    results = []
    for y, od in zip(leaves, odims, strict=True):
        if not isinstance(y, Value):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type "
                             f"{type(y)}. Did you mean to set out_dims= to None for output?")
        if od is not None and not -(y.ndim + 1) <= od <= y.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-(y.ndim + 1)}, {y.ndim}], but got {od})")
        if isinstance(y, BatchedTensor) and y._level is level:
            phys, bd = y._phys, y._bdim
            if od is None:
                raise ValueError(f"vmap({name}, ..., out_dims={out_dims}): can not return a "
                                 f"BatchedTensor when out_dim is None")
            results.append(phys.movedim(bd, od % phys.ndim) if bd != od % phys.ndim else phys)
        elif od is None:
            results.append(y)
        else:  # unbatched output: every example gets the same value
            d = od % (y.ndim + 1)
            results.append(y.unsqueeze(d).expand(*(y.shape[:d] + (size,) + y.shape[d:])))
    return tree_unflatten(results, ospec)
