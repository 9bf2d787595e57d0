"""Layer ``autograd``: forward-mode AD with dual tensors (``torch.autograd.forward_ad``).

A forward-AD level is a mode on the dispatch stack. While it is active, each
op call reaches it first: it runs the op on the level below (so the primal is
computed, and taped for reverse mode, as usual), then computes the output's tangent
with the op's ``jvp`` rule and attaches it to the output tensor under this level.

An in-place write into a tensor gives it the new value's tangent
(``process_inplace``); a view's tangent is its base's seen through the view, derived
again when the storage changed since (``fresh_tangents``).

Tangents live on the tensors themselves (``ext.tangents[level]``), not on wrappers, so the
tensors a reverse-mode graph saves still carry their tangents: backward rules run
inside a level propagate tangents too, which is forward-over-reverse. The jvp rules
run with the level popped, so nested levels differentiate each other's tangent
computations without confusing their perturbations.
"""

from __future__ import annotations

from typing import NamedTuple

import functools
from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.ops.inplace import write_back_of
from graphgrad.tensor import (Mode, Tensor, Value, active_modes, dispatch, is_active, pop_mode,
                              push_mode)

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual",
           "UnpackedDualTensor", "JVPLevel", "tangent_of", "active_levels"]

_MISSING = ("Trying to use forward AD with {op} that does not support it because it has not "
            "been implemented yet.\nPlease file an issue to graphgrad so that we can "
            "prioritize its implementation")


class JVPLevel(Mode):
    """One forward-AD level: the tensors it perturbed and the tangents it computed."""

    _count = 0

    def __init__(self):
        self.index = JVPLevel._count
        JVPLevel._count += 1
        self.carriers: list[Value] = []  # tensors holding a tangent of this level
        self.active = True

    def __repr__(self) -> str:
        return f"JVPLevel({self.index})"

    def tangent(self, t) -> Tensor | None:
        if not isinstance(t, Value):
            return None
        e = t._extras
        if e is None:
            return None
        if e.base is not None:  # a view: its base may have changed in place since
            fresh_tangents(t)
        if e.tangents is None:
            return None
        return e.tangents.get(self)

    def attach(self, t: Value, tangent: Tensor) -> None:
        if tangent.shape != t.shape:
            tangent = tangent.expand(*t.shape)  # a rule may leave broadcasting implicit
        if tangent._array.dtype != t._array.dtype:
            tangent = tangent.to(t.dtype)
        e = t._ensure_extras()
        if e.tangents is None:
            e.tangents = {}
        if self not in e.tangents:
            self.carriers.append(t)
        e.tangents[self] = tangent

    def process(self, op, args: tuple, params: dict):
        dots = tuple(self.tangent(a) for a in args)
        with self.lowered():
            out = dispatch(op, args, params)
            if not op.differentiable or all(d is None for d in dots):
                return out
            if op.jvp is None:
                raise NotImplementedError(_MISSING.format(op=op.__name__))
            tangent = op.jvp(dots, out, *args, **params)
            if tangent is not None:
                self.attach(out, tangent)
        return out

    def process_inplace(self, t, fn: Callable, args: tuple, kw: dict, name: str,
                        below: Callable):
        """After ``t <- fn(t, ...)``, ``t``'s tangent at this level is the new value's
        (none if the new value has none). When the graph is recorded, ``t``'s old
        identity keeps the old tangent: the new value's jvp, and in forward-over-reverse
        the backward rules that read the saved old value, need it."""
        if self.tangent(t) is None and all(self.tangent(a) is None for a in args):
            return below(fn)  # nothing of this level flows: fn unchanged (fills stay direct)
        new, recorded = [], []

        def with_tangents(old, *a, **k):
            if old is not t:  # the graph is recorded: old is t's identity before the write
                recorded.append(True)
                tangent = self.tangent(t)
                if tangent is not None:
                    self.attach(old, tangent)
            new.append(fn(old, *a, **k))
            return new[-1]

        out = below(with_tangents)
        if new:
            self._carry(t, self.tangent(new[-1]))
        if not recorded:
            self._tangent_to_base(t)
        return out

    def _carry(self, t: Value, tangent: Tensor | None) -> None:
        """``t`` now holds a new value whose tangent at this level is ``tangent``."""
        e = t._extras
        if tangent is None:
            if e is not None and e.tangents is not None:
                e.tangents.pop(self, None)
        else:
            self.attach(t, tangent)
        _derived_now(t)

    def _tangent_to_base(self, t: Value) -> None:
        """A write through a view changes its base: so does the view's new tangent (the
        recorded path gets this from the write-back op's jvp; this is the unrecorded
        one), up to the tensor that owns the tangent (PyTorch: the view's tangent is a
        view of that tensor's tangent, written in place)."""
        tangent = t._extras.tangents.get(self) if t._extras is not None and \
            t._extras.tangents else None
        if tangent is None:
            return
        v = t
        while not _owns(v._extras, self):
            ext = v._extras
            base = ext.base
            write_back = write_back_of(ext.view_call, "forward AD: an in-place op", "a tensor")
            before = self.tangent(base)  # (derived again first, when base is a view)
            if before is None:
                before = Tensor._make(xp.zeros(base._array.shape, base._array.dtype))
            tangent = write_back(before, tangent)
            self.attach(base, tangent)
            _derived_now(base)
            v = base

    def close(self) -> None:
        for t in self.carriers:
            e = t._extras
            if e is not None and e.tangents is not None:
                e.tangents.pop(self, None)
            if e is not None and e.own_tangents is not None:
                e.own_tangents.discard(self)
        self.carriers.clear()
        self.active = False


def tangent_of(t, level: JVPLevel) -> Tensor | None:
    return level.tangent(t)


def active_levels() -> list[JVPLevel]:
    return [m for m in active_modes() if isinstance(m, JVPLevel)]


def enter_dual_level() -> JVPLevel:
    """Start a new forward-AD level and return it (levels nest)."""
    level = JVPLevel()
    push_mode(level)
    return level


def exit_dual_level(*, level: JVPLevel | None = None) -> None:
    levels = active_levels()
    if not levels:
        raise RuntimeError("Trying to exit a forward AD level but no level is active.")
    level = level or levels[-1]
    if active_modes()[-1] is not level:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that "
                           "was created. This is not supported.")
    pop_mode(level)
    level.close()


class dual_level:  # noqa: N801 - PyTorch's name
    """Context manager for a forward-AD level; ``__enter__`` returns the level. All
    tangents of the level are dropped on exit."""

    def __enter__(self) -> JVPLevel:
        self.level = enter_dual_level()
        return self.level

    def __exit__(self, *exc) -> None:
        exit_dual_level(level=self.level)


def _level_or_current(level: JVPLevel | None) -> JVPLevel | None:
    if level is not None:
        return level
    levels = active_levels()
    return levels[-1] if levels else None


def make_dual(tensor: Tensor, tangent: Tensor, *, level: JVPLevel | None = None) -> Tensor:
    """A tensor aliasing ``tensor`` that carries ``tangent`` at ``level`` (default: the
    innermost). It stays differentiable in reverse mode."""
    lvl = _level_or_current(level)
    if lvl is None or not lvl.active:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, "
                           "make sure to enter_dual_level() first.")
    if tensor._array.dtype.kind not in "fc":
        raise ValueError(f"Expected primal to be floating point or complex, but got: "
                         f"{tensor.dtype}")
    if not isinstance(tangent, Value):
        raise TypeError(f"make_dual: expected tangent to be a Tensor, got "
                        f"{type(tangent).__name__}")
    if tangent._array.dtype.kind not in "fc":
        raise ValueError(f"Expected tangent to be floating point or complex, but got: "
                         f"{tangent.dtype}")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(f"Trying to set a forward gradient that has a different size than "
                           f"that of the original Tensor, this is not supported. Tensor is of "
                           f"size {list(tensor.shape)} while the given forward gradient is of "
                           f"size {list(tangent.shape)}.")
    if lvl.tangent(tensor) is not None:
        raise RuntimeError(f"Making a dual Tensor based on a Tensor that already has a forward "
                           f"gradient at the same level {lvl.index} is not supported.")
    # the alias is made below the level, so it carries no tangent of the level yet
    out = _below(lvl, lambda: tensor.view_as(tensor))
    lvl.attach(out, tangent)
    ext = out._ensure_extras()
    if ext.own_tangents is None:
        ext.own_tangents = set()
    ext.own_tangents.add(lvl)  # its tangent is its own, not the primal's seen through the view
    return out


def _below(level: JVPLevel, fn):
    if is_active(level):
        with level.lowered():
            return fn()
    return fn()


class UnpackedDualTensor(NamedTuple):
    """``unpack_dual``'s result: the primal and the tangent (None when there is none)."""

    primal: Tensor
    tangent: Tensor | None


def unpack_dual(tensor, *, level: JVPLevel | None = None) -> UnpackedDualTensor:
    lvl = _level_or_current(level)
    if lvl is None or not isinstance(tensor, Value):
        return UnpackedDualTensor(tensor, None)
    tangent = lvl.tangent(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    primal = _below(lvl, lambda: tensor.view_as(tensor))
    return UnpackedDualTensor(primal, tangent)


def _derived_now(t: Value) -> None:
    """``t``'s tangents were just set for its current value: a view needs no new
    derivation from its base until the storage changes again."""
    ext = t._extras
    if ext is not None and ext.base is not None and t._version_counter is not None:
        ext.tangents_at = t._version_counter[0]


def _owns(ext, level: JVPLevel) -> bool:
    """Whether a tensor's tangent at ``level`` is its own rather than its base's seen
    through the view: tensors that are not views, and make_dual's views."""
    return ext is None or ext.base is None or ext.view_call is None or (
        ext.own_tangents is not None and level in ext.own_tangents)


def fresh_tangents(t: Value) -> None:
    """A view's forward-AD tangents are its base's seen through the view (in PyTorch the
    view's tangent is a view of the base's, so in-place changes of either show in
    both). When the storage changed in place since they were derived (an unrecorded
    write into the base or another view of it), derive them again: at each level, the
    view op applied to the base's tangent, except where the view has its own
    (``make_dual``). Iterative over chains of views, innermost base first."""
    chain = []
    v = t
    while True:
        ext = v._extras
        if ext is None or ext.base is None or ext.view_call is None or \
                v._version_counter is None or ext.tangents_at == v._version_counter[0]:
            break
        chain.append(v)
        v = ext.base
    for v in reversed(chain):
        ext = v._extras
        ext.tangents_at = v._version_counter[0]
        base_fw = ext.base._extras.tangents if ext.base._extras is not None else None
        view_op, view_args, params = ext.view_call
        for level in set(base_fw or ()) | set(ext.tangents or ()):
            if _owns(ext, level):
                continue
            base_tangent = base_fw.get(level) if base_fw else None
            if base_tangent is None:
                del ext.tangents[level]
                continue
            # tangents are computed below their own level
            tangent = _below(level, functools.partial(view_op.apply, base_tangent,
                                                      *view_args[1:], **params))
            level.attach(v, tangent)
