"""Layer ``jit``: ``check_trace``, PyTorch's sanity check of a JIT trace.

The function is traced again on the check inputs and the two graphs are compared: a
different structure (an op, a param, a Python number baked in) raises
``TracingCheckError`` "Graphs differed across invocations!", a tensor constant with a
different value raises "Tensor-valued Constant nodes differed in value across
invocations" (both catch nondeterminism the trace froze: a random number, a dropout
mask). Then the traced function and the Python function run on the check inputs, and
outputs that differ give a TracerWarning, as in PyTorch. Random nodes (``rand``,
dropout) draw afresh: a trace that has them gets PyTorch's "Trace had nondeterministic
nodes" warning, and graphgrad runs the trace and the function from the same state of the
default generator (a random node draws what eager code draws), so their outputs still
compare; the generator is left as the check found it.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable

from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten
from graphgrad.graph import Graph, Node, is_impure, short, tabular
from graphgrad.tensor import Tensor, Value
from graphgrad.tensor.creation import default_generator

from .trace_values import TracerWarning

__all__ = ["TracingCheckError", "check_trace", "clone_inputs"]

_CONSTANT_DIFF = ("ERROR: Tensor-valued Constant nodes differed in value across invocations. "
                  "This often indicates that the tracer has encountered untraceable code.")
_ATOL = {"float16": 1e-5, "float32": 1e-5, "float64": 1e-7, "complex64": 1e-5,
         "complex128": 1e-7}


class TracingCheckError(Exception):
    """The trace failed its sanity check (PyTorch's ``torch.jit.TracingCheckError``)."""

    def __init__(self, graph_diff_error: str | None, tensor_compare_error: str | None = None,
                 extra_msg: str | None = None):
        self.message = "Tracing failed sanity checks!\n"
        if extra_msg is not None:
            self.message += extra_msg + "\n"
        if graph_diff_error is not None:
            self.message += "ERROR: Graphs differed across invocations!\n"
            self.message += _indent(graph_diff_error) + "\n"
        if tensor_compare_error is not None:
            self.message += tensor_compare_error
        super().__init__(self.message)


def _indent(text: str) -> str:
    return "\n".join("\t" + line for line in text.splitlines())


def _signature(graph: Graph) -> list[str]:
    """One line per node: what it does and what it reads (constants by shape only)."""
    pos = {n: k for k, n in enumerate(graph.nodes)}
    lines = []
    for n in graph.nodes:
        ins = ", ".join(f"%{pos[i]}" if isinstance(i, Node) else repr(i) for i in n.inputs)
        # no Specs: like PyTorch (which erases shapes first), a shape-generic trace
        # checked on inputs of another shape is the same graph
        lines.append(f"%{pos[n]} = {n.kind}[{n.target_name}]({ins}) {n.params!r}")
    return lines


def _constants_differ(a: Graph, b: Graph) -> str | None:
    for na, nb in zip(a.nodes, b.nodes, strict=True):
        if na.kind != "constant":
            continue
        va, vb = na.value, nb.value
        if va.shape != vb.shape or not xp.array_equal(va, vb, equal_nan=va.dtype.kind in "fc"):
            return (f"{_CONSTANT_DIFF}\n\tNode:\n\t\t{na.name} = constant  # {short(na.spec)}\n"
                    f"\tComparison exception:\n{_indent(_indent(_compare(va, vb, 0.0, 0.0)))}")
    return None


def _compare(got, want, rtol: float, atol: float) -> str | None:
    """None when close (NaNs equal), else assert_close's report."""
    got, want = xp.asarray(got), xp.asarray(want)
    if got.shape != want.shape:
        return f"The values for attribute 'shape' do not match: {got.shape} != {want.shape}."
    close = xp.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    diff = xp.abs(got.astype(xp.float64) - want.astype(xp.float64))
    rel = diff / xp.maximum(xp.abs(want.astype(xp.float64)), 1e-300)
    ia, ir = xp.unravel_index(xp.nanargmax(diff), diff.shape), \
        xp.unravel_index(xp.nanargmax(rel), rel.shape)
    bad = int((~close).sum())
    return (f"Tensor-likes are not close!\n\nMismatched elements: {bad} / {close.size} "
            f"({100.0 * bad / close.size:.1f}%)\nGreatest absolute difference: {diff[ia]} at "
            f"index {tuple(int(i) for i in ia)} (up to {atol} allowed)\nGreatest relative "
            f"difference: {rel[ir]} at index {tuple(int(i) for i in ir)} (up to {rtol} "
            f"allowed)")


def _run(what: str, fn: Callable, inputs: tuple):
    try:
        return fn(*inputs)
    except Exception as e:
        raise TracingCheckError(None, None, f"encountered an exception while running the "
                                f"{what} with test inputs.\nException:\n"
                                f"{_indent(f'{type(e).__name__}: {e}')}") from e


def _nondeterministic(graph: Graph) -> None:
    """PyTorch's warning about the random nodes of a trace (which graphgrad's check runs
    with the generator in the same state for the trace and the function)."""
    nodes = [n for n in graph.nodes if is_impure(n)]
    if nodes:
        listed = "\n".join(f"\t{n.name} = {n.target_name}  # {short(n.spec)}"
                           for n in nodes[:20])
        warnings.warn(f"Trace had nondeterministic nodes. Did you forget call .eval() on your "
                      f"model? Nodes:\n{listed}\nThis may cause errors in trace checking. To "
                      f"disable trace checking, pass check_trace=False to torch.jit.trace() "
                      f"(graphgrad compares the trace with the function drawing from the "
                      f"same generator state, so their draws agree)", TracerWarning,
                      stacklevel=4)


class _SameDraws:
    """Puts graphgrad's default generator back into the state it had when made: each run
    of the check draws what the others drew, and the check leaves the generator as it
    found it (tracing with or without the check draws the same afterwards)."""

    def __init__(self):
        self.rng = default_generator.rng
        self.state = self.rng.bit_generator.state

    def restore(self) -> None:
        default_generator.rng = self.rng
        self.rng.bit_generator.state = self.state


def check_trace(traced, fn: Callable, retrace: Callable, check_inputs: list[tuple],
                tolerance: float, hint: str | None) -> None:
    """Raise TracingCheckError or warn as described in the module docstring.
    ``retrace(inputs)`` records the function again and returns its Graph."""
    _nondeterministic(traced.ir)
    draws = _SameDraws()
    try:
        _check_each(traced, fn, retrace, check_inputs, tolerance, hint, draws)
    finally:
        draws.restore()


def _check_each(traced, fn: Callable, retrace: Callable, check_inputs: list[tuple],
                tolerance: float, hint: str | None, draws: _SameDraws) -> None:
    for inputs in check_inputs:
        draws.restore()
        with warnings.catch_warnings():  # the first trace has said all there is to say
            warnings.simplefilter("ignore")
            graph = _run("repeated trace", retrace, (clone_inputs(inputs),))
        mine, theirs = _signature(traced.ir), _signature(graph)
        if mine != theirs:
            diff = "\n".join(difflib.unified_diff(
                tabular(traced.ir).splitlines(), tabular(graph).splitlines(),
                "first trace", "repeated trace", lineterm=""))
            raise TracingCheckError(f"Graph diff:\n{_indent(diff)}", None, hint)
        const = _constants_differ(traced.ir, graph)
        if const is not None:
            raise TracingCheckError(None, const, hint)
        draws.restore()
        got = tree_flatten(_run("trace", traced, clone_inputs(inputs)))[0]
        draws.restore()
        want = tree_flatten(_run("Python function", fn, clone_inputs(inputs)))[0]
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            g, w = (v._array if isinstance(v, Value) else v for v in (g, w))
            err = _compare(g, w, tolerance, _ATOL.get(xp.asarray(w).dtype.name, 0.0))
            if err is not None:
                warnings.warn(f"Output nr {k + 1}. of the traced function does not match the "
                              f"corresponding output of the Python function. Detailed "
                              f"error:\n{err}", TracerWarning, stacklevel=3)


def clone_inputs(inputs: tuple) -> tuple:
    """Fresh copies, so that in-place ops of one run do not change the next one's input."""
    return tuple(_copy_tensor(x) if isinstance(x, Value) else x for x in inputs)


def _copy_tensor(x: Value) -> Tensor:
    t = Tensor(xp.array(x._array, copy=True))
    if x._requires_grad:
        t.requires_grad_(True)
    return t
