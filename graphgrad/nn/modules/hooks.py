"""Layer ``nn``: module hooks, as PyTorch's ``Module._call_impl``: forward pre-hooks and
forward hooks around ``forward``, and full backward (pre-)hooks that see the gradients
with respect to the module's outputs and inputs.

A module without hooks never comes here (``Module.__call__`` checks one attribute).

Backward hooks need all gradients of the inputs (or outputs) at once, after the engine
has summed every contribution to them. So the tensors are routed through one graph
node: a copy (``clone``) for one tensor, their flattened concatenation for several,
split again into copies of each. A hook on that node's tensor fires once, with the whole
gradient; it is split per tensor for the user's hook, whose replacement, if any, is
joined again and flows on. The copies cost memory, which is why they are made only for
modules with backward hooks.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from graphgrad import ops
from graphgrad.tensor import RemovableHandle, Tensor, is_grad_enabled, zeros

__all__ = ["ModuleHooks", "add_hook", "call_with_hooks"]

_NO_INPUT_GRAD = ("Full backward hook is firing when gradients are computed with respect to "
                  "module outputs since no inputs require gradients. See "
                  "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                  "#torch.nn.Module.register_full_backward_hook for more details.")


class _Hook:
    """One registered hook and how to call it (compared by identity, so a handle removes
    exactly its own registration)."""

    __slots__ = ("fn", "with_kwargs", "always_call")

    def __init__(self, fn: Callable, with_kwargs: bool, always_call: bool) -> None:
        self.fn = fn
        self.with_kwargs = with_kwargs
        self.always_call = always_call


class ModuleHooks:
    """A module's hooks, in calling order, by kind."""

    __slots__ = ("forward_pre", "forward", "backward_pre", "backward")

    def __init__(self) -> None:
        self.forward_pre: list[_Hook] = []
        self.forward: list[_Hook] = []
        self.backward_pre: list[_Hook] = []
        self.backward: list[_Hook] = []


def add_hook(hooks: list, fn: Callable, prepend: bool, with_kwargs: bool = False,
             always_call: bool = False) -> RemovableHandle:
    entry = _Hook(fn, with_kwargs, always_call)
    if prepend:
        hooks.insert(0, entry)
    else:
        hooks.append(entry)
    return RemovableHandle(hooks, entry)


def call_with_hooks(module, args: tuple, kwargs: dict, forward: Callable | None = None):
    """``module.forward(*args, **kwargs)`` (or ``forward``'s: a compiled one) with the
    module's hooks around it."""
    hooks: ModuleHooks = module._hooks
    for h in list(hooks.forward_pre):
        if h.with_kwargs:
            result = h.fn(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        else:
            result = h.fn(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    backward = None
    if (hooks.backward or hooks.backward_pre) and is_grad_enabled():
        backward = _BackwardHook(module, list(hooks.backward), list(hooks.backward_pre))
        args = backward.setup_inputs(args)
    result = None
    called = set()
    try:
        result = (module.forward if forward is None else forward)(*args, **kwargs)
        for h in list(hooks.forward):
            called.add(id(h))
            out = h.fn(module, args, kwargs, result) if h.with_kwargs else \
                h.fn(module, args, result)
            if out is not None:
                result = out
        if backward is not None:
            if not isinstance(result, (Tensor, tuple)):
                warnings.warn(f"For backward hooks to be called, module output should be a "
                              f"Tensor or a tuple of Tensors but received {type(result)}",
                              stacklevel=3)
            result = backward.setup_outputs(result)
        return result
    except Exception:
        for h in list(hooks.forward):  # the always_call hooks the error skipped
            if h.always_call and id(h) not in called:
                try:
                    out = h.fn(module, args, kwargs, result) if h.with_kwargs else \
                        h.fn(module, args, result)
                    if out is not None:
                        result = out
                except Exception as e:
                    warnings.warn(f"forward hook with ``always_call=True`` raised an exception "
                                  f"that was silenced as another error was raised in forward: "
                                  f"{e}", stacklevel=3)
        raise


class _BackwardHook:
    """One call's backward hooks: the gradients of the outputs are kept (after the
    backward pre-hooks) until those of the inputs arrive, then the hooks see both."""

    def __init__(self, module, hooks: list, pre_hooks: list) -> None:
        self.module = module
        self.hooks = hooks
        self.pre_hooks = pre_hooks
        self.grad_outputs = None
        self.n_inputs = 0
        self.input_index: list[int] | None = None
        self.n_outputs = 0
        self.output_index: list[int] | None = None

    def setup_inputs(self, args: tuple) -> tuple:
        self.n_inputs = len(args)
        args, self.input_index = _through_one_node(args, self._on_input_grads)
        return args

    def setup_outputs(self, result):
        single = not isinstance(result, tuple)
        outs = (result,) if single else result
        self.n_outputs = len(outs)
        outs, self.output_index = _through_one_node(outs, self._on_output_grads)
        return outs[0] if single else outs

    def _on_output_grads(self, grads: tuple) -> tuple | None:
        self.grad_outputs = _spread(self.output_index, grads, self.n_outputs)
        for h in self.pre_hooks:
            new = h.fn(self.module, self.grad_outputs)
            if new is None:
                continue
            if len(new) != len(self.grad_outputs):
                raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(new)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = tuple(new)
        local = self.grad_outputs
        if self.input_index is None:  # no input requires grad: the hooks run now
            warnings.warn(_NO_INPUT_GRAD, stacklevel=2)
            none = (None,) * self.n_inputs
            for h in self.hooks:
                res = h.fn(self.module, none, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple)
                                            and all(r is None for r in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(local[i] for i in self.output_index)

    def _on_input_grads(self, grads: tuple) -> tuple | None:
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs
            # (e.g. a second backward through a gradient): nothing to report
            return None
        res = _spread(self.input_index, grads, self.n_inputs)
        for h in self.hooks:
            out = h.fn(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = tuple(out)
        self.grad_outputs = None
        return tuple(res[i] for i in self.input_index)


def _spread(index: list[int], values: tuple, size: int) -> tuple:
    """``values`` at positions ``index`` of a ``size``-tuple, None elsewhere."""
    out = [None] * size
    for i, v in zip(index, values, strict=True):
        out[i] = v
    return tuple(out)


def _through_one_node(items: tuple, on_grads: Callable) -> tuple[tuple, list[int] | None]:
    """``items`` with their tensors that require grad replaced by copies that all come
    from one node; a hook on it calls ``on_grads(grads)`` with the gradients of all the
    tensors of ``items``, in order, and a tuple it returns (None: unchanged) replaces
    them. Also returns the tensors' positions (None when no tensor requires grad)."""
    index = [i for i, a in enumerate(items) if isinstance(a, Tensor)]
    needed = [i for i in index if items[i].requires_grad]
    if not needed:
        return items, None
    tensors = [items[i] for i in needed]
    shapes = [tuple(t.shape) for t in tensors]
    if len(tensors) == 1:
        joint = tensors[0].clone()
        copies = [joint]
    else:
        joint = ops.cat([t.reshape(-1) for t in tensors])
        copies = [piece.to(t.dtype) if piece.dtype != t.dtype else piece.clone()
                  for piece, t in zip(_split(joint, shapes), tensors, strict=True)]

    def hook(g):
        # a tensor that needs no gradient gets zeros, as PyTorch's (materialized) ones
        own = dict(zip(needed, (g,) if len(tensors) == 1 else _split(g, shapes), strict=True))
        grads = tuple(own[i] if i in own else zeros(*items[i].shape, dtype=items[i].dtype)
                      for i in index)
        new = on_grads(grads)
        if new is None:
            return None
        # a None from the user's hook means no gradient: zeros flow on
        new = [zeros(*s, dtype=g.dtype) if n is None else n
               for s, n in zip(shapes, (n for i, n in zip(index, new, strict=True) if i in own),
                               strict=True)]
        if len(tensors) == 1:
            return new[0]
        return ops.cat([n.to(g.dtype).reshape(-1) for n in new])

    joint.register_hook(hook)
    out = list(items)
    for i, c in zip(needed, copies, strict=True):
        out[i] = c
    return (tuple(out) if type(items) is tuple else type(items)(*out)), index  # namedtuples


def _split(flat: Tensor, shapes: list[tuple]) -> list[Tensor]:
    """Consecutive pieces of a flat tensor, reshaped to ``shapes``."""
    pieces, start = [], 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        pieces.append(flat[start:start + n].reshape(s))
        start += n
    return pieces
