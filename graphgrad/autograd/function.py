"""Layer ``autograd``: ``autograd.Function``, custom ops with a forward and a backward
written by the user, with PyTorch 2.x's contract.

A Function subclass gets its own op class (``_CustomOp``, made once per subclass), so
``Function.apply`` is an op call like any other: it goes through the dispatch stack
(forward AD asks the op's ``jvp``, which calls the user's ``jvp``; vmap asks its batching
rule, which calls the user's ``vmap`` or, with ``generate_vmap_rule``, runs the forward
under vmap), and eagerly it becomes one graph node named ``<Name>Backward`` whose vjp
calls the user's ``backward`` with the node's context. The forward runs on fresh leaves
of the inputs with grad mode off (its ops are not recorded); tensors it saves with
``ctx.save_for_backward`` are mapped back to the real inputs and output, so a backward
written in graphgrad ops can be differentiated again. A forward returning several
values is still one node (``function_outputs``: its output packs them); one that wrote
into an input (``ctx.mark_dirty``) returns that input, rebased on the node as every
in-place op's result is.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from graphgrad.ops.base import Op
from graphgrad.ops.inplace import check_allowed
from graphgrad.tensor import Tensor, Value, dispatch, set_grad_mode, zeros_like
from graphgrad.tensor.views import bump_version, old_identity, rebase

from .engine import modified_error
from .function_outputs import (pack_arrays, pack_batched, pack_tensors, unpack,
                               unpack_grads)

__all__ = ["Function", "FunctionCtx", "once_differentiable"]

_NO_VMAP = ("You tried to vmap over {name}, but it does not have vmap support. Please override "
            "and implement the vmap staticmethod or set generate_vmap_rule=True. For more "
            "details, please see https://pytorch.org/docs/main/notes/extending.func.html")
_NO_JVP = ("You must implement the jvp function for custom autograd.Function to use it with "
           "forward mode AD.")
_NO_BACKWARD = ("You must implement either the backward or vjp method for your custom "
                "autograd.Function to use it with backward mode AD.")


class FunctionCtx:
    """The ``ctx`` of a custom Function call: what forward (or ``setup_context``) tells
    backward."""

    def __init__(self, function: type, inputs: tuple):
        self._function = function
        self.needs_input_grad = tuple(isinstance(a, Value) and a._requires_grad
                                      for a in inputs)
        self.materialize_grads = True
        self._saved: tuple = ()
        self._versions: tuple = ()
        self._for_forward: tuple = ()
        self._in_jvp = False
        self._non_differentiable: set[int] = set()
        self._dirty: set[int] = set()
        self._dirty_input: int | None = None  # position of the input written in place
        self._inputs = inputs
        self._leaves: dict = {}   # id of forward's leaf of an input -> the input; "output"
        self._layout = None       # where each output lives, for forward's tuple results

    # A captured graph's node holds the ctx of the call that was traced; graphs traced
    # twice must compare equal, and each run makes a fresh ctx (``_CustomOp.apply``)
    def __eq__(self, other) -> bool:
        return isinstance(other, FunctionCtx) and other._function is self._function

    def __hash__(self) -> int:
        return hash(self._function)

    def __repr__(self) -> str:
        return f"<ctx of {self._function.__name__}>"

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Value):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._saved = tensors

    def save_for_forward(self, *tensors) -> None:
        """What ``jvp`` reads as ``ctx.saved_tensors`` (PyTorch keeps the two apart)."""
        self._for_forward = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self._in_jvp:
            return self._for_forward
        for t, v in zip(self._saved, self._versions, strict=True):
            if t is not None and t._version != v:
                raise modified_error(t, t._version, v)
        return self._saved

    def mark_non_differentiable(self, *outputs) -> None:
        self._non_differentiable.update(id(o) for o in outputs)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """``forward`` wrote into these inputs in place (and must return them)."""
        self._dirty.update(id(t) for t in tensors)

    def _bind(self, outputs) -> None:
        """Once the node is made: saved leaves become the real inputs, saved forward
        results the outputs the user gets (``outputs``: one, or a tuple as forward
        returned it), and each is checked against in-place changes from now on. (Forward
        AD binds a single output first: its jvp reads the saved tensors before ``apply``
        returns.)"""
        if "output" not in self._leaves:
            return
        made = self._leaves.pop("output")
        if not isinstance(made, tuple):
            made, outputs = (made,), (outputs,)
        real = dict(self._leaves)
        real.update((id(m), o) for m, o in zip(made, outputs, strict=True)
                    if isinstance(m, Value))
        self._saved, self._for_forward = (
            tuple(real.get(id(t), t) if t is not None else None for t in saved)
            for saved in (self._saved, self._for_forward))
        self._versions = tuple(t._version if t is not None else 0 for t in self._saved)
        self._leaves = {}


def once_differentiable(fn: Callable) -> Callable:
    """A backward that is not differentiable itself: it runs with grad mode off, so its
    results never require grad (PyTorch 2.13's behaviour)."""
    @functools.wraps(fn)
    def wrapper(ctx, *grads):
        prev = set_grad_mode(False)
        try:
            return fn(ctx, *grads)
        finally:
            set_grad_mode(prev)
    return wrapper


class _CustomOp(Op):
    """The op of one Function subclass (``function``); ``ctx`` is its one parameter."""

    function: type = None  # set per subclass
    # backward reads inputs only through ctx.saved_tensors, which checks their versions
    # itself (an input written in place by the call, mark_dirty, must not fail the check)
    saves_inputs = ()

    promotes = False  # the user's forward decides its output dtype

    @classmethod
    def apply(cls, *args, **params):
        """A captured graph's node runs as a fresh call of the Function (own ctx); with
        several outputs the node is the packed one (the graph unpacks it)."""
        fn = cls.function
        ctx, out = fn._call(args)
        if ctx._layout is None:
            return fn._finish(ctx, out)
        ctx._bind(unpack(out, ctx._layout))
        return out

    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        return err  # the user's own forward failed: its error as it is

    @classmethod
    def forward(cls, *arrays, ctx: FunctionCtx):
        fn = cls.function
        # fresh leaves where the call had tensors (its ops are not recorded: grad mode off)
        leaves = [_leaf_of(x, a) if isinstance(x, Value) else a
                  for a, x in zip(arrays, ctx._inputs, strict=True)]
        prev = set_grad_mode(False)
        try:
            if fn._uses_setup_context():
                out = fn.forward(*leaves)
                fn.setup_context(ctx, tuple(leaves), out)
            else:
                out = fn.forward(ctx, *leaves)
        finally:
            set_grad_mode(prev)
        ctx._leaves = dict(zip((id(leaf) for leaf in leaves), ctx._inputs, strict=True))
        ctx._leaves["output"] = out
        if isinstance(out, (tuple, list)):
            if ctx._dirty:
                raise NotImplementedError(f"graphgrad: {fn.__name__} marks inputs dirty and "
                                          f"returns several outputs; not supported yet")
            packed, ctx._layout = pack_arrays(tuple(out), ctx._non_differentiable)
            ctx._leaves["output"] = tuple(out)
            return packed
        if not isinstance(out, Value):
            raise TypeError(f"graphgrad: {fn.__name__}.forward must return a Tensor or a "
                            f"tuple, got {type(out).__name__}")
        if ctx._dirty:
            ctx._dirty_input = _dirty_input(fn, ctx, leaves, out)
        if id(out) in ctx._non_differentiable:
            ctx._non_differentiable = {"output"}
        return out._array

    @classmethod
    def vjp(cls, g, out, *inputs, ctx: FunctionCtx):
        fn = cls.function
        if fn.backward is Function.backward and fn.vjp is Function.vjp:
            raise NotImplementedError(_NO_BACKWARD)
        grads = (fn.backward(ctx, g) if ctx._layout is None else
                 fn.backward(ctx, *unpack_grads(g, ctx._layout, ctx.materialize_grads)))
        if not isinstance(grads, tuple):
            grads = (grads,)
        name = cls.backward_name
        if len(grads) != len(inputs):
            raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                               f"(expected {len(inputs)}, got {len(grads)})")
        for i, (gi, a) in enumerate(zip(grads, inputs, strict=True)):
            if gi is None or not isinstance(a, Value):
                continue
            if not isinstance(gi, Value):
                raise TypeError(f"function {name} returned a gradient of type "
                                f"{type(gi).__name__} at index {i}; expected a Tensor or None")
            if not _broadcasts_to(gi.shape, a.shape):
                raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} "
                                   f"- got {list(gi.shape)} but expected shape compatible with "
                                   f"{list(a.shape)}")
        return tuple(gi if isinstance(a, Value) else None
                     for gi, a in zip(grads, inputs, strict=True))

    @classmethod
    def jvp(cls, dots, out, *inputs, ctx: FunctionCtx):
        fn = cls.function
        if fn.jvp is Function.jvp:
            raise NotImplementedError(_NO_JVP)
        if ctx._layout is None:
            ctx._bind(out)  # (several outputs: forward's own results serve jvp)
        tangents = tuple(d if d is not None else zeros_like(a) if isinstance(a, Value) else None
                         for d, a in zip(dots, inputs, strict=True))
        ctx._in_jvp = True
        try:
            result = fn.jvp(ctx, *tangents)
        finally:
            ctx._in_jvp = False
        if ctx._layout is None:
            return result
        return pack_tensors(tuple(result), ctx._layout)

    @classmethod
    def batch(cls, vals, bdims, ctx: FunctionCtx):
        fn = cls.function
        if fn.vmap is not Function.vmap:
            info = _VmapInfo(vals, bdims)
            out, out_dim = fn.vmap(info, tuple(bdims), *vals)
            if not isinstance(out, (tuple, list)):
                return out, out_dim
            out = tuple(out)
            dims = out_dim if isinstance(out_dim, (tuple, list)) else (out_dim,) * len(out)
            packed, ctx._layout = pack_batched(out, tuple(dims), info.batch_size, fn.__name__)
            return packed, 0
        if not fn.generate_vmap_rule:
            raise RuntimeError(_NO_VMAP.format(name=fn.__name__))
        # the forward's ops batch one by one (values exact; under vmap the backward is
        # then autograd's of those ops, where PyTorch vmaps the user's backward too)
        from graphgrad.func import vmap

        def composite(*xs):
            out = fn._composite(*xs)
            if not isinstance(out, (tuple, list)):
                return out
            packed, ctx._layout = pack_batched(
                tuple(o.unsqueeze(0) for o in out), (0,) * len(out), 1, fn.__name__)
            return packed.reshape(-1)
        return vmap(composite, in_dims=tuple(bdims))(*vals), 0


def _leaf_of(x: Value, array) -> Tensor:
    """What forward gets for input ``x``: a new leaf on its buffer that shares its version
    counter (a write into it is a write into ``x``, as in PyTorch, where forward gets the
    inputs themselves)."""
    if x._version_counter is None:
        x._version_counter = [0]
    leaf = Tensor._make(array)
    leaf._version_counter = x._version_counter
    return leaf


def _dirty_input(fn: type, ctx: FunctionCtx, leaves: list, out: Value) -> int:
    """The position of the input ``forward`` wrote into (``mark_dirty``): it must be an
    input, and it must be what forward returned, as PyTorch requires."""
    positions = [i for i, leaf in enumerate(leaves) if id(leaf) in ctx._dirty]
    if len(positions) != len(ctx._dirty) or id(out) not in ctx._dirty:
        raise RuntimeError("Some elements marked as dirty during the forward method were not "
                           "returned as output. The inputs that are modified inplace must all "
                           "be outputs of the Function.")
    return positions[0]


def _write_back(ctx: FunctionCtx, out: Value) -> Value:
    """A forward that wrote into input ``x`` in place (``mark_dirty``) returns ``x``: its
    version moves on and, when the call is recorded, ``x`` becomes the call's node while
    its earlier self keeps the edges made before (as every in-place op does)."""
    x = ctx._inputs[ctx._dirty_input]
    if x._extras is not None and x._extras.base is not None and out._requires_grad:
        raise NotImplementedError(f"graphgrad: {ctx._function.__name__} marks a view dirty "
                                  f"in a recorded graph; this is not supported yet (clone the "
                                  f"view first)")
    if out._requires_grad:
        if x._requires_grad and x.op is None:
            raise RuntimeError("a leaf Variable that requires grad has been used in an "
                               "in-place operation.")
        check_allowed(x)
        old = old_identity(x)
        out.inputs = tuple(old if a is x else a for a in out.inputs)
        bump_version(x)
        rebase(x, out, old)
        x._requires_grad = True
    else:
        bump_version(x)
    ctx._saved = tuple(x if t is out else t for t in ctx._saved)
    ctx._versions = tuple(t._version if t is not None else 0 for t in ctx._saved)
    return x


class _VmapInfo:
    """``info`` of a Function's ``vmap`` staticmethod: the batch size and randomness."""

    def __init__(self, vals, bdims):
        self.batch_size = next(v.shape[d] for v, d in zip(vals, bdims, strict=True)
                               if d is not None)
        self.randomness = "error"


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


class Function:
    """Base of custom autograd functions (``torch.autograd.Function``): subclass it with
    static ``forward`` and ``backward`` (and optionally ``setup_context``, ``jvp``,
    ``vmap``), then call ``MyFunction.apply(*args)``."""

    generate_vmap_rule = False
    _op: type = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        # an op class of its own (not in graphgrad's registry: the name starts with "_")
        op = type(f"_{cls.__name__}Op", (_CustomOp,), {"function": cls})
        op.__name__ = op.__qualname__ = cls.__name__
        op.backward_name = f"{cls.__name__}Backward"
        cls._op = op

    def __init__(self, *args, **kwargs):
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd functions "
                      f"are all static, so you should invoke them on the class itself. "
                      f"Instantiating an autograd function will raise an error in a future "
                      f"version of PyTorch.", DeprecationWarning, stacklevel=2)

    @staticmethod
    def forward(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> Any:
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError(_NO_BACKWARD)

    vjp = backward

    @staticmethod
    def jvp(ctx: FunctionCtx, *grad_inputs: Any) -> Any:
        raise NotImplementedError(_NO_JVP)

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("vmap is not implemented")

    @classmethod
    def _uses_setup_context(cls) -> bool:
        return cls.setup_context is not Function.setup_context

    @classmethod
    def _composite(cls, *args):
        """The forward as plain graphgrad ops (for ``generate_vmap_rule``)."""
        ctx = FunctionCtx(cls, args)
        if cls._uses_setup_context():
            return cls.forward(*args)
        return cls.forward(ctx, *args)

    @classmethod
    def apply(cls, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{cls.__name__}.apply() takes positional arguments only "
                            f"(PyTorch's Function.apply does not accept keywords)")
        if cls.forward is Function.forward:
            raise NotImplementedError("You must implement the forward function for custom "
                                      "autograd.Function.")
        ctx, out = cls._call(args)
        if ctx._layout is None:
            return cls._finish(ctx, out)
        outs = unpack(out, ctx._layout)
        ctx._bind(outs)
        return outs

    @classmethod
    def _call(cls, args: tuple) -> tuple:
        """``(ctx, the op's output)`` of one call."""
        ctx = FunctionCtx(cls, args)
        return ctx, dispatch(cls._op, args, {"ctx": ctx})

    @classmethod
    def _finish(cls, ctx: FunctionCtx, out: Value) -> Value:
        """The one output of a call as the user gets it."""
        if "output" in ctx._non_differentiable and out._requires_grad:
            out = out.detach()  # (mark_non_differentiable: no gradient flows from it)
        ctx._bind(out)
        if ctx._dirty_input is not None:
            return _write_back(ctx, out)
        return out
