"""Layer ``graph``: the one computational-graph IR of graphgrad.

``Graph`` is a flat list of ``Node``s in topological order; nodes call ops of
``graphgrad.ops.REGISTRY`` (no second op set), carry data and control-dependency
inputs, and hold sub-graphs for ``cond`` and ``while_loop``. ``GraphBuilder`` turns op
calls on ``Symbol``s into nodes; ``Interpreter`` runs one (``Scheduler`` on several
threads); ``verify``, printing (table, Python) and DOT serve every producer: the static
API and the capture frontends.

The ``vjp`` and ``while_grad`` node kinds (run-time derivatives, vjp_node.py) are here
because the interpreter runs them; differentiating a graph, which makes them, is a
layer up: ``graphgrad.passes.grad`` (passes/differentiate.py). What turns a graph into
a compiled callable is in ``graphgrad.backends``.
"""

from .builder import GraphBuilder, builder_of, building
from . import eager_graph
from .dot import have_dot, render, to_dot
from .errors import FailedPreconditionError, GraphError, InvalidArgumentError, OpError
from .graph import Graph
from .interpreter import Interpreter, needed_nodes
from .node import IMPURE_KINDS, KINDS, Dyn, Node, is_impure
from .printer import (PythonCode, dynamic_tuple_text, is_dynamic, literal_text, python_code,
                      tabular)
from .scheduler import LogEntry, Scheduler, Timeline, overlaps
from .spec import Spec, merge_specs, short, tf_dtype_name, tf_shape
from .symbol import Symbol, symbol
from .trace import trace
from .verify import propagate_specs, toposort, verify

__all__ = ["Graph", "Node", "Dyn", "KINDS", "IMPURE_KINDS", "is_impure", "Spec", "Symbol",
           "symbol", "GraphBuilder",
           "building", "builder_of", "Interpreter", "Scheduler", "LogEntry", "Timeline", "overlaps",
           "verify", "toposort", "propagate_specs", "tabular", "python_code", "PythonCode",
           "is_dynamic", "dynamic_tuple_text", "literal_text",
           "to_dot", "render", "have_dot", "trace", "needed_nodes", "short", "tf_shape",
           "tf_dtype_name", "merge_specs", "GraphError",
           "OpError", "InvalidArgumentError", "FailedPreconditionError"]
