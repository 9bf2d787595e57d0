"""Layer ``tensor``: ``Value``, the node of the computational graph.

As in the lecture's homework (and needle's ``Value``): a node holds the op that
created it (``op``, None for a leaf), its ``inputs`` (Values and Python scalars) with
the op's keyword ``params``, and its array. ``Value._make`` is the one constructor:
every place that builds a node (dispatch, the engine, vmap, tracers, parameters)
calls it, so every slot is always set.

The hot slots are few; the state that few nodes need (hooks, views, the identity
before an in-place change, forward-AD tangents) lives in ``Extras``, made on demand.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Value", "Extras"]


class Extras:
    """Rarely-needed per-node state, kept out of the hot slots: hooks, ``retain_grad``,
    views and their bases, the identity a tensor had before an in-place op rebased it,
    forward-AD tangents."""

    __slots__ = ("hooks", "post_hooks", "retains_grad", "previous", "rebased_at", "base",
                 "view_call", "views", "tangents", "tangents_at", "own_tangents")

    def __init__(self):
        self.hooks: list | None = None
        self.post_hooks: list | None = None
        self.retains_grad = False
        self.previous: Value | None = None  # the node this tensor was before an in-place op
        self.rebased_at = 0                 # version at which this identity became current
        self.base: Value | None = None      # for views: the tensor they look into
        self.view_call: tuple | None = None  # ... and how: (op, args, params) of the view op
        # weak references to the views of this tensor that do not require grad: an
        # in-place op that makes it require grad makes them require grad too
        self.views: list | None = None
        self.tangents: dict | None = None   # forward-AD tangents, keyed by their level
        # for views: the version of the storage their tangents were derived from the
        # base's at, and the levels where the tangent is the view's own (make_dual), not
        # the base's seen through the view
        self.tangents_at = -1
        self.own_tangents: set | None = None


class Value:
    """A node of the computational graph: creator op, inputs, params, cached array.

    ``_requires_grad``: whether reverse mode tracks it. ``_grad``: the gradient a leaf
    accumulated. ``_version_counter``: a one-element list shared with its views and bumped
    by in-place writes (None: never written or viewed). ``_saved_versions``: the inputs'
    versions when this node was made (None: all zero), which backward checks."""

    __slots__ = ("_array", "op", "inputs", "params", "_requires_grad", "_grad",
                 "_version_counter", "_saved_versions", "_extras", "__weakref__")

    @classmethod
    def _make(cls, array, op=None, inputs: tuple = (), params: dict | None = None,
              requires_grad: bool = False, saved_versions: tuple | None = None) -> Any:
        """A new node of class ``cls`` holding ``array``: a leaf unless ``op`` is given."""
        v = object.__new__(cls)  # not cls.__new__: some subclasses take arguments there
        v._init(array, op, inputs, params, requires_grad, saved_versions)
        return v

    def _init(self, array, op=None, inputs: tuple = (), params: dict | None = None,
              requires_grad: bool = False, saved_versions: tuple | None = None) -> None:
        """Set every slot (``_make``, and the ``__init__`` of classes users instantiate)."""
        self._array = array
        self.op = op
        self.inputs = inputs
        self.params = params
        self._requires_grad = requires_grad
        self._grad = None
        self._version_counter = None
        self._saved_versions = saved_versions
        self._extras = None

    def _ensure_extras(self) -> Extras:
        e = self._extras
        if e is None:
            e = self._extras = Extras()
        return e

    @property
    def _version(self) -> int:
        vc = self._version_counter
        return 0 if vc is None else vc[0]
