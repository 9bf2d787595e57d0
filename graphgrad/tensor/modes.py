"""Layer ``tensor``: the dispatch stack, the modes that sit on it, and grad mode.

A *mode* is what is active while ops run: a forward-AD level, a vmap level, a graph
builder, a tracer, complex-step differentiation. Modes nest on one stack; each op call
goes to the mode on top (``dispatch.dispatch``), which may call ``dispatch`` again for
the modes below (``lowered()`` takes it off the stack for the duration). This is
autodidax's interpreter stack: dispatch by context, not by the type of the data.

``Mode`` declares every hook a mode may implement, with the behaviour of a mode that
does not care: ``process`` (an op call), ``process_inplace`` (an in-place write),
``batches`` (whether a tensor is this mode's batched stand-in), ``to_python`` (a
tensor turned into a Python number), ``randomness`` and ``batched_random`` (random
draws under vmap). Nothing outside this module touches the
stack itself; the state is in one object (``State``) that ``dispatch`` reads on the
hot path. That state is per thread (see ``_PerThread``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Mode", "push_mode", "pop_mode", "current_mode",
           "active_modes", "is_active", "is_grad_enabled", "set_grad_mode"]


class State:
    """What is active: the stack of modes, its top (read by ``dispatch`` on every op
    call) and grad mode."""

    __slots__ = ("stack", "top", "grad_enabled")

    def __init__(self):
        self.stack: list[Mode] = []
        self.top: Mode | None = None
        self.grad_enabled = True


class _PerThread(threading.local):
    """One ``State`` per thread, as PyTorch's grad mode: a thread's ``no_grad`` or vmap
    level is invisible to the others, and a new thread starts in the default state
    (``__init__`` runs again in each thread that reads it). ``dispatch`` reads the
    thread's state once per op call (``per_thread.state``) and then plain slots: two
    reads of a ``threading.local`` cost twice one."""

    def __init__(self):
        self.state = State()


per_thread = _PerThread()


class Mode:
    """Base of every mode on the dispatch stack. A subclass overrides ``process``; the
    other hooks have the behaviour of a mode that does not care about them."""

    #: vmap's randomness flag ("error", "same", "different"); None for modes that do not
    #: batch. ``creation.random_tensor`` asks each mode that has one.
    randomness: str | None = None
    #: whether operands of different dtypes are legitimate while this mode is active
    #: (the complex step's complex inputs meet real weights): checks of equal dtypes
    #: made on arrays before dispatch leave them to the mode
    mixes_dtypes: bool = False

    def process(self, op, args: tuple, params: dict) -> Any:
        """Handle one op call (``op`` on ``args`` with keyword ``params``)."""
        raise NotImplementedError(f"{type(self).__name__} does not process op calls")

    def process_inplace(self, t, fn: Callable, args: tuple, kw: dict, name: str,
                        below: Callable):
        """Handle ``t <- fn(t, *args, **kw)`` in place (``ops.inplace.apply_inplace``).

        ``below(fn)`` hands the write on to the modes below (with this one still on the
        stack: ``fn`` is a composite of op calls that all modes must see); a mode may
        wrap ``fn`` to see the old and new values, or handle the write itself."""
        return below(fn)

    def batches(self, t) -> bool:
        """Whether ``t`` is a batched tensor of this mode (vmap's), which stands for one
        example of a batch whose values it holds elsewhere."""
        return False

    def to_python(self, t, kind: str):
        """``bool(t)``, ``float(t)`` or ``int(t)`` (``kind``) while this mode is on top."""
        return t._scalar(kind)

    def batched_random(self, sample: Callable, shape: tuple):
        """A random tensor of ``shape`` with one draw per example (``randomness ==
        "different"``); ``sample(shape)`` draws with the modes below."""
        raise NotImplementedError(f"{type(self).__name__} does not batch random draws")

    def lowered(self) -> _Lowered:
        """A context in which this mode is off the stack (its rules run below it)."""
        return _Lowered(self)


class _Lowered:
    __slots__ = ("mode", "index")

    def __init__(self, mode: Mode):
        self.mode = mode

    def __enter__(self):
        state = per_thread.state
        self.index = state.stack.index(self.mode)
        del state.stack[self.index]
        state.top = state.stack[-1] if state.stack else None

    def __exit__(self, *exc):
        state = per_thread.state
        state.stack.insert(self.index, self.mode)
        state.top = state.stack[-1]


def push_mode(mode: Mode) -> None:
    state = per_thread.state
    state.stack.append(mode)
    state.top = mode


def pop_mode(mode: Mode) -> None:
    state = per_thread.state
    stack = state.stack
    if not stack or stack[-1] is not mode:
        raise RuntimeError("graphgrad: dispatch stack corrupted (a mode popped out of order)")
    stack.pop()
    state.top = stack[-1] if stack else None


def current_mode() -> Mode | None:
    """The mode on top of the stack, None in plain eager mode."""
    return per_thread.state.top


def active_modes() -> tuple[Mode, ...]:
    """The modes on the stack, bottom first."""
    return tuple(per_thread.state.stack)


def is_active(mode: Mode) -> bool:
    """Whether ``mode`` is on the stack now (not lowered, not popped)."""
    return mode in per_thread.state.stack


def is_grad_enabled() -> bool:
    """Whether ops record the graph for reverse-mode differentiation."""
    return per_thread.state.grad_enabled


def set_grad_mode(mode: bool) -> bool:
    """Set grad mode; returns the previous mode (used by ``graphgrad.autograd.grad_mode``)."""
    state = per_thread.state
    prev = state.grad_enabled
    state.grad_enabled = bool(mode)
    return prev
