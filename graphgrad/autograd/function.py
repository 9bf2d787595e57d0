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
written in graphgrad ops can be differentiated again.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from graphgrad.ops.base import Op
from graphgrad.tensor import Tensor, Value, dispatch, set_grad_mode, zeros_like

from .engine import modified_error

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
        self._inputs = inputs
        self._leaves: dict = {}   # id of forward's leaf of an input -> the input; "output"

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
        raise NotImplementedError("graphgrad: ctx.mark_dirty (a custom Function that writes "
                                  "into its inputs in place) is not supported yet; return a "
                                  "new tensor instead")

    def _bind(self, output: Value) -> None:
        """Once the node is made: saved leaves become the real inputs, a saved forward
        result the node itself, and each is checked against in-place changes from now
        on. (Forward AD binds first: its jvp reads the saved tensors before ``apply``
        returns.)"""
        if "output" not in self._leaves:
            return
        made = self._leaves.pop("output")
        self._saved, self._for_forward = (
            tuple(output if t is made and t is not None else self._leaves.get(id(t), t)
                  for t in saved) for saved in (self._saved, self._for_forward))
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
    saves_inputs = True    # backward may read anything: a second pass must raise

    promotes = False  # the user's forward decides its output dtype

    @classmethod
    def apply(cls, *args, **params):
        """A captured graph's node runs as a fresh call of the Function (own ctx)."""
        return cls.function.apply(*args)

    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        return err  # the user's own forward failed: its error as it is

    @classmethod
    def forward(cls, *arrays, ctx: FunctionCtx):
        fn = cls.function
        # fresh leaves where the call had tensors (its ops are not recorded: grad mode off)
        leaves = [Tensor._make(a) if isinstance(x, Value) else a
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
        if not isinstance(out, Value):
            raise TypeError(f"graphgrad: {fn.__name__}.forward must return one Tensor (a "
                            f"custom Function with several or non-tensor outputs is not "
                            f"supported yet), got {type(out).__name__}")
        ctx._leaves = dict(zip((id(leaf) for leaf in leaves), ctx._inputs, strict=True))
        ctx._leaves["output"] = out
        if id(out) in ctx._non_differentiable:
            ctx._non_differentiable = {"output"}
        return out._array

    @classmethod
    def vjp(cls, g, out, *inputs, ctx: FunctionCtx):
        fn = cls.function
        if fn.backward is Function.backward and fn.vjp is Function.vjp:
            raise NotImplementedError(_NO_BACKWARD)
        grads = fn.backward(ctx, g)
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
        ctx._bind(out)
        tangents = tuple(d if d is not None else zeros_like(a) if isinstance(a, Value) else None
                         for d, a in zip(dots, inputs, strict=True))
        ctx._in_jvp = True
        try:
            return fn.jvp(ctx, *tangents)
        finally:
            ctx._in_jvp = False

    @classmethod
    def batch(cls, vals, bdims, ctx: FunctionCtx):
        fn = cls.function
        if fn.vmap is not Function.vmap:
            out, out_dim = fn.vmap(_VmapInfo(vals, bdims), tuple(bdims), *vals)
            return out, out_dim
        if not fn.generate_vmap_rule:
            raise RuntimeError(_NO_VMAP.format(name=fn.__name__))
        # the forward's ops batch one by one (values exact; under vmap the backward is
        # then autograd's of those ops, where PyTorch vmaps the user's backward too)
        from graphgrad.func import vmap
        dims = tuple(bdims)
        return vmap(lambda *xs: fn._composite(*xs), in_dims=dims)(*vals), 0


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
        ctx = FunctionCtx(cls, args)
        out = dispatch(cls._op, args, {"ctx": ctx})
        if "output" in ctx._non_differentiable and out._requires_grad:
            out = out.detach()  # (mark_non_differentiable: no gradient flows from it)
        ctx._bind(out)
        return out
