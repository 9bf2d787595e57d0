"""Layer ``nn``: containers: ``Sequential``, ``ModuleList``, ``ModuleDict``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping

from .module import Module

__all__ = ["Sequential", "ModuleList", "ModuleDict"]


def _index(i: int, n: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of range")
    return i % n


def _delete_and_renumber(container: Module, idx) -> None:
    """``del container[idx]``; the remaining modules are then named 0, 1, ... again, as
    PyTorch's Sequential and ModuleList do (so ``container[i]`` and the names agree)."""
    keys = list(container._modules)
    for k in (keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys))]]):
        del container._modules[k]
    container.__dict__["_modules"] = OrderedDict(
        (str(i), m) for i, m in enumerate(container._modules.values()))


def _insert(container: Module, index: int, module: Module) -> None:
    """Put ``module`` at position ``index`` (0 <= index <= len) and renumber."""
    mods = list(container._modules.values())
    mods.insert(index, module)
    container._modules.clear()
    for i, m in enumerate(mods):
        container.add_module(str(i), m)


def _check_sequential(other) -> None:
    if not isinstance(other, Sequential):
        raise ValueError(f"add operator supports only objects of Sequential class, but "
                         f"{type(other)} is given.")


def _check_factor(seq: Module, other) -> None:
    if not isinstance(other, int):
        raise TypeError(f"unsupported operand type(s) for *: {type(seq)} and {type(other)}")
    if other <= 0:
        raise ValueError(f"Non-positive multiplication factor {other} for {type(seq)}")


class Sequential(Module):
    """Modules applied in order: ``Sequential(a, b)`` or ``Sequential(OrderedDict(...))``."""

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        return items[_index(idx, len(items))][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self._modules))]
        self.add_module(key, module)

    def __delitem__(self, idx) -> None:
        _delete_and_renumber(self, idx)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module: Module) -> Sequential:
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        _insert(self, index + n if index < 0 else index, module)
        return self

    def extend(self, sequential) -> Sequential:
        for layer in sequential:
            self.append(layer)
        return self

    def pop(self, key) -> Module:
        v = self[key]
        del self[key]
        return v

    def __add__(self, other) -> Sequential:
        _check_sequential(other)
        return Sequential().extend(self).extend(other)

    def __iadd__(self, other) -> Sequential:
        _check_sequential(other)
        return self.extend(list(other))

    def __mul__(self, other: int) -> Sequential:
        _check_factor(self, other)
        return Sequential(*(list(self) * other))

    __rmul__ = __mul__

    def __imul__(self, other: int) -> Sequential:
        _check_factor(self, other)
        return self.extend(list(self) * (other - 1))

    def forward(self, input):
        for m in self:   # (not self._modules: jit.script reads the loop as written)
            input = m(input)
        return input


class ModuleList(Module):
    """A list of modules, registered (so their parameters are found)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[_index(idx, len(mods))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self))), module)

    def __delitem__(self, idx) -> None:
        _delete_and_renumber(self, idx)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        if not isinstance(modules, Iterable):
            raise TypeError(f"ModuleList.extend should be called with an iterable, but got "
                            f"{type(modules).__name__}")
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        _insert(self, index, module)

    def pop(self, key) -> Module:
        v = self[key]
        del self[key]
        return v

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward: iterate over it")

    def __repr__(self) -> str:
        """PyTorch's: runs of modules that print alike show once, ``(0-5): 6 x Layer(...)``."""
        blocks: list[list] = []  # [first index, last index, repr]
        for i, m in enumerate(self):
            r = repr(m)
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        if not blocks:
            return "ModuleList()"
        lines = [(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}").replace(
            "\n", "\n  ") for a, b, r in blocks]
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered, in insertion order."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key: str) -> Module:
        return self._modules.pop(key)

    def update(self, modules) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in pairs:
            self[k] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward: index it")
