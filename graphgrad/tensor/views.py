"""Layer ``tensor``: views, version counters and rebasing.

A view shares its base's storage and version counter; in-place writes bump the
counter, which backward compares with the versions a node saved (``saved_versions``).
When a tensor is written in place while the graph is recorded it is *rebased*: it
takes the history of the new value (``take_history``) while a node standing for its
old identity (``old_identity``) keeps the edges made before. A view whose base changed
since its history was made gets a fresh one when it is next read
(``refresh_if_stale``), as PyTorch regenerates a view's ``grad_fn``.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from graphgrad.backend import xp

from .value import Value

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["mark_view", "views_follow_grad", "refresh_if_stale", "refresh_view",
           "old_identity", "take_history", "rebase", "saved_versions", "bump_version",
           "root_base", "identity_at", "input_as_recorded"]


def saved_versions(args: tuple) -> tuple:
    """The inputs' versions as a new node sees them. An input that is a view whose base
    changed in place since the view's history was made (through the base or another
    view of it) first gets a fresh history, so the new node's gradient goes through
    that change (PyTorch regenerates the view's grad_fn the same way)."""
    for a in args:
        if isinstance(a, Value) and a._extras is not None:
            refresh_if_stale(a)
    return tuple([a._version_counter[0] if isinstance(a, Value) and a._version_counter
                  is not None else 0 for a in args])   # (a list: no generator per node)


def bump_version(t: Value) -> int:
    """Count one in-place write into ``t``'s storage; returns the new version."""
    if t._version_counter is None:
        t._version_counter = [0]
    t._version_counter[0] += 1
    return t._version_counter[0]


def identity_at(p: Value, version: int) -> Value:
    """The identity ``p`` had at ``version``: an in-place op after an edge to ``p`` was
    made rebased ``p``, and its earlier self lives on in ``extras.previous``."""
    e = p._extras
    while e is not None and e.rebased_at > version:
        p = e.previous
        e = p._extras
    return p


def input_as_recorded(node: Value, p: Value) -> Value:
    """Input ``p`` of ``node`` as the node recorded it (see ``identity_at``). Every
    position holding ``p`` was recorded at the same version, so the first one tells."""
    sv = node._saved_versions
    if sv is None:
        return identity_at(p, 0)
    for i, q in enumerate(node.inputs):
        if q is p:
            return identity_at(p, sv[i])
    return p


def mark_view(t: Value, op, args: tuple, params: dict) -> None:
    """When a view op's result shares memory with its input, it shares the input's
    version counter (in-place writes through either are seen by saved-tensor checks)
    and remembers how it looks into it (in-place ops on views update the base) and at
    which version of the base its history was made."""
    base = args[0]
    if xp.may_share_memory(t._array, base._array):
        if base._version_counter is None:
            base._version_counter = [0]
        t._version_counter = base._version_counter
        ext = t._ensure_extras()
        ext.base = base
        ext.view_call = (op, args, params)
        ext.rebased_at = ext.tangents_at = base._version_counter[0]
        if not t._requires_grad:
            _register_view(base, t)


def root_base(t: Value) -> Value | None:
    """The tensor that owns ``t``'s storage when ``t`` is a view (views of views
    followed to the end); None when ``t`` is not a view."""
    ext = t._extras
    if ext is None or ext.base is None:
        return None
    base = ext.base
    while base._extras is not None and base._extras.base is not None:
        base = base._extras.base
    return base


def _register_view(base: Value, view: Value) -> None:
    """Remember ``view`` (weakly) on ``base``; dead entries are dropped each time the
    list reaches a power of two, so a loop of temporary views costs O(1) each."""
    e = base._ensure_extras()
    views = e.views
    if views is None:
        views = e.views = []
    views.append(weakref.ref(view))
    n = len(views)
    if n >= 32 and not n & (n - 1):
        views[:] = [r for r in views if r() is not None]


def views_follow_grad(base: Value) -> None:
    """``base`` was just made to require grad by an in-place op: its views made before,
    which did not require grad, now do, with a fresh history (the view op applied to
    the base as it is now), as in PyTorch, where their grad_fn becomes a view replay of
    the base. Views of those views follow too."""
    stack = [base]
    while stack:
        e = stack.pop()._extras
        if e is None or not e.views:
            continue
        views, e.views = e.views, None
        for ref in views:
            v = ref()
            if v is not None and not v._requires_grad and v._extras.base is not None:
                refresh_view(v)
                stack.append(v)


def refresh_if_stale(t: Value) -> None:
    """Give view ``t`` a fresh history when its base changed in place since its history
    was made, as PyTorch regenerates a view's grad_fn when it is read: ``grad_fn``,
    ``backward`` and ``autograd.grad`` then see the change."""
    e = t._extras
    if e is not None and e.base is not None and t._requires_grad and \
            t._version_counter is not None and e.rebased_at != t._version_counter[0]:
        refresh_view(t)


def old_identity(t: Tensor) -> Tensor:
    """A node standing for ``t`` as it was: same op, inputs and buffer, same counter (an
    in-place op, or a view's fresh history, rebases ``t`` and keeps this as
    ``extras.previous`` for the edges made before)."""
    from .tensor import Tensor  # Tensor's methods read views: it imports this module
    old = Tensor._make(t._array, t.op, t.inputs, t.params, t._requires_grad,
                       t._saved_versions)
    old._version_counter = t._version_counter
    ext = t._extras
    if ext is not None:
        e = old._ensure_extras()
        e.previous, e.rebased_at, e.base = ext.previous, ext.rebased_at, ext.base
    return old


def take_history(t: Value, new: Value) -> None:
    """``t`` becomes the node ``new`` is: same op, inputs, params, grad requirement and
    saved versions (its storage, counter and extras stay its own)."""
    t.op, t.inputs, t.params = new.op, new.inputs, new.params
    t._requires_grad, t._saved_versions = new._requires_grad, new._saved_versions


def rebase(t: Value, new: Value, old: Value) -> None:
    """``t`` was written in place: it takes ``new``'s history, and ``old`` (its identity
    before the write) keeps the edges made before, from the current version on."""
    take_history(t, new)
    ext = t._ensure_extras()
    ext.previous, ext.rebased_at = old, t._version_counter[0]


def refresh_view(v: Tensor) -> None:
    """Rebase view ``v`` onto its base as the base is now: the view op applied again."""
    view_op, view_args, params = v._extras.view_call
    old = old_identity(v)
    rebase(v, view_op.apply(v._extras.base, *view_args[1:], **params), old)
