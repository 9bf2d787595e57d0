"""Layer ``jit``: ``graphgrad.jit.trace``, PyTorch's ``torch.jit.trace`` on graphgrad's IR.

``trace(fn, example_inputs)`` runs ``fn`` once on the examples with real values while
recording every op into a ``graphgrad.graph.Graph`` (``trace_recorder.py``) and returns a
``TracedFunction``, an ``fx.GraphModule``: callable, differentiable (it runs the graph op
by op through the dispatch point, so ``backward()`` works as in eager mode), ``.graph``
with torch.fx's nodes over the IR ``.ir``, printable as a table and as Python
(``.code``), drawable (``graphgrad.graph.to_dot(traced.ir)``).

What a trace can and cannot keep, as the lecture shows:

* Python control flow runs once: the graph holds the branch the example took, and
  ``bool(x)`` (an ``if`` on a tensor), ``float(x)``, ``x.item()`` warn with PyTorch's
  ``TracerWarning`` (``trace_values.py``).
* Sizes are recorded: ``x.shape`` gives traced ints and Python arithmetic on them becomes
  nodes, so a reshape by ``x.shape`` is right for inputs of other shapes.
* External code (``numpy.random``, ``random``, ``time``, a NumPy function on a traced
  tensor, ``Tensor.numpy()``) is an ``ExternalCallError`` naming the call and the source
  line; ``strict=False`` makes it a warning and freezes the value
  (``trace_external.py``).
* Random numbers drawn by graphgrad (``gg.rand/randn/randint``, their ``*_like`` forms,
  a dropout mask) become ``random`` nodes that draw afresh on every call, as PyTorch's
  trace records ``aten::rand``/``aten::dropout``; their sizes follow the traced input.
  They draw from graphgrad's default generator with eager's NumPy call, so after
  ``gg.manual_seed(s)`` the traced function draws what the Python function draws. A draw
  from a user's ``Generator`` (and ``randperm``, ``uniform_``...) is frozen, with a
  TracerWarning. Dropout's ``training`` flag is the module's state at trace time (as in
  PyTorch): trace after ``.eval()`` for a graph without the mask.
* ``detach()`` / ``.data`` record a ``Detach`` node: same values, no gradient through it.
* ``check_trace`` traces again and compares (``trace_check.py``).

The trace itself runs under ``no_grad`` (it needs values, not a backward graph), so a
function that calls ``autograd.grad`` inside cannot be traced. In-place updates of the
module's buffers (BatchNorm's running statistics and ``num_batches_tracked`` in train
mode) are extra outputs of the graph, which stays functional, and every call of the
traced function writes them back into the module, as eager does. A ``for`` over
``range(x.shape[0])`` is unrolled without a warning, as in PyTorch (``check_inputs`` of
another size catches it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from graphgrad.autograd import no_grad
from graphgrad.func.pytree import TreeSpec, tree_unflatten
from graphgrad.fx.graph_module import GraphModule
from graphgrad.graph import Graph, Interpreter, short, to_dot
from graphgrad.nn import Module
from graphgrad.tensor import Value

from .trace_check import TracingCheckError, clone_inputs
from .trace_check import check_trace as _check
from .trace_external import ExternalCallError
from .trace_recorder import Capture, record
from .trace_values import TracerWarning

__all__ = ["trace", "TracedFunction", "TracerWarning", "TracingCheckError",
           "ExternalCallError"]


class TracedFunction(GraphModule):
    """The result of ``trace``: a ``fx.GraphModule`` (``.graph`` the torch.fx-style view,
    ``.ir`` the recorded IR, ``.code``, ``print_readable()``, ``recompile()``) that runs
    its graph on the IR's interpreter, binding the extra placeholders to the traced
    module's parameters and buffers (its own attributes, as it shares the module's: the
    view shows them as ``get_attr`` nodes, the code reads ``self.fc.weight``) and writing
    back the buffers the graph updates. A tensor the function reads that is no state of
    a module (a closure's tensor that requires grad) stays an argument of the code."""

    def __init__(self, graph: Graph, captures: list[Capture], tree: TreeSpec,
                 fn: Callable, module: Module | None, n_inputs: int,
                 writes: list[Capture] = ()):
        Module.__init__(self)
        self._init_face(graph.name)
        if module is not None:
            self._share_state(module)
        d = self.__dict__   # plain attributes: ``fn``/``module`` are no submodules of it
        d["_captures"] = captures
        d["_writes"] = list(writes)  # state updates: the graph's last outputs
        d["_tree"] = tree
        d["fn"] = fn
        d["module"] = module
        d["_n"] = n_inputs
        d["__name__"] = graph.name
        self.graph = graph

    def tabular(self) -> str:
        return self.ir.tabular()

    def print_tabular(self) -> None:
        print(self.ir.tabular())

    def to_dot(self) -> str:
        return to_dot(self.ir)

    def parameters(self, recurse: bool = True):
        """The traced module's parameters (they stay live: the graph reads them)."""
        return self.module.parameters(recurse) if self.module is not None else iter(
            c.tensor for c in self._captures if c.tensor._requires_grad)

    def captured(self) -> list[Value]:
        """The tensors bound to the graph's extra placeholders at this moment."""
        return [c.value(self.module) for c in self._captures]

    def __call__(self, *args):
        graph = self.ir
        if len(args) != self._n:
            raise TypeError(f"{graph.name}() traced with {self._n} input(s), got "
                            f"{len(args)}")
        for k, a in enumerate(args):
            if not isinstance(a, Value):
                raise TypeError(f"{graph.name}(): input {k} must be a Tensor, got "
                                f"{type(a).__name__}")
        outs = list(Interpreter(graph).run(*args, *self.captured()))
        if self._writes:
            n = len(outs) - len(self._writes)
            with no_grad():  # a buffer update, as eager's: not part of the autograd graph
                for w, new in zip(self._writes, outs[n:], strict=True):
                    w.value(self.module).copy_(new)
            outs = outs[:n]
        return tree_unflatten(outs, self._tree)

    forward = __call__

    def __repr__(self) -> str:
        ins = ", ".join(f"{p.name}: {short(p.spec)}" for p in self.ir.inputs)
        return f"<TracedFunction {self.ir.name}({ins}): {len(self.ir)} nodes>"


def _names(fn: Callable, n: int) -> list[str]:
    target = fn.forward if isinstance(fn, Module) else fn
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    return names + [f"x{k}" for k in range(len(names), n)]


def _as_inputs(example_inputs) -> tuple:
    if isinstance(example_inputs, Value):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError(f"Type '{type(example_inputs).__name__}' cannot be traced. Only "
                        f"Tensors and (possibly nested) Lists, Dicts, and Tuples of Tensors "
                        f"can be traced")
    for x in example_inputs:
        if not isinstance(x, Value):
            raise TypeError(f"Type '{type(x).__name__}' cannot be traced. Only Tensors and "
                            f"(possibly nested) Lists, Dicts, and Tuples of Tensors can be "
                            f"traced (graphgrad.jit.trace takes a flat tuple of Tensors)")
    return tuple(example_inputs)


def _module_of(fn: Callable) -> Module | None:
    if isinstance(fn, Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, Module) else None


def trace(func: Callable, example_inputs=None, check_trace: bool = True,
          check_inputs: list | None = None, check_tolerance: float = 1e-5,
          strict: bool = True) -> TracedFunction:
    """Trace ``func`` (a function or an ``nn.Module``) on ``example_inputs`` (a Tensor or
    a tuple of Tensors) into a ``TracedFunction``; see the module docstring.

    ``strict=True`` refuses calls into external code (``ExternalCallError``) and list or
    dict outputs; ``check_trace`` traces again on ``check_inputs`` (default: the examples)
    and raises ``TracingCheckError`` where the graphs differ."""
    if example_inputs is None:
        raise ValueError("graphgrad.jit.trace needs example_inputs (a Tensor or a tuple of "
                         "Tensors)")
    examples = _as_inputs(example_inputs)
    module = _module_of(func)
    state = {}
    if module is not None:
        state = {id(t): n for n, t in (*module.named_parameters(), *module.named_buffers())}
    name = type(func).__name__ if isinstance(func, Module) else getattr(
        func, "__name__", "traced")
    names = _names(func, len(examples))
    check_copies = [clone_inputs(examples)] if check_inputs is None else [
        _as_inputs(c) for c in check_inputs]

    def run(inputs: tuple):
        return record(func, inputs, names, strict=strict, state_names=state, name=name)

    graph, captures, tree, writes = run(examples)
    graph.header.append("graphgrad.jit.trace on inputs " + ", ".join(
        short(p.spec) for p in graph.inputs[:len(examples)]))
    traced = TracedFunction(graph, captures, tree, func, module, len(examples), writes)
    if check_trace:
        hint = None
        if module is not None and module.training:
            hint = ("The module is in training mode: its dropout layers draw random "
                    "numbers. Did you forget call .eval() on your model?")
        _check(traced, func, lambda inputs: run(inputs)[0], check_copies, check_tolerance,
               hint)
    return traced
