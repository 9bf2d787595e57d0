"""Layer ``jit``: ``Tracer``, the mode on the dispatch stack that runs each op of a
JIT trace eagerly *and* appends its node to the Graph, and ``record``, which runs a
function under it and returns the Graph.

Every op call comes through ``process`` (the one dispatch point). A call that touches
the trace (a traced tensor or size, or a tensor the graph must read live: a parameter, a
buffer of the traced module, anything that requires grad) runs on the level below and
becomes a ``call`` node; a call on constants only just runs, and its result is a
constant if the graph ever needs it (constant folding for free).

A random draw of graphgrad's (``rand``, ``randn_like``, a dropout mask) runs eagerly and
becomes a ``random`` node sized by the traced sizes (``batched_random``), so the traced
function draws afresh on each call; ``detach()`` becomes a ``Detach`` node.

Tensors the function did not compute become graph values when first used: a module's
parameters and buffers and tensors that require grad become extra placeholders bound to
the live tensor at every call (so training updates reach the traced function and
gradients flow back to them); any other tensor is a constant holding its value now.

In-place ops need no special path. An in-place op runs the out-of-place op (recorded)
and writes the result into the tensor, bumping its version; when the tensor is next
used, the recorder sees the version changed and takes the node of the last recorded op
that produced exactly the tensor's new value from it. A change no op explains (through a
view, or by NumPy) keeps the value as a constant, with a TracerWarning.

A write into a buffer or parameter of the traced module (BatchNorm's running statistics
and ``num_batches_tracked`` in train mode) is state the graph must carry out of the
call: ``record`` adds each written tensor's new value as an extra output, and the
traced function copies it back into the live tensor after every call, as eager does.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from graphgrad.backend import xp
from graphgrad.func.pytree import TreeSpec, tree_flatten
from graphgrad.graph import Dyn, Graph, GraphBuilder, Node, Spec, needed_nodes
from graphgrad.graph.random_calls import describe_draw, draw_frame
from graphgrad.graph.random_node import add_random
from graphgrad.ops import REGISTRY
from graphgrad.tensor import creation
from graphgrad.tensor import (Mode, Tensor, Value, dispatch, pop_mode,
                              push_mode, set_grad_mode)

from .trace_external import ExternalCallError, ExternalWatch, expression, user_frame, where
from .trace_values import TracedInt, TracedNumber, TracedTensor, plain, warn_at

__all__ = ["Tracer", "record", "Capture", "ExternalCallError"]

_I64 = xp.dtype(xp.int64)
_RNG = creation.rng_of.__code__    # every random draw of graphgrad goes through it
_LIKE = creation._like.__code__  # zeros_like & co.: the shape of the array, as ints
_RANDOM_LIKE = frozenset(f.__code__ for f in (creation.rand_like, creation.randn_like,
                                               creation.randint_like))
_LIST_OUTPUT = ("Encountering a {} at the output of the tracer might cause the trace to be "
                "incorrect, this is only valid if the container structure does not change "
                "based on the module's inputs. Consider using a constant container instead "
                "(e.g. for `list`, use a `tuple` instead. for `dict`, use a `NamedTuple` "
                "instead). If you absolutely need this and know the side effects, pass "
                "strict=False to trace() to allow this behavior.")


class Capture:
    """A placeholder bound at call time to a live tensor: ``path`` names a parameter or
    buffer of the traced module (looked up again at each call, so a replaced parameter
    is seen), else ``tensor`` is the object itself."""

    __slots__ = ("node", "tensor", "path")

    def __init__(self, node: Node, tensor: Value, path: str | None):
        self.node, self.tensor, self.path = node, tensor, path

    def value(self, module) -> Value:
        if self.path is None or module is None:
            return self.tensor
        obj = module
        for part in self.path.split("."):
            obj = getattr(obj, part)
        return obj


class Tracer(Mode):
    """Runs ops eagerly and records them into ``graph`` (see the module docstring)."""

    def __init__(self, graph: Graph, *, strict: bool, state_names: dict[int, str]):
        self.graph = graph
        self.strict = strict
        self.state_names = state_names          # id(parameter or buffer) -> dotted name
        self.captures: list[Capture] = []
        self.input_ids: set[int] = set()        # ids of the traced input tensors
        self._seen: dict[int, list] = {}        # id(tensor) -> [tensor, node, version]
        self._made: dict[int, tuple] = {}       # id(input) -> (input, last same-shape result)
        self._sizes: dict[tuple, TracedInt] = {}
        self._shapes: dict[Node, TracedTensor] = {}
        self._warned_inputs: set[int] = set()
        self.writes: dict[int, Value] = {}     # id -> module state written in place

    @contextlib.contextmanager
    def active(self) -> Iterator[Tracer]:
        push_mode(self)
        try:
            yield self
        finally:
            pop_mode(self)

    # ---- values in, values out ---------------------------------------------------------

    def input(self, node: Node, example: Value) -> TracedTensor:
        t = self.wrap(example, node)
        self.input_ids.add(id(t))
        return t

    def wrap(self, out: Value, node: Node) -> TracedTensor:
        t = TracedTensor._make(out._array, out.op, out.inputs, out.params, out._requires_grad,
                               out._saved_versions)
        t._version_counter, t._extras = out._version_counter, out._extras
        t._node, t._tracer = node, self
        t._nv = t._version
        return t

    def mine(self, v) -> bool:
        return isinstance(v, (TracedTensor, TracedNumber)) and v._tracer is self

    def node_of(self, v):
        """The node for an op argument: traced values' nodes, other tensors as captures or
        constants (see the module docstring), Python scalars as literals."""
        if isinstance(v, TracedTensor) and v._tracer is self:
            if v._nv != v._version:
                v._node = self._after_inplace(v, v._node)
                v._nv = v._version
            return v._node
        if isinstance(v, TracedNumber):
            return v.tensor()._node if v._tracer is self else v._v
        if isinstance(v, Value):
            seen = self._seen.get(id(v))
            if seen is None:
                seen = self._seen[id(v)] = [v, self._first_use(v), v._version]
            elif seen[2] != v._version:
                seen[1], seen[2] = self._after_inplace(v, seen[1]), v._version
            return seen[1]
        if isinstance(v, xp.ndarray):  # ``array + x`` passes the array itself
            return self.graph.constant(xp.array(v, copy=True))
        return v

    def _first_use(self, v: Value) -> Node:
        path = self.state_names.get(id(v))
        if path is not None or v._requires_grad:
            node = self.graph.placeholder(Spec(v._array.shape, v._array.dtype),
                                          path or "captured")
            if path is not None:   # the module's attribute: a get_attr of the GraphModule
                node.params = {"target": path}
            self.captures.append(Capture(node, v, path))
            return node
        return self.graph.constant(xp.array(v._array, copy=True))

    def _after_inplace(self, v: Value, old: Node) -> Node:
        made = self._made.get(id(v))
        if made is not None and made[0] is v:
            new = made[1]._array
            if new.shape == v._array.shape and new.dtype == v._array.dtype \
                    and xp.array_equal(new, v._array, equal_nan=new.dtype.kind in "fc"):
                if id(v) in self.input_ids and id(v) not in self._warned_inputs:
                    self._warned_inputs.add(id(v))
                    warn_at(user_frame(), f"an input of the traced function (placeholder "
                            f"{old.name!r}) is modified in place: the traced graph computes "
                            f"with the new value but does not write it back into the "
                            f"caller's tensor")
                return made[1]._node
        warn_at(user_frame(), f"a tensor the trace reads (node {old.name!r}, shape "
                f"{list(v._array.shape)}) was changed in place by code the trace did not "
                f"record (through a view, or outside graphgrad); its current value is used "
                f"as a constant, so the trace might not generalize to other inputs")
        return self.graph.constant(xp.array(v._array, copy=True))

    def process_inplace(self, t, fn: Callable, args: tuple, kw: dict, name: str,
                        below: Callable):
        """A write into the module's state (``running_mean.copy_(...)``,
        ``num_batches_tracked.add_(1)``): the new value is computed by recorded ops (a
        direct fill would bypass them), so ``node_of`` finds its node afterwards and
        ``record`` can make it an output the traced function writes back."""
        if self.mine(t) or not isinstance(t, Value) or id(t) not in self.state_names:
            return below(fn)
        new = []

        def recorded(old, *a, **k):
            new.append(fn(old, *a, **k))
            return new[-1]

        out = below(recorded)
        if new and self.mine(new[-1]):
            self._made[id(t)] = (t, new[-1])
        self.writes[id(t)] = t
        return out

    # ---- sizes ---------------------------------------------------------------------------

    def size(self, t: TracedTensor, dim: int) -> TracedInt:
        """``t.shape[dim]`` as a traced int: a ``shape`` node and a ``Getitem`` of it, made
        only if the graph ends up needing the number."""
        node = self.node_of(t)
        key = (node, dim)
        n = self._sizes.get(key)
        if n is None:
            def make(node=node, t=t, dim=dim):
                vec = self._shapes.get(node)
                if vec is None:  # one shape node per tensor, one Getitem per dim read
                    shape = self.graph.add("shape", "shape", inputs=(node,),
                                           spec=Spec((t._array.ndim,), _I64))
                    vec = self._shapes[node] = self.wrap(
                        Tensor(xp.asarray(t._array.shape, dtype=_I64)), shape)
                return self.apply(REGISTRY["Getitem"], (vec,), {"spec": (dim,)})
            n = self._sizes[key] = TracedInt(int(t._array.shape[dim]), self, make)
        return n

    # ---- ops -----------------------------------------------------------------------------

    def process(self, op, args: tuple, params: dict):
        if self._involved(args, params):
            return self.apply(op, args, params)
        with self.lowered():
            return dispatch(op, args, params)

    def _involved(self, args: tuple, params: dict) -> bool:
        for a in args:
            if isinstance(a, (TracedTensor, TracedNumber)):
                if a._tracer is self:
                    return True
            elif isinstance(a, Value) and (a._requires_grad or id(a) in self.state_names
                                           or id(a) in self._made):
                return True  # read live, or maybe written by a recorded op in place
        for v in params.values():
            if isinstance(v, TracedNumber) or (type(v) is tuple and any(
                    isinstance(e, TracedNumber) for e in v)):
                return True
        return False

    def apply(self, op, args: tuple, params: dict) -> TracedTensor:
        """Run ``op`` eagerly on the values and append its node."""
        with self.lowered():
            out = dispatch(op, tuple(plain(a) for a in args), plain(params))
        if not isinstance(out, Value):
            raise NotImplementedError(f"jit.trace: op {op.__name__} returned "
                                      f"{type(out).__name__}, which a trace cannot record")
        node = self._call(op, args, params, out)
        t = self.wrap(out, node)
        for a in args:
            if isinstance(a, Value) and a._array.shape == out._array.shape:
                self._made[id(a)] = (a, t)   # what an in-place op on ``a`` would write
        return t

    def _call(self, op, args: tuple, params: dict, out: Value) -> Node:
        inputs = [self.node_of(a) for a in args]
        nargs = len(inputs)
        bound, dynamic = {}, False
        for k, v in params.items():
            if type(v) is tuple and any(self.mine(e) and isinstance(e, int) for e in v):
                dynamic = True  # sizes in a shape param: bound at run time (Dyn)
                vals = []
                for e in v:
                    if self.mine(e) and isinstance(e, int):
                        vals.append(Dyn(len(inputs)))
                        inputs.append(self.node_of(e))
                    else:
                        vals.append(self._frozen(e, op, k))
                bound[k] = tuple(vals)
            else:
                bound[k] = self._frozen(v, op, k)
        spec = Spec(out._array.shape, out._array.dtype)
        if dynamic or any(isinstance(i, Node) and i.spec.shape is not None
                          and None in i.spec.shape for i in inputs[:nargs]):
            try:  # the rule's answer keeps unknown dims unknown (graph.verify agrees)
                spec = GraphBuilder.infer(op, inputs[:nargs], bound, dynamic)
            except Exception:  # noqa: BLE001 - no rule for unknown dims: keep the example's
                pass
        return self.graph.call(op, inputs, bound, spec, nargs=nargs)

    def _frozen(self, v, op, key: str):
        """A param value with its traced numbers made plain, warning that they no longer
        follow the input (only a top-level tuple of sizes can stay dynamic)."""
        if _has_traced(v):
            warn_at(user_frame(), "Converting a tensor to a Python integer might cause the "
                    "trace to be incorrect. We can't record the data flow of Python values, "
                    "so this value will be treated as a constant in the future. This means "
                    f"that the trace might not generalize to other inputs! ({op.__name__}'s "
                    f"param {key}={plain(v)!r} is fixed: the graph binds sizes at run time "
                    f"only in a flat tuple param)")
        return plain(v)

    # ---- random draws: random nodes -------------------------------------------------------

    # random_tensor (graphgrad's one source of random tensors) hands each draw made while a
    # level with randomness="different" is on the dispatch stack to its batched_random
    randomness = "different"

    def batched_random(self, sample: Callable, shape: tuple):
        """A draw of ``rand``/``randn``/``randint``, their ``*_like`` forms or dropout: drawn
        now (the trace goes on with real values, using the generator as eager does) and
        recorded as a ``random`` node that draws afresh on every call, as PyTorch's trace
        records ``aten::rand``. Sizes follow the traced input (``randn_like(x)``) or the
        traced sizes given (``randn(x.shape[0], 3)``)."""
        out = sample(shape)
        draw = describe_draw(draw_frame(sys._getframe(1)))
        if draw is None:  # a user's Generator: frozen, with the warning given at rng_of
            return out
        if draw.like is not None and self.mine(draw.like):
            dims = [self.node_of(self.size(draw.like, k)) for k in range(len(draw.shape))]
        elif draw.sizes is not None:
            dims = [self.node_of(d) if self.mine(d) else int(d) for d in draw.sizes]
        else:
            dims = list(draw.shape)
        node = add_random(_NodeSink(self.graph), draw.dist, dims, draw.dtype, draw.params)
        return self.wrap(out, node)

    def random(self, callee) -> None:
        """graphgrad is about to draw random numbers: those ``batched_random`` records as a
        node need no word; others (a user's Generator, ``randperm``, an initializer) are
        frozen into the graph, with a warning."""
        if describe_draw(callee.f_back) is not None:
            return
        _warn_code(callee, "draws random numbers, which the trace freezes into the graph as "
                   "a constant: every call of the traced function reuses them (only "
                   "rand/randn/randint, their *_like forms and dropout on graphgrad's default "
                   "generator become random nodes)")

    def detach(self, t: TracedTensor) -> TracedTensor:
        """``t.detach()`` / ``t.data``: a ``Detach`` node (stop-gradient; same values)."""
        out = self.apply(REGISTRY["Detach"], (t,), {})
        made = self._made.get(id(t))
        if made is not None and made[1] is out:
            del self._made[id(t)]  # it shares t's memory: it explains no in-place change
        return out

    # ---- what a trace cannot keep ---------------------------------------------------------

    def like(self, callee) -> None:
        """``zeros_like(x)`` and its kin read the shape of the array, not traced sizes: the
        result is a constant of the example's shape."""
        t = callee.f_locals.get("t")
        if callee.f_back is not None and callee.f_back.f_code in _RANDOM_LIKE:
            return  # rand_like & co.: the random node follows the input's traced sizes
        if self.mine(t):
            _warn_code(callee, f"makes a constant of the example's shape "
                       f"{list(t._array.shape)}, so the trace might not generalize to inputs "
                       f"of other shapes (x.new_zeros(x.shape) and x.new_full(x.shape, v) "
                       f"follow the input's shape)")

    def external(self, name: str, frame, nonstrict: str | None = None) -> None:
        """A call from the user's ``frame`` into external code: an error when strict,
        else a warning (the value it returns is frozen into the graph)."""
        expr = expression(frame)
        what = f"`{expr}` calls {name}" if expr and name not in expr else f"`{expr or name}`"
        if self.strict:
            raise ExternalCallError(
                f"graphgrad.jit.trace: {what}, external code whose result the trace cannot "
                f"record:\n{where(frame)}\nIts result would be frozen into the graph as a "
                f"constant, the same on every call of the traced function. Compute it "
                f"outside the function and pass it in as an input, or pass strict=False to "
                f"trace() to freeze it with a warning.")
        warn_at(frame, nonstrict or (
            f"{what}, external code whose result the trace cannot record:\n{where(frame)}\n"
            f"Its value is frozen into the graph as a constant (strict=False): every call "
            f"of the traced function uses this same value."))


class _NodeSink:
    """What ``graph.random_node.add_random`` needs of a builder, for a graph this tracer
    appends to directly (run-time dims are passed as the nodes themselves)."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def node_of(self, v, *, literal_ok: bool = True):
        return v

    def deps(self) -> tuple:
        return ()


def _warn_code(callee, what: str) -> None:
    """A TracerWarning on the user's line that led to ``callee``: "`expr` <what>"."""
    frame = user_frame(callee)
    expr = expression(frame)
    warn_at(frame, f"{f'`{expr}`' if expr else 'this line'} {what}")


def _has_traced(v) -> bool:
    if isinstance(v, TracedNumber):
        return True
    if isinstance(v, (tuple, list)):
        return any(_has_traced(e) for e in v)
    if isinstance(v, dict):
        return any(_has_traced(e) for e in v.values())
    return False


def record(fn: Callable, examples: tuple, names: list[str], *, strict: bool,
           state_names: dict[int, str], name: str
           ) -> tuple[Graph, list[Capture], TreeSpec, list[Capture]]:
    """Run ``fn`` on ``examples`` under a Tracer; returns (graph, captures, output tree
    spec, state writes). The graph keeps only what the outputs and the random draws need
    (a dead ``x < 0`` whose Python bool decided a branch is dropped, as PyTorch's trace
    drops it). Each state write is a ``Capture`` whose node is an extra output, after the
    function's own: the new value of the buffer (or parameter) it names."""
    graph = Graph(name)
    tracer = Tracer(graph, strict=strict, state_names=state_names)
    args = [tracer.input(graph.placeholder(Spec(x._array.shape, x._array.dtype), n), x)
            for x, n in zip(examples, names, strict=True)]
    user_inputs = list(graph.inputs)
    prev = set_grad_mode(False)  # values only: the graph is differentiated when it runs
    try:
        with tracer.active():
            with ExternalWatch(tracer.external, {_RNG: tracer.random, _LIKE: tracer.like}):
                out = fn(*args)
            leaves, tree = tree_flatten(out)
            if strict and isinstance(out, (list, dict)):
                raise RuntimeError(_LIST_OUTPUT.format(type(out).__name__))
            outs = []
            for leaf in leaves:
                if not isinstance(leaf, (Value, TracedNumber)):
                    raise RuntimeError(
                        f"Only tensors, lists, tuples of tensors, or dictionary of tensors can "
                        f"be output from traced functions (got {type(leaf).__name__})")
                outs.append(tracer.node_of(leaf))
            writes = [Capture(tracer.node_of(t), t, state_names[k])
                      for k, t in tracer.writes.items()]
    finally:
        set_grad_mode(prev)
    graph.set_outputs(outs + [w.node for w in writes])
    if writes:
        graph.header.append(f"outputs {len(outs)}..: the new values of "
                            f"{', '.join(w.path for w in writes)} (written back after each "
                            f"call, as eager writes them in place)")
    # random nodes stay even when unused: each call then draws what the function draws,
    # so a seeded call of the trace reproduces the function's later draws too
    need = set(needed_nodes(graph, [graph.output_node,
                                    *(n for n in graph.nodes if n.kind == "random")]))
    graph.nodes[:] = [n for n in graph.nodes if n in need or n in user_inputs]
    graph.inputs[:] = [p for p in graph.inputs if p in user_inputs or p in need]
    captures = [c for c in tracer.captures if c.node in need]
    return graph, captures, tree, writes
