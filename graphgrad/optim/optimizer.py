"""Layer ``optim``: ``Optimizer``, the base of every optimizer, in PyTorch's shape:
``param_groups`` (a list of dicts holding ``params`` and hyperparameters), per-parameter
``state``, ``zero_grad``, ``step(closure)`` and ``state_dict``/``load_state_dict``.

Subclasses update parameters under ``no_grad`` with in-place tensor ops, so the
parameters keep their identity (and modules and other optimizers still see them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from graphgrad.autograd import no_grad
from graphgrad.tensor import Tensor

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


class Optimizer:
    """``Optimizer(params, defaults)``: ``params`` is an iterable of tensors, or of dicts
    (parameter groups, each with its own hyperparameters)."""

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
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
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if p.op is not None:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p._grad is None:
                    continue
                if set_to_none:
                    p._grad = None
                else:
                    p._grad._array[...] = 0

    def step(self, closure: Callable[[], Any] | None = None):
        raise NotImplementedError

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
