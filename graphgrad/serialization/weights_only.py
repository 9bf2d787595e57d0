"""Layer ``serialization``: the ``weights_only=True`` unpickler, PyTorch's rule for loading
files that may not be trusted, and its allowlist (``add_safe_globals``, ``safe_globals``).

It is not ``pickle.Unpickler`` with a filter: it interprets the protocol-2 opcodes
``torch.save`` emits itself, and nothing else, so no opcode can reach code the allowlist
did not name. A ``GLOBAL`` resolves only through the table of allowed names
(``torch_names.ALLOWED_GLOBALS``, the same 144 PyTorch allows, plus what the user
allowlisted); ``REDUCE``/``NEWOBJ`` call only those objects; ``BUILD`` sets state only on
OrderedDicts, tensors and allowlisted classes; a module from ``sys``/``os``/``posix``/``nt``
is refused even if allowlisted. Refusals raise ``pickle.UnpicklingError`` with PyTorch's
wording, naming the global and how to allow it.
"""

from __future__ import annotations

import _compat_pickle
import pickle
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable
from struct import unpack
from typing import Any

from graphgrad.nn.parameter import Parameter
from graphgrad.tensor import Tensor

from .torch_names import ALLOWED_GLOBALS

__all__ = ["WeightsUnpickler", "add_safe_globals", "safe_globals", "get_safe_globals",
           "clear_safe_globals", "weights_only_message", "UNSAFE_MESSAGE"]

BLOCKED_MODULES = ("sys", "os", "posix", "nt")

UNSAFE_MESSAGE = (
    "In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`, and graphgrad.load follows it. Re-running "
    "`graphgrad.load` with `weights_only` set to `False` will likely succeed, but it can "
    "result in arbitrary code execution. Do it only if you got the file from a trusted "
    "source.")

_user_globals: set = set()


def add_safe_globals(safe_globals: list[Callable | tuple[Callable, str]]) -> None:
    """Allow these classes/functions in ``weights_only=True`` loads, process-wide (as
    ``torch.serialization.add_safe_globals``). An entry ``(obj, "module.name")`` allows
    ``obj`` under that name."""
    _user_globals.update(safe_globals)


def get_safe_globals() -> list[Callable | tuple[Callable, str]]:
    return list(_user_globals)


def clear_safe_globals() -> None:
    _user_globals.clear()


class safe_globals:  # noqa: N801 - PyTorch's name
    """``with safe_globals([...]):`` allows the globals only inside the block."""

    def __init__(self, safe_globals: list[Callable | tuple[Callable, str]]):
        self.safe_globals = list(safe_globals)

    def __enter__(self) -> None:
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc) -> None:
        _user_globals.difference_update(self.safe_globals)


def _user_allowed() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in _user_globals:
        if isinstance(entry, tuple):
            if len(entry) != 2:
                raise ValueError(f"Expected tuple of length 2 (global, str of callable full "
                                 f"path), but got tuple of length: {len(entry)}")
            if type(entry[1]) is not str:
                raise TypeError(f"Expected second item in tuple to be str of callable full "
                                f"path, but got: {type(entry[1])}")
            out[entry[1]] = entry[0]
        else:
            out[f"{entry.__module__}.{entry.__qualname__}"] = entry
    return out


def _display(path: str) -> str:
    # PyTorch shows builtins.foo as foo in its message
    return path[len("builtins."):] if path.startswith("builtins.") else path


def weights_only_message(message: str) -> str:
    """The full text of a refused load, as ``torch.load`` words it around the
    unpickler's ``message``."""
    docs = ("\n\nCheck the documentation of graphgrad.load (PyTorch's torch.load) to learn "
            "more about types accepted by default with weights_only "
            "https://pytorch.org/docs/stable/generated/torch.load.html.")
    if "was not an allowed global by default" in message:
        return ("Weights only load failed. This file can still be loaded, to do so you have "
                "two options, do those steps only if you trust the source of the checkpoint. "
                f"\n\t(1) {UNSAFE_MESSAGE}\n\t(2) Alternatively, to load with "
                "`weights_only=True` please check the recommended steps in the following "
                f"error message.\n\tWeightsUnpickler error: {message}{docs}")
    return f"Weights only load failed. {UNSAFE_MESSAGE}\n\n{message}{docs}"


class WeightsUnpickler:
    """Reads one pickle (``data.pkl``) allowing only what ``weights_only=True`` allows.
    ``rebuilders`` binds the tensor rebuild functions to this file's storages and
    ``persistent_load`` resolves its storage references."""

    def __init__(self, data: bytes, persistent_load: Callable[[tuple], Any],
                 rebuilders: dict[str, Any], encoding: str = "utf-8"):
        self.data, self.pos = data, 0
        self.persistent_load = persistent_load
        self.rebuilders = rebuilders
        self.encoding = encoding
        self.user = _user_allowed()
        allowed_values = [*ALLOWED_GLOBALS.values(), *rebuilders.values(), *self.user.values()]
        # torch.Tensor(n) would allocate n uninitialised elements: a class to name, not call
        self.callable_ids = {id(v) for v in allowed_values if v is not Tensor}
        self.user_types = {v for v in self.user.values() if isinstance(v, type)}

    # ------------------------------------------------------------------ reading bytes
    def read(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise pickle.UnpicklingError("pickle data was truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def readline(self) -> bytes:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise pickle.UnpicklingError("pickle data was truncated")
        out = self.data[self.pos:end]
        self.pos = end + 1
        return out

    # ------------------------------------------------------------------ the opcodes
    def find_global(self, module: str, name: str) -> Any:
        # protocol 2 writes Python 2's names (__builtin__.set): read them as Python 3's
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        path = f"{module}.{name}"
        if module in BLOCKED_MODULES:
            raise pickle.UnpicklingError(f"Trying to load unsupported GLOBAL {path} whose "
                                         f"module {module} is blocked.")
        if path in self.rebuilders:
            return self.rebuilders[path]
        if path in ALLOWED_GLOBALS:
            return ALLOWED_GLOBALS[path]
        if path in self.user:
            return self.user[path]
        shown = _display(path)
        raise pickle.UnpicklingError(
            f"Unsupported global: GLOBAL {shown} was not an allowed global by default. "
            f"Please use `graphgrad.serialization.add_safe_globals([{shown}])` or the "
            f"`graphgrad.serialization.safe_globals([{shown}])` context manager to allowlist "
            f"this global if you trust this class/function.")

    def load(self) -> Any:
        stack: list = []
        marks: list[list] = []
        memo: dict[int, Any] = {}
        while True:
            op = self.read(1)[0]
            if op == pickle.PROTO[0]:
                proto = self.read(1)[0]
                if proto != 2:
                    warnings.warn(f"Detected pickle protocol {proto} in the checkpoint, which "
                                  f"was not the default pickle protocol used by `torch.load` "
                                  f"(2). The weights_only Unpickler might not support all "
                                  f"instructions implemented by this protocol.", stacklevel=3)
            elif op == pickle.STOP[0]:
                return stack.pop()
            elif op == pickle.GLOBAL[0]:
                module = self.readline().decode("utf-8")
                name = self.readline().decode("utf-8")
                stack.append(self.find_global(module, name))
            elif op == pickle.NEWOBJ[0]:
                args = stack.pop()
                cls = stack.pop()
                stack.append(self.new_object(cls, args))
            elif op == pickle.REDUCE[0]:
                args = stack.pop()
                func = stack[-1]
                if id(func) not in self.callable_ids:
                    raise pickle.UnpicklingError(
                        f"Trying to call reduce for unrecognized function {func}")
                stack[-1] = func(*args)
            elif op == pickle.BUILD[0]:
                state = stack.pop()
                self.build(stack[-1], state)
            elif op == pickle.APPEND[0]:
                item = stack.pop()
                if type(stack[-1]) is not list:
                    raise pickle.UnpicklingError(
                        f"Can only append to lists, but got {type(stack[-1])}")
                stack[-1].append(item)
            elif op == pickle.APPENDS[0]:
                items, stack = stack, marks.pop()
                if type(stack[-1]) is not list:
                    raise pickle.UnpicklingError(
                        f"Can only extend lists, but got {type(stack[-1])}")
                stack[-1].extend(items)
            elif op == pickle.SETITEM[0]:
                value, key = stack.pop(), stack.pop()
                self.check_mapping(stack[-1], "SETITEM")
                stack[-1][key] = value
            elif op == pickle.SETITEMS[0]:
                items, stack = stack, marks.pop()
                self.check_mapping(stack[-1], "SETITEMS")
                for i in range(0, len(items) - 1, 2):
                    stack[-1][items[i]] = items[i + 1]
            elif op == pickle.MARK[0]:
                marks.append(stack)
                stack = []
            elif op == pickle.TUPLE[0]:
                items, stack = stack, marks.pop()
                stack.append(tuple(items))
            elif op == pickle.TUPLE1[0]:
                stack[-1] = (stack[-1],)
            elif op == pickle.TUPLE2[0]:
                stack[-2:] = [(stack[-2], stack[-1])]
            elif op == pickle.TUPLE3[0]:
                stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
            elif op in _CONSTANTS:
                stack.append(_CONSTANTS[op]())
            elif op == pickle.BININT[0]:
                stack.append(unpack("<i", self.read(4))[0])
            elif op == pickle.BININT1[0]:
                stack.append(self.read(1)[0])
            elif op == pickle.BININT2[0]:
                stack.append(unpack("<H", self.read(2))[0])
            elif op == pickle.BINFLOAT[0]:
                stack.append(unpack(">d", self.read(8))[0])
            elif op == pickle.LONG1[0]:
                stack.append(pickle.decode_long(self.read(self.read(1)[0])))
            elif op == pickle.BINUNICODE[0]:
                n = unpack("<I", self.read(4))[0]
                stack.append(str(self.read(n), "utf-8", "surrogatepass"))
            elif op == pickle.SHORT_BINSTRING[0]:
                raw = self.read(self.read(1)[0])
                stack.append(raw if self.encoding == "bytes" else raw.decode(self.encoding))
            elif op == pickle.BINPERSID[0]:
                pid = stack.pop()
                if type(pid) is not tuple or not pid or pid[0] not in ("storage", b"storage"):
                    raise pickle.UnpicklingError(
                        f"Only persistent_load of storage is allowed, but got {pid!r:.60}")
                stack.append(self.persistent_load(pid))
            elif op in (pickle.BINGET[0], pickle.LONG_BINGET[0]):
                i = self.read(1)[0] if op == pickle.BINGET[0] else unpack("<I", self.read(4))[0]
                if i not in memo:
                    raise pickle.UnpicklingError(f"Memo value not found at index {i}")
                stack.append(memo[i])
            elif op in (pickle.BINPUT[0], pickle.LONG_BINPUT[0]):
                i = self.read(1)[0] if op == pickle.BINPUT[0] else unpack("<I", self.read(4))[0]
                memo[i] = stack[-1]
            else:
                raise pickle.UnpicklingError(f"Unsupported operand {op}")

    def new_object(self, cls: Any, args: tuple) -> Any:
        if cls is Parameter:
            return Parameter(*args)
        if id(cls) in self.callable_ids and isinstance(cls, type):
            return cls.__new__(cls, *args)
        raise pickle.UnpicklingError("Can only create new object for nn.Parameter or classes "
                                     f"allowlisted via `add_safe_globals` but got {cls}")

    def build(self, inst: Any, state: Any) -> None:
        if type(inst) is OrderedDict:  # a state_dict's _metadata
            if not isinstance(state, dict):
                raise pickle.UnpicklingError("OrderedDict state must be a dict")
            inst.__dict__.update(state)
            return
        if isinstance(inst, Tensor) and type(inst) in (Tensor, Parameter):
            return  # tensor attributes (hooks, metadata) are not kept
        if type(inst) not in self.user_types:
            raise pickle.UnpicklingError("Can only build Tensor, Parameter, OrderedDict or "
                                         "types allowlisted via `add_safe_globals`, but got "
                                         f"{type(inst)}")
        if hasattr(inst, "__setstate__"):
            inst.__setstate__(state)
            return
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            inst.__dict__.update(state)
        for k, v in (slots or {}).items():
            setattr(inst, k, v)

    @staticmethod
    def check_mapping(target: Any, opcode: str) -> None:
        if type(target) not in (dict, OrderedDict, Counter):
            raise pickle.UnpicklingError(f"Can only {opcode} for dict, collections.OrderedDict, "
                                         f"collections.Counter, but got {type(target)}")


_CONSTANTS: dict[int, Callable[[], Any]] = {
    pickle.NONE[0]: lambda: None, pickle.NEWTRUE[0]: lambda: True,
    pickle.NEWFALSE[0]: lambda: False, pickle.EMPTY_TUPLE[0]: tuple,
    pickle.EMPTY_LIST[0]: list, pickle.EMPTY_DICT[0]: dict, pickle.EMPTY_SET[0]: set,
}

