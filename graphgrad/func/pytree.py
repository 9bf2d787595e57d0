"""Layer ``func``: pytrees: nested tuples, lists, dicts (and namedtuples) of leaves, flattened
to a list of leaves plus a spec that rebuilds the structure."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["tree_flatten", "tree_unflatten", "tree_map", "TreeSpec", "LEAF"]


class TreeSpec(NamedTuple):
    kind: str            # "leaf", "tuple", "list", "dict", "namedtuple", "none"
    meta: Any            # dict keys / namedtuple class
    children: tuple

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children,
                                                              strict=True))
            return "{" + inner + "}"
        if self.kind == "list":
            return "[" + inner + "]"
        return "(" + inner + ("," if len(self.children) == 1 else "") + ")"

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)


LEAF = TreeSpec("leaf", None, ())


def tree_flatten(tree, none_is_leaf: bool = False) -> tuple[list, TreeSpec]:
    """Leaves and structure. ``none_is_leaf``: None counts as a leaf (vmap's in_dims and
    out_dims use None for "not mapped")."""
    leaves: list = []
    spec = _flatten(tree, leaves, none_is_leaf)
    return leaves, spec


def _flatten(tree, leaves: list, none_is_leaf: bool = False) -> TreeSpec:
    if tree is None and not none_is_leaf:
        return TreeSpec("none", None, ())
    n = none_is_leaf
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return TreeSpec("namedtuple", type(tree), tuple(_flatten(c, leaves, n) for c in tree))
    if isinstance(tree, tuple):
        return TreeSpec("tuple", None, tuple(_flatten(c, leaves, n) for c in tree))
    if isinstance(tree, list):
        return TreeSpec("list", None, tuple(_flatten(c, leaves, n) for c in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return TreeSpec("dict", keys, tuple(_flatten(tree[k], leaves, n) for k in keys))
    leaves.append(tree)
    return LEAF


def tree_unflatten(leaves, spec: TreeSpec):
    it = iter(leaves)
    out = _unflatten(it, spec)
    return out


def _unflatten(it, spec: TreeSpec):
    kind = spec.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    children = [_unflatten(it, c) for c in spec.children]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(spec.meta, children, strict=True))
    return spec.meta(*children)


def tree_map(fn, tree, *rest):
    leaves, spec = tree_flatten(tree)
    others = [tree_flatten(r)[0] for r in rest]
    return tree_unflatten([fn(x, *o) for x, *o in zip(leaves, *others, strict=True)], spec)
