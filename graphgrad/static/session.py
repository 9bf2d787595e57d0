"""Layer ``static``: ``Session``, which runs a static Graph.

``run(fetches, feed_dict)`` accepts a single fetch or any nesting of lists, tuples,
namedtuples and dicts, and returns the same structure of NumPy values. Build once,
run many: the execution plan (the nodes the fetches need, pruned at the fed ones, in
order) is computed once per (fetches, fed keys) and cached. Variable values live in
the session, so two sessions on one graph have separate state, as in TF.
"""

from __future__ import annotations

import contextlib

from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import (GraphBuilder, Interpreter, Scheduler, Symbol, Timeline, needed_nodes,
                             tf_shape)
from graphgrad.graph.node import Node
from graphgrad.tensor import Tensor, Value
from graphgrad.tensor.modes import current_mode

from .graph import Graph, get_default_graph

__all__ = ["Session", "InteractiveSession"]


def _shape_fits(shape, want) -> bool:
    if want is None:
        return True
    return len(shape) == len(want) and all(w is None or w == s
                                           for s, w in zip(shape, want, strict=True))


class Session:
    """``with Session() as sess: sess.run(fetches, feed_dict)``; ``workers > 1`` runs
    each step on the parallel scheduler, and ``log`` then tells what ran where and when
    in the latest ``run``."""

    def __init__(self, target: str = "", graph: Graph | None = None, config=None, *,
                 workers: int = 1):
        self.graph = graph or get_default_graph()
        self.state: dict = {}
        self.workers = workers
        self.interpreter = (Scheduler(self.graph.ir, self.state, workers=workers)
                            if workers > 1 else Interpreter(self.graph.ir, self.state))
        self._plans: dict = {}
        self._closed = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def as_default(self):
        return self

    # ---- fetches and feeds -------------------------------------------------------------

    def _fetch_node(self, f) -> Node:
        if f is None:
            raise TypeError(f"Fetch argument {f!r} has invalid type {type(f)!r}")
        if isinstance(f, str):
            return self.graph.get_tensor_by_name(f)._node
        if isinstance(f, Symbol):
            if f._node.graph is not self.graph.ir:
                raise ValueError(f"Fetch argument {f!r} cannot be interpreted as a Tensor. "
                                 f"(Tensor {f!r} is not an element of this graph.)")
            return f._node
        raise TypeError(f"Fetch argument {f!r} has invalid type {type(f)!r}, must be a string "
                        f"or Tensor. (Can not convert a {type(f).__name__} into a Tensor or "
                        f"Operation.)")

    def _feed(self, key, value) -> tuple[Node, Tensor]:
        if isinstance(key, str):
            key = self.graph.get_tensor_by_name(key)
        if not isinstance(key, Symbol):
            raise TypeError(f"Cannot interpret feed_dict key as Tensor: Can not convert a "
                            f"{type(key).__name__} into a Tensor.")
        if key._node.graph is not self.graph.ir:
            raise TypeError(f"Cannot interpret feed_dict key as Tensor: Tensor {key!r} is not "
                            f"an element of this graph.")
        if isinstance(value, Symbol):
            raise TypeError(f"The value of a feed cannot be a tf.Tensor object. Acceptable "
                            f"feed values include Python scalars, strings, lists, numpy "
                            f"ndarrays, or TensorHandles. For reference, the tensor object was "
                            f"{value!r} which was passed to the feed with key {key!r}.")
        node = key._node
        spec = node.spec
        arr = value._array if isinstance(value, Value) else xp.asarray(value)
        if arr.dtype != spec.dtype:
            arr = arr.astype(spec.dtype)
        if not _shape_fits(arr.shape, spec.shape):
            raise ValueError(f"Cannot feed value of shape {tuple(arr.shape)!r} for Tensor "
                             f"{key.name!r}, which has shape {tf_shape(spec.shape)!r}")
        return node, Tensor(arr)

    def plan(self, fetch_nodes: tuple, fed: frozenset) -> list[Node]:
        key = (fetch_nodes, fed)
        plan = self._plans.get(key)
        if plan is None:
            plan = [n for n in needed_nodes(self.graph.ir, fetch_nodes, fed) if n not in fed]
            self._plans[key] = plan
        return plan

    def run(self, fetches, feed_dict: dict | None = None):
        """Compute ``fetches`` (any nesting); returns NumPy values in the same structure."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        if not self.graph.ir.nodes:
            raise RuntimeError("The Session graph is empty.  Add operations to the graph "
                               "before calling run().")
        leaves, spec = tree_flatten(fetches)
        if fetches is None:
            self._fetch_node(None)
        nodes = tuple(self._fetch_node(f) for f in leaves)
        env: dict = {}
        for k, v in (feed_dict or {}).items():
            node, t = self._feed(k, v)
            env[node] = t
        plan = self.plan(nodes, frozenset(env))
        with contextlib.ExitStack() as stack:
            # run below any graph builder (``with g.as_default()`` keeps one on the
            # dispatch stack): the steps compute, and no worker thread touches the stack
            top = current_mode()
            while isinstance(top, GraphBuilder):
                stack.enter_context(top.lowered())
                top = current_mode()
            self.interpreter.execute(plan, env)
        out = [_numpy(env[n]) for n in nodes]
        return tree_unflatten(out, spec)

    def make_callable(self, fetches, feed_list=()):
        def call(*values):
            return self.run(fetches, dict(zip(feed_list, values, strict=True)))
        return call

    @property
    def log(self) -> Timeline:
        """The latest ``run``'s execution log on the scheduler (``workers > 1``; empty
        otherwise): a ``graphgrad.graph.Timeline`` of ``LogEntry(node, worker, start,
        end)`` (seconds from the start of the run) sorted by start. ``print(sess.log)``
        shows one line per node with the nodes it was in progress together with;
        ``sess.log.together("A", "B")`` asks whether two nodes overlapped;
        ``sess.log.gantt("run.png")`` draws a Gantt chart (matplotlib)."""
        return getattr(self.interpreter, "log", None) or Timeline()


def _numpy(v):
    if v is None:
        return None
    arr = v._array if isinstance(v, Value) else xp.asarray(v)
    return arr[()] if arr.ndim == 0 else arr.copy() if not arr.flags.owndata else arr


InteractiveSession = Session
