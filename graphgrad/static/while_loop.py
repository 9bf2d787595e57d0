"""Layer ``static``: TF1's ``while_loop``: one ``while_loop`` node of the IR with a
condition and a body sub-graph, each built once by calling the Python function on
placeholders.

As in TF1: ``maximum_iterations`` becomes a hidden int counter loop variable, AND-ed
into the condition and dropped from the result; ``shape_invariants`` give the loop
variables less specific shapes (None dims) so that their shapes may change from one
iteration to the next; ``back_prop=False`` makes the loop a constant to ``gradients``.
``parallel_iterations`` and ``swap_memory`` are checked and accepted: the interpreter
runs one iteration at a time and keeps the tape in memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import Spec, symbol, tf_shape
from graphgrad.graph.node import Node
from graphgrad.ops import REGISTRY
from graphgrad.tensor.modes import current_mode

from .control_flow import build_branch, current_builder, unify_branches
from .tensors import constant, convert_to_tensor

__all__ = ["while_loop"]


def while_loop(cond: Callable, body: Callable, loop_vars, shape_invariants=None,
               parallel_iterations: int = 10, back_prop: bool = True,
               swap_memory: bool = False, name: str | None = None,
               maximum_iterations=None, return_same_structure: bool = False):
    """``while cond(*vars): vars = body(*vars)``, at most ``maximum_iterations`` times."""
    if not callable(cond):
        raise TypeError("cond must be callable.")
    if not callable(body):
        raise TypeError("body must be callable.")
    if isinstance(parallel_iterations, bool) or not isinstance(parallel_iterations, int) \
            or parallel_iterations <= 0:
        raise TypeError("parallel_iterations must be a positive integer.")
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else loop_vars
    leaves, struct = tree_flatten(structure)
    if not leaves:
        raise ValueError("No loop variables provided")
    invariants = None if shape_invariants is None else _shape_leaves(
        [shape_invariants] if single else shape_invariants, structure)
    b = current_builder()
    with b.active() if current_mode() is not b else contextlib.nullcontext():
        init = [b.node_of(convert_to_tensor(v), literal_ok=False) for v in leaves]
        specs = [i.spec for i in init] if invariants is None else [
            _invariant_spec(i, s) for i, s in zip(init, invariants, strict=True)]

        def user_cond(*xs):
            return cond(*tree_unflatten(list(xs), struct))

        def user_body(*xs):
            return tree_flatten(body(*tree_unflatten(list(xs), struct)))[0]
        if maximum_iterations is not None:
            counter, user_cond, user_body = _bounded(maximum_iterations, user_cond, user_body)
            init.insert(0, b.node_of(counter, literal_ok=False))
            specs.insert(0, counter._node.spec)
        base = name or "while"
        args = [(s, i.name) for s, i in zip(specs, init, strict=True)]
        c = build_branch(user_cond, f"{base}_cond", b, args)
        bd = build_branch(user_body, f"{base}_body", b, args)
        _check_body(init, specs, bd[3], maximum_iterations is not None)
        if len(c[3]) != 1 or c[3][0].spec.dtype.kind != "b" or c[3][0].spec.shape not in (
                (), None):
            raise TypeError(f"while_loop: cond must return one scalar bool tensor, got "
                            f"{', '.join(tf_shape(o.spec.shape) for o in c[3])}")
        outer = unify_branches([c, bd], len(init))
        outs = b.multi("while_loop", [*[symbol(i) for i in init], *[symbol(o) for o in outer]],
                       {"cond": c[0], "body": bd[0]}, tuple(specs),
                       params={"n": len(init), "back_prop": bool(back_prop)}, name=base)
    if maximum_iterations is not None:
        outs = outs[1:]  # the hidden counter
    result = tree_unflatten(outs, struct)
    if single or (len(outs) == 1 and not return_same_structure):  # TF1: a bare tensor
        return tree_flatten(result)[0][0]
    return result


def _bounded(maximum_iterations, user_cond: Callable, user_body: Callable) -> tuple:
    """TF1's rewrite: a counter from 0 (of ``maximum_iterations``' dtype) in front of
    the loop variables, ``counter < maximum_iterations`` AND-ed into the condition."""
    limit = convert_to_tensor(maximum_iterations)
    if limit.shape is None or len(limit.shape) != 0:
        raise ValueError(f"maximum_iterations must be a scalar, saw shape: "
                         f"{tf_shape(limit.shape)}")
    counter = constant(0, dtype=limit._node.spec.dtype, name="iteration_counter")

    def bounded_cond(i, *xs):
        return REGISTRY["LogicalAnd"].apply(i < limit, user_cond(*xs))

    def bounded_body(i, *xs):
        return [i + 1, *user_body(*xs)]
    return counter, bounded_cond, bounded_body


def _check_body(init: list[Node], specs: list[Spec], outs: list[Node], counted: bool) -> None:
    if len(outs) != len(init):
        k = 1 if counted else 0
        raise ValueError(f"body returns {len(outs) - k} loop variables but the loop has "
                         f"{len(init) - k}: the two structures don't have the same number of "
                         f"elements")
    for i, s, o in zip(init, specs, outs, strict=True):
        if o.spec.dtype != s.dtype:
            raise TypeError(f"Loop var {i.name}:0 enters the loop with type "
                            f"<dtype: '{s.dtype.name}'> but has type "
                            f"<dtype: '{o.spec.dtype.name}'> after 1 iteration. {i.name}:0 "
                            f"type should remain constant.")
        if not _fits(o.spec.shape, s.shape):
            raise ValueError(f"Input tensor '{i.name}:0' enters the loop with shape "
                             f"{tf_shape(s.shape)}, but has shape {tf_shape(o.spec.shape)} "
                             f"after one iteration. To allow the shape to vary across "
                             f"iterations, use the `shape_invariants` argument of "
                             f"tf.while_loop to specify a less-specific shape.")


def _fits(shape, invariant) -> bool:
    """Whether a value of static ``shape`` satisfies ``invariant`` (None: any)."""
    if invariant is None:
        return True
    if shape is None or len(shape) != len(invariant):
        return False
    return all(w is None or w == d for d, w in zip(shape, invariant, strict=True))


def _invariant_spec(init: Node, invariant) -> Spec:
    if not _fits(init.spec.shape, invariant):
        raise ValueError(f"The shape invariant specified for {init.name}:0 is not compatible "
                         f"with the initial shape of the loop variable. It enters the loop "
                         f"with shape {tf_shape(init.spec.shape)}, but the specified shape "
                         f"invariant is {tf_shape(invariant)}.")
    return Spec(invariant, init.spec.dtype)


def _as_shape(s):
    """A shape given as a tuple/list of ints and Nones, a Size, None (unknown rank), or
    anything with ``as_list()`` (TF's TensorShape)."""
    if s is None:
        return None
    if hasattr(s, "as_list"):
        s = s.as_list()
    return tuple(None if d is None else int(d) for d in s)


def _shape_leaves(invariants, structure) -> list:
    """The invariants in the order of the loop variables' leaves: walk both structures
    together (a shape is a leaf of ``invariants`` where ``structure`` has a tensor)."""
    out: list = []
    todo = [(invariants, structure)]
    while todo:
        inv, var = todo.pop()
        if isinstance(var, dict):
            if not isinstance(inv, dict) or set(inv) != set(var):
                raise ValueError("shape_invariants must have the same structure as loop_vars")
            todo.extend((inv[k], var[k]) for k in reversed(list(var)))
        elif isinstance(var, (list, tuple)):
            if not isinstance(inv, (list, tuple)) or len(inv) != len(var):
                raise ValueError("shape_invariants must have the same structure as loop_vars")
            todo.extend(reversed(list(zip(inv, var, strict=True))))
        else:
            out.append(_as_shape(inv))
    return out
