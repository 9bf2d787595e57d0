"""Layer ``nn``: ``Module``, the base class of every layer, in PyTorch's shape.

A module owns parameters, buffers and submodules, registered by assignment
(``self.fc = Linear(...)``) into three ordered dicts; everything else (``parameters``,
``state_dict``, ``train``, ``to``, ``repr``) walks those dicts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from graphgrad.backend import to_dtype, xp
from graphgrad.tensor import RemovableHandle, Tensor

from ..parameter import Buffer, Parameter
from .hooks import ModuleHooks, add_hook, call_with_hooks

__all__ = ["Module"]


class _IncompatibleKeys(tuple):
    """``load_state_dict``'s result: ``(missing_keys, unexpected_keys)``."""

    @property
    def missing_keys(self) -> list:
        return self[0]

    @property
    def unexpected_keys(self) -> list:
        return self[1]

    def __repr__(self) -> str:
        if not self[0] and not self[1]:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self[0]}, unexpected_keys={self[1]})"


class Module:
    """Base class for all neural network modules; subclasses define ``forward``."""

    training: bool
    _hooks: ModuleHooks | None = None  # set on an instance by its first register_*_hook

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = OrderedDict()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  f'"forward" function')

    def __call__(self, *args, **kwargs):
        if self._hooks is None:  # the training hot path: one attribute check
            return self.forward(*args, **kwargs)
        return call_with_hooks(self, args, kwargs)

    # ---- hooks --------------------------------------------------------------------
    def _hook_lists(self) -> ModuleHooks:
        hooks = self.__dict__.get("_hooks")
        if hooks is None:
            hooks = self.__dict__["_hooks"] = ModuleHooks()
        return hooks

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (or ``(module, args, kwargs)``) before ``forward``; it
        may return new args (or ``(args, kwargs)``)."""
        return add_hook(self._hook_lists().forward_pre, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (or ``(module, args, kwargs, output)``) after
        ``forward``; it may return a new output. ``always_call``: also when forward
        raises."""
        return add_hook(self._hook_lists().forward, hook, prepend, with_kwargs, always_call)

    def register_full_backward_pre_hook(self, hook: Callable,
                                        prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` when the gradients w.r.t. the module's outputs
        are known; it may return new ones."""
        return add_hook(self._hook_lists().backward_pre, hook, prepend)

    def register_full_backward_hook(self, hook: Callable,
                                    prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients w.r.t. the
        module's tensor inputs are known (None for an input that needs none); it may
        return new grad_input."""
        return add_hook(self._hook_lists().backward, hook, prepend)

    # ---- registration ---------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_parameters" not in d and isinstance(value, (Parameter, Module)):
            raise AttributeError("cannot assign parameters or modules before "
                                 "Module.__init__() call")
        params, modules, buffers = d.get("_parameters"), d.get("_modules"), d.get("_buffers")
        if isinstance(value, Parameter):
            self._forget(name, keep="_parameters")
            params[name] = value
        elif params is not None and name in params:
            if value is not None and not isinstance(value, Parameter):
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (graphgrad.nn.Parameter or None expected)")
            params[name] = value
        elif isinstance(value, Module):
            self._forget(name, keep="_modules")
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (graphgrad.nn.Module or None expected)")
            modules[name] = value
        elif isinstance(value, Buffer):
            self._forget(name, keep="_buffers")
            buffers[name] = value
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(graphgrad.Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str) -> None:
        """Remove ``name`` from every place but the ``keep`` store, where the new value
        then takes the old one's position (as in PyTorch: ``seq[0] = layer`` must not
        move the layer to the end, nor ``model.fc = Linear(...)`` reorder state_dict)."""
        d = self.__dict__
        d.pop(name, None)
        for key in ("_parameters", "_modules", "_buffers"):
            if key != keep:
                d[key].pop(name, None)
        d["_non_persistent"].discard(name)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[key]:
                del self.__dict__[key][name]
                self.__dict__["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def _check_name(self, kind: str, name, store: str) -> None:
        """PyTorch's checks on a name given to ``register_*``/``add_module``: a string, not
        empty, no ".", and not an attribute of another kind already."""
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if not name:
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."'
                           + (f", got: {name}" if kind == "module" else ""))
        if hasattr(self, name) and name not in self.__dict__[store]:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._check_name("parameter", name, "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (graphgrad.nn.Parameter or None required)")
        self._forget(name, keep="_parameters")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._check_name("buffer", name, "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (graphgrad.Tensor or None required)")
        self._forget(name, keep="_buffers")
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        self._check_name("module", name, "_modules")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name, keep="_modules")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The submodule at the dotted path ``target`` ("" is this module)."""
        mod = self
        for item in target.split(".") if target else []:
            if not hasattr(mod, item):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def _get_member(self, target: str) -> tuple[Module, str, Any]:
        """(module, name, value) for the dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{type(mod).__name__} has no attribute `{name}`")
        return mod, name, getattr(mod, name)

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at the dotted path ``target`` (``"encoder.0.weight"``)."""
        _, name, value = self._get_member(target)
        if not isinstance(value, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return value

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at the dotted path ``target``."""
        mod, name, value = self._get_member(target)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return value

    # ---- walking ----------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, each once."""
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if remove_duplicate:
                if id(mod) in memo:
                    continue
                memo.add(id(mod))
            yield name, mod
            children = [(f"{name}.{k}" if name else k, m) for k, m in mod._modules.items()
                        if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, key: str, prefix: str, recurse: bool,
                       remove_duplicate: bool = True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, t in mod.__dict__[key].items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- state ------------------------------------------------------------------
    def state_dict(self, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by dotted name (detached unless keep_vars)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict: dict, strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy values into this module's parameters and buffers (in place, no grad)."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, t in own.items():
            if k not in state_dict:
                continue
            src = state_dict[k]
            if not isinstance(src, (Tensor, xp.ndarray)):
                errors.append(f'While copying the parameter named "{k}", expected '
                              f"graphgrad.Tensor or Tensor-like object from checkpoint but "
                              f"received {type(src)}")
                continue
            src_shape = tuple(src.shape)
            if src_shape != tuple(t.shape):
                errors.append(f'size mismatch for {k}: copying a param with shape '
                              f'{_size(src_shape)} from checkpoint, the shape in current model '
                              f'is {_size(tuple(t.shape))}.')
                continue
            if assign:  # the checkpoint's tensor itself (its dtype too) becomes the entry
                owner_name, _, name = k.rpartition(".")
                owner = self.get_submodule(owner_name)
                value = src if isinstance(src, Tensor) else Tensor(src)
                if isinstance(t, Parameter):
                    value = Parameter(value, requires_grad=t.requires_grad)
                setattr(owner, name, value)
                continue
            arr = src._array if isinstance(src, Tensor) else src
            t._array[...] = arr
            if t._version_counter is not None:
                t._version_counter[0] += 1
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ". ")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        return _IncompatibleKeys((missing, unexpected))

    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p._grad is None:
                continue
            if set_to_none:
                p._grad = None
            else:
                p._grad._array[...] = 0

    def to(self, *args, **kwargs) -> Module:
        """``to(dtype)`` casts floating-point parameters and buffers in place (they keep
        their identity, as optimizers hold them); devices other than the CPU raise."""
        dtype = kwargs.get("dtype")
        for a in args:
            if isinstance(a, str):
                if not a.startswith("cpu"):
                    raise RuntimeError(f"graphgrad runs on the CPU only; device {a!r} is not "
                                       "available")
            elif isinstance(a, Tensor):
                dtype = a.dtype
            elif a is not None:
                dtype = a
        if dtype is None:
            return self
        np_dtype = to_dtype(dtype).np
        if np_dtype.kind not in "fc":
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={to_dtype(dtype)}")
        for t in [*self.parameters(), *self.buffers()]:
            if t._array.dtype.kind in "fc" and t._array.dtype != np_dtype:
                t._array = t._array.astype(np_dtype)
                if t._grad is not None:
                    t._grad._array = t._grad._array.astype(np_dtype)
        return self

    def half(self) -> Module:
        return self.to(dtype="float16")

    def float(self) -> Module:
        return self.to(dtype="float32")

    def double(self) -> Module:
        return self.to(dtype="float64")

    def cpu(self) -> Module:
        return self

    # ---- printing ---------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {sub}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted({*super().__dir__(), *self._parameters, *self._buffers, *self._modules})


def _size(shape: tuple) -> str:
    return f"graphgrad.Size({list(shape)})"
