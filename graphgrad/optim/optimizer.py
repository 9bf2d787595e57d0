"""Layer ``optim``: ``Optimizer``, the base of every optimizer, in PyTorch's shape:
``param_groups`` (a list of dicts holding ``params`` and hyperparameters), per-parameter
``state``, ``zero_grad``, ``step(closure)`` (with step pre/post hooks) and
``state_dict``/``load_state_dict``.

Subclasses update parameters under ``no_grad`` in place, so the parameters keep their
identity (and modules and other optimizers still see them). Most update each parameter
on its own: they define ``_update(p, group)``, which ``step`` calls for every parameter
with a gradient, and start it with ``_begin_update`` (state, step count, ``maximize``,
weight decay, complex entries as real pairs), the preamble PyTorch's single-tensor
paths share.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from graphgrad.autograd import no_grad
from graphgrad.backend import xp
from graphgrad.tensor import RemovableHandle, Tensor, set_grad_mode, tensor

from .fused import buffer, decay, grad_array, real_view, written

__all__ = ["Optimizer", "required", "check_nonnegative", "implementation"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


# PyTorch's wording of "Invalid <what>: <value>" for a negative hyperparameter
_WHAT = {"lr": "learning rate", "eps": "epsilon value"}


def check_nonnegative(**values: float) -> None:
    """Raise PyTorch's ``ValueError`` for the first negative hyperparameter, in order."""
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {_WHAT.get(name, name + ' value')}: {value}")


def implementation(**options) -> dict:
    """PyTorch's implementation options, to keep in ``defaults`` so that parameter
    groups and state_dicts have PyTorch's keys: ``foreach`` and ``fused`` choose its
    kernels, ``capturable`` keeps the state CUDA-graph safe. graphgrad has one
    implementation (the fused NumPy updates of ``fused.py``), with the same results
    whichever is asked for, so they only record the choice, with PyTorch's checks.
    ``differentiable=True`` (gradients through the step) is not supported."""
    if options.get("fused") and options.get("differentiable"):
        raise RuntimeError("`fused` does not support `differentiable`")
    if options.get("fused") and options.get("foreach"):
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if options.get("differentiable"):
        raise NotImplementedError("differentiable=True is not supported: graphgrad's optimizer "
                                  "steps update the parameters in place outside autograd")
    return options


class Optimizer:
    """``Optimizer(params, defaults)``: ``params`` is an iterable of tensors, or of dicts
    (parameter groups, each with its own hyperparameters)."""

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        self._optimizer_step_pre_hooks: list[Callable] = []
        self._optimizer_step_post_hooks: list[Callable] = []
        _patch_step_function(type(self))
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + type(params).__name__)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (a dict with ``params`` and any hyperparameters; the others take
        the defaults), with PyTorch's checks. Parameters may be given as ``(name, tensor)``
        pairs; the names are kept in the group's ``param_names``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        group = param_group
        params = group["params"]
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        params = [params] if isinstance(params, Tensor) else list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        group["params"] = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param "
                                 "names are missing")
            group["param_names"] = names
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if p.op is not None and not p.retains_grad:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in group["params"]}) != len(group["params"]):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see github.com/pytorch/pytorch/"
                          "issues/40967 for more information", stacklevel=3)
        for other in self.param_groups:
            if ("param_names" in group) != ("param_names" in other):
                with_names = "with names" if "param_names" in group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {with_names} to the optimizer")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (``set_to_none``), or zero them in place: a gradient that
        is part of a graph (``backward(create_graph=True)``) is detached first, as in
        PyTorch, so holders of ``p.grad`` see the zeros and no history."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is None:
                    continue
                if set_to_none:
                    p._grad = None
                    continue
                if g.op is not None:
                    g.detach_()
                g._requires_grad = False
                if g._array.flags.writeable:
                    g._array[...] = 0
                else:  # an expanded (read-only) gradient: give it memory of its own
                    g._array = xp.zeros_like(g._array)
                written(g)

    def step(self, closure: Callable[[], Any] | None = None):
        """One update: the closure's loss (run with grad enabled, before the update), then
        ``self._update(p, group)`` for every parameter that has a gradient, under
        ``no_grad``. Optimizers that update each parameter on its own define ``_update``;
        the others (LBFGS) define ``step``."""
        if not hasattr(self, "_update"):
            raise NotImplementedError
        loss = self._closure_loss(closure)
        prev = set_grad_mode(False)   # (no_grad's effect, without its object per step)
        try:
            for group in self.param_groups:
                self._update_group(group)
        finally:
            set_grad_mode(prev)
        return loss

    def _update_group(self, group: dict) -> None:
        """``_update`` for each parameter of ``group`` that has a gradient; an optimizer
        may update a whole group at once (PyTorch's ``foreach`` loops: SGD's plain step)."""
        for p in group["params"]:
            if p._grad is not None:
                self._update(p, group)

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` runs before each ``step`` (``args`` start with
        the optimizer, as in PyTorch); it may return ``(new_args, new_kwargs)`` for the step
        to use."""
        self._optimizer_step_pre_hooks.append(hook)
        return RemovableHandle(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` runs after each ``step``."""
        self._optimizer_step_post_hooks.append(hook)
        return RemovableHandle(self._optimizer_step_post_hooks, hook)

    def _begin_update(self, p: Tensor, group: dict,
                      **init: Callable[[Tensor], Tensor]) -> tuple[float, Any, Any, dict]:
        """Start one parameter's update as PyTorch's single-tensor paths do: the state
        (created on the first step as PyTorch's: ``step``, a float32 0-d tensor, then
        ``name: init[name](p)`` in order), the step counted, the gradient negated
        (``maximize``) and weight-decayed (``decoupled_weight_decay``: AdamW's, on the
        parameter).
        Returns the step number, the arrays of the parameter and the gradient, and the
        state's arrays by name; complex ones as real views (PyTorch's ``view_as_real``:
        real and imaginary parts are separate entries). Write them in place, then call
        ``_end_update``."""
        param = buffer(p, f"{type(self).__name__}.step")
        g = grad_array(p, group["maximize"])
        state = self.state[p]
        if not state:
            state["step"] = tensor(0.0)
            for name, make in init.items():
                state[name] = make(p)
        state["step"]._array += 1
        g = decay(param, g, group["lr"], group.get("weight_decay", 0),
                  group.get("decoupled_weight_decay", False))
        arrays = {name: real_view(buffer(state[name])) for name in init}
        return (float(state["step"]._array), real_view(param),
                real_view(xp.ascontiguousarray(g)), arrays)

    def _end_update(self, p: Tensor) -> None:
        """Bump the versions of ``p`` and its state tensors, written in place."""
        written(p, *(v for v in self.state[p].values() if isinstance(v, Tensor)))

    def _closure_loss(self, closure: Callable | None):
        """Run the closure (with grad enabled, before the update), as PyTorch's step."""
        if closure is None:
            return None
        from graphgrad.autograd import enable_grad
        with enable_grad():
            return closure()

    # ---- checkpoints --------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``,
        parameters numbered in order of appearance across the groups."""
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        params = {id(p): p for g in self.param_groups for p in g["params"]}
        state = {index[k]: dict(v) for k, v in ((id(p), s) for p, s in self.state.items())
                 if k in index and k in params}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        lookup = {}
        for mine, saved in zip(self.param_groups, groups, strict=True):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
            lookup.update(zip(saved["params"], mine["params"], strict=True))
        self.state = defaultdict(dict)
        for k, s in state_dict["state"].items():
            p = lookup[int(k)]
            self.state[p] = {name: _cast_like(v, p, name) for name, v in s.items()}
        for mine, saved in zip(self.param_groups, groups, strict=True):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(mine.get(k), tuple) else v

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(k for k in g if k != "params"):
                lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


def _patch_step_function(cls: type) -> None:
    """Make ``cls.step`` run the step hooks, once per class, as PyTorch patches the
    class of each optimizer it makes (a subclass's own ``step`` gets its own wrapper)."""
    step = cls.step
    if getattr(step, "hooked", False):
        return

    @wraps(step)
    def hooked_step(*args, **kwargs):
        self = args[0]  # as PyTorch's, the hooks' args include the optimizer itself
        if not (self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks):
            return step(*args, **kwargs)   # (the common case: no copies of empty lists)
        for hook in list(self._optimizer_step_pre_hooks):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, "
                                       f"new_kwargs), but got {result}.")
                args, kwargs = result
        out = step(*args, **kwargs)
        for hook in list(self._optimizer_step_post_hooks):
            hook(self, args, kwargs)
        return out

    hooked_step.hooked = True
    cls.step = hooked_step


def _cast_like(value, param: Tensor, name: str):
    """State tensors take the parameter's dtype (``step`` keeps its own), as copies."""
    if isinstance(value, Tensor):
        with no_grad():
            if name != "step" and value.is_floating_point():
                return value.to(param.dtype).clone()
            return value.clone()
    if isinstance(value, list):
        return [_cast_like(v, param, name) for v in value]
    return value
