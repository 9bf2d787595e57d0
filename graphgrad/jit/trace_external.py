"""Layer ``jit``: where the user's code is, and the watch that sees it call external code
while ``jit.trace`` runs it.

A trace records graphgrad ops only; anything else the function calls runs once and its
result is baked into the graph. For pure Python that is harmless (the value is a constant
of the program), but a call into a source of fresh values (``numpy.random``, ``random``,
``time``, ``os.urandom``...) makes the trace silently wrong, so ``jit.trace`` reports it
naming the call and the user's source line.

How the calls are seen, and why two mechanisms:

* ``sys.setprofile`` (per thread, restored afterwards) reports every call of a C builtin
  (``c_call``: ``time.time``, ``random.random``, ``os.urandom``) and of a Python function
  (``call``: ``random.uniform``) however the user reached it, e.g. after
  ``from time import perf_counter``. Only calls made *from the user's frames* into a
  module of ``IMPURE`` count, so graphgrad's own work and the standard library's
  internals never trip it.
* NumPy's random functions are Cython methods, which the profiler does not report (a
  Cython function is not a C builtin to CPython). ``numpy.random``'s module functions
  are therefore wrapped for the duration of the trace (reference-counted, restored in
  ``finally``). A reference taken before the trace (``from numpy.random import rand``)
  and a ``numpy.random.Generator``'s methods stay invisible: a documented gap.

NumPy functions applied to a traced tensor (``np.sin(x)``, ``x.numpy()``) are caught by
the traced tensor's array protocol instead (``trace_values.py``).
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from types import CodeType, FrameType

__all__ = ["ExternalCallError", "ExternalWatch", "user_frame", "is_user_code", "where",
           "IMPURE"]

# Modules whose functions return fresh values (or touch the outside world) on each call.
# (numpy.random is watched by wrapping; the rest of NumPy is deterministic, so calling it
# on Python values only makes a constant, and on traced tensors the tensor reports it.)
IMPURE = frozenset({"random", "_random", "time", "datetime", "_datetime", "os", "posix", "nt",
                    "secrets", "uuid", "socket", "select", "subprocess"})

_GRAPHGRAD = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep
                 for k in ("stdlib", "platstdlib")})
_SITE = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_ORIGIN: dict[str, bool] = {}   # co_filename -> is it user code


class ExternalCallError(RuntimeError):
    """A traced function called code outside graphgrad whose result the trace would
    freeze (raised with ``strict=True``, the default)."""


def is_user_code(code: CodeType) -> bool:
    """Whether ``code`` belongs to the user's program: not graphgrad, not the standard
    library, not an installed package."""
    name = code.co_filename
    user = _ORIGIN.get(name)
    if user is None:
        path = os.path.abspath(name) if not name.startswith("<") else name
        user = not (path.startswith(_GRAPHGRAD) or path.startswith(_STDLIB)
                    or any(s in path for s in _SITE) or name.startswith("<frozen"))
        _ORIGIN[name] = user
    return user


def user_frame(frame: FrameType | None = None) -> FrameType | None:
    """The innermost frame of user code at or above ``frame`` (default: the caller)."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None and not is_user_code(f.f_code):
        f = f.f_back
    return f


def where(frame: FrameType | None) -> str:
    """``File "...", line N, in fn`` with the source line and ``^^^`` under the
    expression the frame is executing (its current instruction's source range)."""
    if frame is None:
        return "  (no user frame found)"
    code = frame.f_code
    head = f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}'
    src = linecache.getline(code.co_filename, frame.f_lineno).rstrip()
    if not src:
        return head
    lines = [head, "    " + src.strip()]
    try:
        pos = list(code.co_positions())[frame.f_lasti // 2]
    except (IndexError, ValueError):
        pos = None
    if pos and pos[0] == pos[1] == frame.f_lineno and pos[2] is not None and pos[3]:
        indent = len(src) - len(src.lstrip())
        lines.append("    " + " " * (pos[2] - indent) + "^" * max(1, pos[3] - pos[2]))
    return "\n".join(lines)


def expression(frame: FrameType | None) -> str | None:
    """The source text of the expression ``frame`` is executing (one line only)."""
    if frame is None:
        return None
    code = frame.f_code
    try:
        pos = list(code.co_positions())[frame.f_lasti // 2]
    except (IndexError, ValueError):
        return None
    if not pos or pos[0] != pos[1] or pos[2] is None or pos[3] is None:
        return None
    return linecache.getline(code.co_filename, pos[0])[pos[2]:pos[3]] or None


# ---- the watch ---------------------------------------------------------------------------

_local = threading.local()      # .watches: the active watches of this thread, innermost last
_patch_lock = threading.Lock()
_patched: dict = {}             # (module, name) -> original, while any watch is active
_patch_users = 0


def _active():
    stack = getattr(_local, "watches", None)
    return stack[-1] if stack else None


def _c_owner(fn) -> str:
    """The top-level module a C builtin belongs to (``time`` for ``time.time``)."""
    owner = getattr(fn, "__self__", None)
    if owner is None or isinstance(owner, type(sys)):
        mod = getattr(owner, "__name__", None) or getattr(fn, "__module__", None) or ""
    elif isinstance(owner, type):
        mod = owner.__module__
    else:
        mod = type(owner).__module__
    return mod.partition(".")[0]


def _c_name(fn) -> str:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type(sys)):
        return f"{owner.__name__}.{fn.__name__}"
    mod = _c_owner(fn)
    if mod == "random" and type(owner).__name__ == "Random":  # random's module functions
        return f"random.{fn.__name__}"
    return f"{mod}.{getattr(fn, '__qualname__', fn.__name__)}"


def _numpy_random_functions() -> list:
    import numpy.random as mod  # loaded now, so that the trace cannot be first to load it
    names = set(getattr(mod.mtrand, "__all__", ())) | {"default_rng"}
    out = []
    for name in sorted(names):
        fn = getattr(mod, name, None)
        if callable(fn) and not isinstance(fn, type):
            out.append((mod, name, fn))
            if getattr(mod.mtrand, name, None) is fn:
                out.append((mod.mtrand, name, fn))
    return out


def _patched_numpy(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        watch = _active()
        if watch is not None:
            caller = sys._getframe(1)
            if is_user_code(caller.f_code):
                watch.report(f"numpy.random.{name}", caller)
        return fn(*args, **kwargs)
    wrapper.__graphgrad_original__ = fn
    return wrapper


def _patch() -> None:
    global _patch_users
    with _patch_lock:
        _patch_users += 1
        if _patch_users > 1:
            return
        for mod, name, fn in _numpy_random_functions():
            _patched[(mod, name)] = fn
            setattr(mod, name, _patched_numpy(name, fn))


def _unpatch() -> None:
    global _patch_users
    with _patch_lock:
        _patch_users -= 1
        if _patch_users:
            return
        for (mod, name), fn in _patched.items():
            setattr(mod, name, fn)
        _patched.clear()


class ExternalWatch:
    """While active (a context manager), calls from user code into external code are
    passed to ``report(name, frame)``: the callee's qualified name and the user's frame
    making the call. ``watched`` maps code objects to handlers called with the frame of
    every call of that code, from anywhere (the tracer watches graphgrad's own random
    generator and ``*_like`` constructors this way)."""

    def __init__(self, report: Callable[[str, FrameType], None],
                 watched: dict[CodeType, Callable[[FrameType], None]] | None = None):
        self.report = report
        self.watched = watched or {}
        self._prev = None

    def __enter__(self) -> ExternalWatch:
        stack = getattr(_local, "watches", None)
        if stack is None:
            stack = _local.watches = []
        stack.append(self)
        _patch()
        self._prev = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        prev = self._prev
        if prev is not None and not callable(prev) and hasattr(prev, "enable"):
            prev.enable()  # a C profiler (cProfile): sys.setprofile cannot reinstall it
        else:
            sys.setprofile(prev)
        _unpatch()
        _local.watches.remove(self)

    def _profile(self, frame: FrameType, event: str, arg) -> None:
        if event == "c_call":
            if is_user_code(frame.f_code) and _c_owner(arg) in IMPURE:
                self.report(_c_name(arg), frame)
        elif event == "call":
            handler = self.watched.get(frame.f_code)
            if handler is not None:
                handler(frame)
                return
            back = frame.f_back
            if back is not None and is_user_code(back.f_code) \
                    and not is_user_code(frame.f_code):
                mod = frame.f_globals.get("__name__", "")
                if mod.partition(".")[0] in IMPURE:
                    self.report(f"{mod}.{frame.f_code.co_qualname}", back)
