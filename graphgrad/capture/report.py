"""Layer ``capture``: the side-by-side capture report (the lecture's comparison): the
methods, the checks against eager and the table (views.py: the column explanations,
``--full`` messages, drawings, optimized graphs).

``report(fn, *example_inputs)`` runs one function eagerly and through every way graphgrad
has of turning it into a graph: the static API (the unchanged function called on
placeholders of unknown dims), ``fx.symbolic_trace``, ``jit.trace``, ``jit.script`` and
``compile``. For each it records the outcome:

* ``captured``: a graph was made and it agrees with eager on every check;
* ``warned``: capture warned (e.g. ``TracerWarning``); the checks say whether it was right;
* ``error``: capture or a call raised (also on the second input); the message is kept;
* ``silently wrong``: no warning, no error, and a check found a wrong result.

"Wrong" is found by checking, never assumed. Three checks, against eager:

1. the result on the example inputs equals eager's (when eager is deterministic);
2. a second call on the same inputs: where eager gives a different value each call (it
   draws a random number), a capture that gives the same value twice has frozen it;
3. the result on a *second, different* input equals eager's on it. By default the second
   input has every dim one larger and values of the opposite sign to the example's mean
   (so a sign test takes the other branch); where eager itself rejects the larger shape
   the example's shape is kept.

For an ``nn.Module`` (or a bound method of one) a fourth check compares its buffers: one
call of the capture must update them (BatchNorm's running statistics in train mode) as
one eager call from the same state does; every method and eager get their own copy of
the module, so no run sees another's updates.

``static_rewrite``, a version of the function written for the static API
(``static.cond`` for an ``if`` on a tensor, ``static.shape`` for a shape read at run
time), adds the row ``static (rewritten)`` next to the ``static`` row, checked like
every other: the lecture's point that TF1 needs the function rewritten, shown working.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import linecache
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from graphgrad.graph import Graph
from graphgrad.graph.readable_code import public_function, readable_code
from graphgrad.nn import Module
from graphgrad.tensor import Tensor, tensor

__all__ = ["report", "CaptureReport", "MethodResult", "METHODS", "REWRITTEN", "other_inputs",
           "Where"]

METHODS = ("eager", "static", "fx.symbolic_trace", "jit.trace", "jit.script", "compile")
REWRITTEN = "static (rewritten)"   # the row of ``static_rewrite``


@dataclass
class Where:
    """A line of the user's source that an error or warning points at; ``col`` and
    ``end_col`` (0-based) mark the expression where Python knows them."""
    file: str
    line: int
    function: str
    source: str
    col: int | None = None
    end_col: int | None = None

    def text(self) -> str:
        """``File "f.py", line 3, in g`` and the line, with a caret under the spot."""
        stripped = self.source.lstrip()
        indent = len(self.source) - len(stripped)
        if self.col is not None and self.end_col is not None and self.end_col > self.col:
            start, width = max(self.col - indent, 0), self.end_col - self.col
        else:  # the whole statement, without a trailing comment
            start, width = 0, len(stripped.split("  #")[0].rstrip())
        return (f'  File "{self.file}", line {self.line}, in {self.function}\n'
                f"    {stripped.rstrip()}\n    {' ' * start}{'^' * max(width, 1)}")


@dataclass
class MethodResult:
    """What one capture method did with the function."""
    method: str
    outcome: str              # captured | warned | error | silently wrong | eager | n/a
    message: str = ""                 # the error, or the first warning
    graphs: list[Graph] = field(default_factory=list)
    example_matches: bool | None = None    # check 1 (None: not comparable or not reached)
    fresh_each_call: bool | None = None    # check 2, only where eager is nondeterministic
    second_matches: bool | None = None     # check 3
    buffers_match: bool | None = None      # check 4, for modules with buffers
    notes: list[str] = field(default_factory=list)
    where: list[Where] = field(default_factory=list)   # the user's lines it points at
    source: str = ""                       # the rewritten function's source (its row)

    @property
    def wrong(self) -> bool:
        if self.fresh_each_call is False or self.buffers_match is False:
            return True
        return self.example_matches is False or self.second_matches is False


@dataclass
class CaptureReport:
    """The per-method results for one function; ``str()`` is the table."""
    function: str
    results: dict[str, MethodResult]
    deterministic: bool
    second: str = ""          # what the 2nd input was, for the column explanation

    def __getitem__(self, method: str) -> MethodResult:
        return self.results[method]

    def table(self) -> str:
        rows = [("method", "outcome", "graphs", "same as eager on a 2nd input", "detail")]
        for r in self.results.values():
            rows.append((r.method, r.outcome, _graph_count(r), _second_cell(r, self),
                         _detail(r)))
        widths = [max(len(row[k]) for row in rows) for k in range(4)]
        lines = [f"capture report for {self.function}"
                 + ("" if self.deterministic else " (eager gives a new value each call)")]
        for k, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
            if k == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
        return "\n".join(lines)

    def graphs_text(self) -> str:
        """Each method's graph(s), as runnable Python."""
        parts = []
        for r in self.results.values():
            for k, g in enumerate(r.graphs):
                title = r.method + (f" (graph {k + 1} of {len(r.graphs)})"
                                    if len(r.graphs) > 1 else "")
                parts.append(f"# ---- {title}\n{_code(g)}")
        return "\n".join(parts)

    def __str__(self) -> str:
        from .views import explain
        return self.table() + "\n\n" + explain(self)


def _graph_count(r: MethodResult) -> str:
    if r.method == "eager":
        return "-"
    return str(len(r.graphs)) if r.graphs else "0"


def _second_cell(r: MethodResult, rep: CaptureReport) -> str:
    if r.outcome in ("error", "n/a"):
        return "NO: raised" if r.second_matches is False else "-"
    if r.fresh_each_call is not None and not rep.deterministic:
        return "new value each call" if r.fresh_each_call else "NO: same value every call"
    return {True: "yes", False: "NO", None: "-"}[r.second_matches]


_PLUMBING = ("placeholder", "output", "constant", "item")


def _ops(graph: Graph) -> str:
    """The graph's operations in order, e.g. ``Lt, cond(Add | Sub)``."""
    parts = []
    for n in graph.nodes:
        if n.kind in _PLUMBING:
            continue
        if n.kind == "cond":
            branches = [_ops(g) or "-" for g in n.subgraphs.values()]
            parts.append(f"cond({' | '.join(branches)})")
        elif n.subgraphs:
            parts.append(f"{n.kind}({'; '.join(_ops(g) for g in n.subgraphs.values())})")
        elif n.kind == "call":   # by its public name, as torch.fx's targets read
            fn, _ = public_function(n.op)
            parts.append(fn.__name__ if fn is not None else n.target_name)
        elif n.kind == "call_module":   # "": the module itself, called whole at run time
            parts.append(n.params.get("target") or "self (the whole module, one call)")
        else:
            parts.append(n.target_name)
    return ", ".join(parts)


def _code(graph: Graph) -> str:
    """The graph as PyTorch-style Python (``forward(self, ...)`` where it reads a module's
    parameters or submodules, as a GraphModule's code does)."""
    reads = any(n.kind in ("variable", "call_module") and "target" in n.params
                for n in graph.nodes)
    return readable_code(graph, self_param=reads).src


def _detail(r: MethodResult) -> str:
    text = r.message.strip().splitlines()[0] if r.message.strip() else ""
    if not text and r.graphs:
        text = " / ".join(f"[{_ops(g)}]" for g in r.graphs)
    if r.notes:
        # what makes a row silently wrong must not be cut off behind a long op list
        parts = r.notes + [text] if r.outcome == "silently wrong" else [text] + r.notes
        text = "; ".join(p for p in parts if p)
    return text if len(text) <= 110 else text[:107] + "..."


# ---- inputs and comparison -----------------------------------------------------------------

def other_inputs(example: Sequence, seed: int = 0, grow: bool = True) -> tuple:
    """A second input for each tensor of ``example``: every dim one larger (``grow``), and
    values of the opposite sign to the example's mean; non-tensors are kept."""
    rng = np.random.default_rng(seed)
    out = []
    for x in example:
        if not isinstance(x, Tensor):
            out.append(x)
            continue
        a = x.detach().numpy()
        shape = tuple(d + 1 for d in a.shape) if grow else a.shape
        sign = -1.0 if a.size == 0 or a.mean() >= 0 else 1.0
        vals = sign * (np.abs(rng.standard_normal(shape)) + 0.5)
        out.append(tensor(vals.astype(a.dtype if a.dtype.kind in "fc" else np.float64)))
    return tuple(out)


def _arrays(out) -> list[np.ndarray]:
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _arrays(o)]
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in _arrays(out[k])]
    if isinstance(out, Tensor):
        return [out.detach().numpy()]
    return [np.asarray(out)]


def _same(a, b) -> bool:
    xs, ys = _arrays(a), _arrays(b)
    return len(xs) == len(ys) and all(
        x.shape == y.shape and np.allclose(x, y, rtol=1e-6, atol=1e-8, equal_nan=True)
        for x, y in zip(xs, ys))


# ---- the methods ---------------------------------------------------------------------------

def _static(fn, example):
    static = importlib.import_module("graphgrad.static")
    g = static.Graph()
    with g.as_default():
        phs = [static.placeholder(x.dtype, shape=(None,) * x.ndim, name=f"x{k}")
               if isinstance(x, Tensor) else x for k, x in enumerate(example)]
        out = fn(*phs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    g.ir.set_outputs([o._node for o in outs if hasattr(o, "_node")])  # for printing

    def run(*inputs):
        feed = {p: x.detach().numpy() for p, x in zip(phs, inputs) if isinstance(x, Tensor)}
        with static.Session(graph=g) as sess:
            res = sess.run(out, feed_dict=feed)
        return tuple(tensor(r) for r in res) if isinstance(res, (tuple, list)) else tensor(res)
    return run, [g.ir]


def _fx(fn, example):
    # as torch.fx traces: no example inputs (calls that need a rank run with the graph)
    gm = importlib.import_module("graphgrad.fx").symbolic_trace(fn)
    return gm, [gm.ir]


def _jit_trace(fn, example):
    traced = importlib.import_module("graphgrad.jit").trace(fn, tuple(example))
    return traced, [traced.ir]


def _jit_script(fn, example):
    scripted = importlib.import_module("graphgrad.jit").script(fn)
    return scripted, [scripted.ir]


def _compile(fn, example):
    dynamo = importlib.import_module("graphgrad.dynamo")
    graphs: list[Graph] = []

    eager_backend = dynamo.lookup_backend("eager")

    def recording_backend(gm, example_inputs):
        # graphs are handed over on each (re)capture, so the list grows with new paths
        graphs.append(getattr(gm, "ir", gm))
        return eager_backend(gm, example_inputs)

    dynamo.reset()
    return dynamo.compile(fn, backend=recording_backend), graphs


_RUNNERS: dict[str, Callable] = {"static": _static, "fx.symbolic_trace": _fx,
                                 "jit.trace": _jit_trace, "jit.script": _jit_script,
                                 "compile": _compile}


def _message(e: BaseException) -> str:
    """``Name: message`` with the message's first non-empty line first (capture errors
    start with a blank line before the source excerpt)."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: " + "\n".join(lines)


def _module_of(fn) -> Module | None:
    if isinstance(fn, Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, Module) else None


def _own_copy(fn):
    """``fn`` on its own copy of its module (a module or a bound method of one), so that
    each method's buffer updates start from the same state; other callables as they are."""
    module = _module_of(fn)
    if module is None:
        return fn
    twin = copy.deepcopy(module)
    return twin if fn is module else getattr(twin, fn.__name__)


def _buffers(fn) -> dict[str, np.ndarray]:
    module = _module_of(fn)
    if module is None:
        return {}
    return {k: b.detach().numpy().copy() for k, b in module.named_buffers() if b is not None}


def _eager_step(fn, inputs):
    """One eager call from ``fn``'s module's current state, on a copy: (output, buffers
    after it); for plain functions (output, {})."""
    twin = _own_copy(fn)
    return twin(*inputs), _buffers(twin)


def _user_lines(fn, tb=None, filename: str | None = None, lineno: int | None = None
                ) -> list[Where]:
    """The lines of ``fn``'s file an exception's traceback passes through (deepest last),
    or the one a warning was issued at."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None) or getattr(fn, "__code__",
                                                                           None)
    file = code.co_filename if code is not None else None
    out: list[Where] = []
    if tb is not None:
        for fs in traceback.extract_tb(tb):
            if fs.filename == file:
                out.append(Where(fs.filename, fs.lineno, fs.name, fs.line or "",
                                 getattr(fs, "colno", None), getattr(fs, "end_colno", None)))
    elif filename is not None and lineno is not None:
        text = linecache.getline(filename, lineno)
        if text:
            name = code.co_name if code is not None and filename == file else "?"
            out.append(Where(filename, lineno, name, text.rstrip("\n")))
    return out[-1:]


def _run_method(method, fn, example, second, deterministic, e_second,
                runner_fn=None) -> MethodResult:
    row = REWRITTEN if runner_fn is not None else method
    res = MethodResult(row, "captured")
    fn = _own_copy(fn)
    target = runner_fn or fn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runner = _RUNNERS[method]
        except KeyError:
            raise ValueError(f"capture.report: unknown method {method!r}; "
                             f"choose from {METHODS}") from None
        try:
            captured, graphs = runner(target, example)
            res.graphs = graphs
            ref1, ref_buffers = _eager_step(fn, example)   # eager from the same state
            out1 = captured(*example)
            if ref_buffers:
                res.buffers_match = _same_buffers(_buffers(fn), ref_buffers)
            out2 = captured(*example)
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("graphgrad"):
                raise
            res.outcome, res.message = "n/a", f"not available in this build: {e}"
            return res
        except Exception as e:  # the outcome being recorded, not a failure of the report
            res.outcome, res.message = "error", _message(e)
            res.where = _user_lines(fn, e.__traceback__)
            if method == "static" and runner_fn is None:
                res.notes.append("the static API needs the function rewritten with "
                                 "static.cond / static.shape")
            return res
        if deterministic:
            res.example_matches = _same(out1, ref1)
        else:
            res.fresh_each_call = not _same(out1, out2)
        if second is not None:
            try:
                expected = _eager_step(fn, second)[0] if _module_of(fn) else e_second
                out_second = captured(*second)
                if deterministic:
                    res.second_matches = _same(out_second, expected)
            except Exception as e:  # honest, not silent: the capture refuses this input
                res.second_matches = False
                shapes = ", ".join(str(tuple(x.shape)) for x in second if isinstance(x, Tensor))
                res.outcome = "error"
                res.message = f"on the 2nd input {shapes}: {_message(e)}"
                res.where = _user_lines(fn, e.__traceback__)
                return res
    seen = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    if seen:
        res.outcome = "warned"
        res.message = f"{seen[0].category.__name__}: {seen[0].message}"
        res.where = _user_lines(fn, filename=seen[0].filename, lineno=seen[0].lineno)
    elif res.wrong:
        res.outcome = "silently wrong"
    if res.fresh_each_call is False:
        res.notes.append("the random value is frozen into the graph")
    elif res.example_matches is False:
        res.notes.append("differs from eager on the example itself")
    elif res.second_matches is False:
        res.notes.append("differs from eager on the 2nd input")
    if method == "compile":  # the counters were zeroed when this method started
        breaks = importlib.import_module("graphgrad.dynamo").counters["graph_breaks"]
        if breaks or not res.graphs:
            res.notes.append(f"{breaks} graph break{'' if breaks == 1 else 's'}"
                             + ("; no graph: every op ran eagerly" if not res.graphs else ""))
    if res.buffers_match is False:
        res.notes.append("its buffer updates (e.g. running statistics) differ from one "
                         "eager call's")
    return res


def _same_buffers(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and np.allclose(a[k], b[k], rtol=1e-6, atol=1e-8)
        for k in a)


def report(fn: Callable, *example_inputs, second_inputs: Sequence | None = None,
           methods: Sequence[str] = METHODS,
           static_rewrite: Callable | None = None) -> CaptureReport:
    """Run ``fn`` eagerly and through each capture method; see the module docstring."""
    if not example_inputs:
        raise ValueError("capture.report: give at least one example input")
    example = tuple(example_inputs)
    e1, _ = _eager_step(fn, example)
    e2, _ = _eager_step(fn, example)
    deterministic = _same(e1, e2)
    second = tuple(second_inputs) if second_inputs is not None else None
    e_second = None
    if second is None:
        for grow in (True, False):
            candidate = other_inputs(example, grow=grow)
            try:
                e_second = _eager_step(fn, candidate)[0]
            except Exception:
                continue
            second = candidate
            break
    else:
        e_second = _eager_step(fn, second)[0]
    results = {}
    for method in methods:
        if method == "eager":
            results[method] = MethodResult("eager", "eager",
                                           notes=["runs Python as written (the reference)"])
            continue
        results[method] = _run_method(method, fn, example, second, deterministic, e_second)
        if method == "static" and static_rewrite is not None:
            r = _run_method("static", fn, example, second, deterministic, e_second,
                            runner_fn=static_rewrite)
            r.source = _source_of(static_rewrite)
            r.notes.append(f"{getattr(static_rewrite, '__name__', 'the rewrite')}: "
                           f"written for the static API")
            results[REWRITTEN] = r
    name = type(fn).__name__ if isinstance(fn, Module) else getattr(fn, "__qualname__",
                                                                     repr(fn))
    shapes = ", ".join(f"shape {tuple(x.shape)}" for x in second or () if isinstance(x, Tensor))
    return CaptureReport(name, results, deterministic, shapes)


def _source_of(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
