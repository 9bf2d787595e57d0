"""Layer ``fx``: symbolic tracing in torch.fx's shape, onto graphgrad's one IR.

``symbolic_trace(fn_or_module)`` runs the function once on ``Proxy`` values; every op,
tensor method, operator and ``nn.Module`` call on them becomes a node of a
``graphgrad.graph.Graph`` (leaf modules as ``call_module`` nodes, parameters as
``variable`` nodes read at run time). The result is a ``GraphModule``: callable and
differentiable, printable as code (``.code``, ``print_readable()``) and as a table
(``.graph.print_tabular()``), drawable (``.graph.to_dot()``), runnable node by node by
``Interpreter`` and rewritable by ``Transformer``.

Without example inputs, a call whose shape rule needs an input's rank is recorded as
torch.fx records calls (``call_function``/``call_method`` nodes run when the graph runs,
``python_calls``); ``passes.shape_prop.ShapeProp`` fills the shapes in from example
inputs. ``wrap`` makes a function a leaf, ``Tracer.is_leaf_module`` a module.

As in torch.fx, Python control flow on a traced value raises ``TraceError``, and code
that does not touch a Proxy (``np.random.rand()``, ``gg.randn(3)``) runs once at trace
time, its result frozen into the graph. graphgrad's random functions applied to a traced
value (``F.dropout(x)``, ``gg.randn_like(x)``) are recorded, as torch.fx records the call:
a ``random`` node that draws anew on every call from graphgrad's default generator, as
eager code does (``manual_seed`` reproduces eager's draws); dropout's ``training`` flag
is the value at trace time. ``x.detach()`` is a ``Detach`` node (stop-gradient).
"""

from .api import symbolic_trace
from .errors import TraceError
from .graph_module import GraphModule, captured_graph_module
from .interpreter import Interpreter, Transformer
from .node_view import FxGraph, FxNode
from .proxy import Proxy
from .python_calls import wrap
from .tracer import PH, Tracer
from . import passes  # noqa: E402,I001 - graphgrad.fx.passes.shape_prop, as torch.fx's

__all__ = ["symbolic_trace", "Tracer", "Proxy", "GraphModule", "Interpreter", "Transformer",
           "TraceError", "PH", "captured_graph_module", "FxGraph", "FxNode", "wrap",
           "passes"]
