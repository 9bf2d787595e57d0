"""Layer ``passes``: ``constant_folding``: an op whose inputs are all constants is run
once, now, and replaced by a constant node holding its result.

The op runs through the IR's own interpreter (``Interpreter.run_call``: the op's
``apply``, run-time params bound as at run time), hence through the op's one
definition (DESIGN decision 1), eagerly: whatever sits on the dispatch stack when the
pass is called (a tracer, a vmap level) is stepped over for the evaluation. Folding
works down a chain in one pass (a folded node is a constant for its users).

Not folded:

* nodes with side effects (random draws, assignments, module calls), and any kind other
  than ``call`` (control flow, ``vjp`` nodes and ``shape`` reads stay: a jit trace's
  placeholders carry the example's shape, but the graph serves other shapes);
* results of more than ``max_elements`` elements (default ``FOLD_MAX_ELEMENTS``): a
  constant is stored in the graph, and ``x.expand(1000, 1000)`` of a constant costs one
  value to compute but a million to keep;
* a node whose evaluation fails (it fails at run time, as before) or whose result's
  shape/dtype is not exactly the node's recorded Spec;
* a node that the output node or an ``assign`` reads directly: its result would be
  handed out (or stored as a variable's value) as the very array the constant holds, so
  an in-place change by the caller would change the graph. The chain below it folds.

The folded value is a copy (never a view of another constant). NumPy warnings the
evaluation raises (a division by zero) are silenced: they would come at optimization
time instead of at run time. Constants are taken to be immutable, as the IR defines
them (a value baked in): changing a constant's array in place after folding is not
seen by the folded nodes.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from graphgrad.backend import xp
from graphgrad.graph import Graph, Interpreter, Node
from graphgrad.graph.interpreter import as_tensor
from graphgrad.tensor.modes import current_mode

from .purity import handed_out, has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["constant_folding", "FOLD_MAX_ELEMENTS", "CONSTANT_FOLDING", "fold_value"]

FOLD_MAX_ELEMENTS = 1 << 16  # 64 Ki elements: 256 KiB of float32 per folded node


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Run ops eagerly: every interpreter on the dispatch stack is stepped over for the
    duration (``lowered``, innermost first) and put back afterwards."""
    with contextlib.ExitStack() as stack:
        while (top := current_mode()) is not None:
            stack.enter_context(top.lowered())
        yield


def fold_value(node: Node, args: list, interp: Interpreter, max_elements: int):
    """``node`` (a call) run on ``args`` (tensors and literals), as an array that fits its
    Spec, or None where it is not folded (too big, failing, another Spec)."""
    try:
        with eager(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = interp.run_call(node, args)
    except Exception:  # noqa: BLE001 - the node fails at run time, as it did before
        return None
    arr = getattr(out, "_array", None)
    if arr is None or arr.size > max_elements:
        return None
    spec = node.spec
    if spec.shape is None or tuple(arr.shape) != tuple(spec.shape) or arr.dtype != spec.dtype:
        return None
    return xp.array(arr, copy=True)


def _rewriter(max_elements: int):
    def rewrite(graph: Graph, subs: dict) -> Rebuild:
        rb = Rebuild(graph, subs)
        interp = Interpreter(graph)
        held = handed_out(graph)
        for n in graph.nodes:
            if n.kind != "call" or n in held or has_side_effects(n):
                rb.keep(n)
                continue
            ins = [rb.arg(i) for i in n.inputs]
            if not all(i.kind == "constant" for i in ins if isinstance(i, Node)):
                rb.keep(n)
                continue
            args = [as_tensor(i.value) if isinstance(i, Node) else i for i in ins]
            value = fold_value(n, args, interp, max_elements)
            if value is None:
                rb.keep(n)
            else:
                rb.constant(n, value)
        return rb
    return rewrite


CONSTANT_FOLDING = GraphPass("constant_folding", _rewriter(FOLD_MAX_ELEMENTS))  # optimize's


def constant_folding(graph: Graph, max_elements: int = FOLD_MAX_ELEMENTS) -> Graph:
    """``graph`` with its constant computations evaluated (see the module docstring): a
    new Graph, or ``graph`` itself when nothing folds. The argument is never changed."""
    return GraphPass("constant_folding", _rewriter(max_elements))(graph).graph
