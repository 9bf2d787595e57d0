"""Layer ``passes``: Graph -> Graph rewrites on graphgrad's one IR (``graphgrad.graph``),
and graph-level differentiation.

Each pass is a pure function of a Graph: it returns a new Graph when it changed
something and its argument itself when not, never mutating it (``rebuild.py`` says how,
and how state keyed by nodes follows: ``carry_state``). Every result is verified
(``graph.verify``) and stamped with the pass's name in its printed header. What a graph
computes, its outputs' shapes and dtypes, its random draws and its gradients
(``grad`` on the result) are unchanged.

* ``dead_code_elimination``: drop what no output or side effect needs (dead_code.py);
* ``common_subexpression_elimination``: merge repeated computations
  (common_subexpressions.py);
* ``constant_folding``: evaluate ops on constants once (constant_folding.py);
* ``simplify``: exact algebraic identities (simplify.py);
* ``fuse_elementwise``: elementwise chains with at most one trailing reduction as one
  ``Fused`` node each, for the backends to compile (fusion.py, fused_op.py);
  ``fusion_report`` says what fused and why the rest did not;
* ``optimize``: all of them to a fixed point, with a report (optimize.py);
* ``grad(graph, outputs, inputs)``: the backward pass as more nodes of the same graph,
  to any order, through ``cond`` and ``while_loop`` (differentiate.py). It is the one
  that extends its argument instead of returning a new graph (graph extension).

The backends that turn a graph into a callable are a layer up, in ``graphgrad.backends``.
"""

from .common_subexpressions import common_subexpression_elimination
from .constant_folding import FOLD_MAX_ELEMENTS, constant_folding
from .dead_code import dead_code_elimination, live_nodes
from .differentiate import grad
from .fused_op import Fused, FusedProgram
from .decompositions import decompose
from .fusion import FUSION, FusionReport, fuse_elementwise, fusion_report
from .optimize import DEFAULT_PASSES, OptimizeReport, PassRun, optimize
from .purity import has_side_effects
from .rebuild import GraphPass, PassResult, Rebuild, carry_state, run_pass
from .simplify import simplify

__all__ = ["dead_code_elimination", "common_subexpression_elimination", "constant_folding",
           "simplify", "optimize", "OptimizeReport", "PassRun", "DEFAULT_PASSES",
           "FOLD_MAX_ELEMENTS", "carry_state", "has_side_effects", "live_nodes", "GraphPass",
           "PassResult", "Rebuild", "run_pass", "grad", "fuse_elementwise", "fusion_report",
           "decompose", "FusionReport", "Fused", "FusedProgram", "FUSION"]
