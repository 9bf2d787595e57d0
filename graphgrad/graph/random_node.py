"""Layer ``graph``: the ``random`` node kind: samples drawn each time the node runs, not
when the graph is built (TF1's random ops: a fresh value per ``Session.run``).

A random node is impure (``graph.is_impure(node)``): dead-code elimination must keep it
and common-subexpression elimination must never merge two of them. Its params name the
distribution (``normal``, ``uniform``, ``truncated_normal``, ``integers``) and its
arguments; dims known only at run time are ``Dyn`` entries of ``shape`` bound to data
inputs, as for call nodes.

Seeds follow TF1: with no seed the draws come from graphgrad's global generator
(``graphgrad.manual_seed``); with an op or graph seed the node has its own generator,
made from the (graph seed, op seed) pair on first use in each session and kept in the
session's state, so every new session replays the same sequence.
"""

from __future__ import annotations

import threading
from numbers import Number

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, Value
from graphgrad.tensor.creation import default_generator

from .node import Dyn, Node
from .spec import Spec

__all__ = ["DISTRIBUTIONS", "add_random", "draw", "DEFAULT_GRAPH_SEED"]

DEFAULT_GRAPH_SEED = 87654321  # TF1's graph seed when only an op seed is given
_LOCK = threading.Lock()       # NumPy generators are not thread-safe (the scheduler)


def _truncated(rng, shape, mean: float, stddev: float):
    """Normal samples more than two standard deviations out are drawn again (TF)."""
    out = rng.standard_normal(shape)
    bad = xp.abs(out) > 2
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = xp.abs(out) > 2
    return out * stddev + mean


DISTRIBUTIONS = {
    "normal": lambda rng, shape, p: rng.normal(p["mean"], p["stddev"], shape),
    "truncated_normal": lambda rng, shape, p: _truncated(rng, shape, p["mean"], p["stddev"]),
    "uniform": lambda rng, shape, p: rng.uniform(p["minval"], p["maxval"], shape),
    "integers": lambda rng, shape, p: rng.integers(p["minval"], p["maxval"], shape),
}


def add_random(builder, dist: str, shape, dtype, params: dict, seed=None,
               name: str | None = None) -> Node:
    """Append a random node to ``builder``'s graph. ``shape`` holds ints and 0-d int
    Symbols (run-time dims); ``seed`` is None or a (graph seed, op seed) pair."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r} (one of {', '.join(DISTRIBUTIONS)})")
    inputs, dims = [], []
    for d in shape:
        if isinstance(d, Number):
            if int(d) < 0:
                raise ValueError(f"random {dist}: dimension {d} of shape {tuple(shape)} is "
                                 f"negative")
            dims.append(int(d))
        else:
            dims.append(Dyn(len(inputs)))
            inputs.append(builder.node_of(d, literal_ok=False))
    spec = Spec(tuple(None if isinstance(d, Dyn) else d for d in dims), xp.dtype(dtype))
    return builder.graph.add("random", name or f"random_{dist}", inputs=tuple(inputs),
                             deps=builder.deps(), spec=spec,
                             params={"dist": dist, "shape": tuple(dims), "seed": seed,
                                     **params})


def _generator(node: Node, state: dict):
    seed = node.params.get("seed")
    if seed is None:
        return default_generator.rng
    key = ("rng", node)  # not a variable: the printer's name lookup never matches it
    rng = state.get(key)
    if rng is None:
        rng = state[key] = xp.random.default_rng(list(seed))
    return rng


def draw(node: Node, state: dict, args) -> Tensor:
    """The node's samples for this run (``args``: the values of its data inputs)."""
    shape = tuple(int(args[d.index]._array if isinstance(args[d.index], Value)
                      else args[d.index]) if isinstance(d, Dyn) else d
                  for d in node.params["shape"])
    with _LOCK:
        arr = DISTRIBUTIONS[node.params["dist"]](_generator(node, state), shape, node.params)
    return Tensor(xp.asarray(arr).astype(node.spec.dtype, copy=False))
