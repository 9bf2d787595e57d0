"""Layer ``backends``: the ``"default"`` backend, a Graph as one Python program.

``default(gm, example_inputs)``: the graph (``gm.graph`` of a GraphModule) optimized by
``graphgrad.passes``, then its printed Python program, exec'd once (no per-node
interpretation); where no gradient is needed, ``array_program`` makes a program on the
arrays themselves from the fused graph (``passes.fuse_elementwise``): each op's
``forward`` called directly, each fused group one kernel (fused.py), each value freed
after its last use, and large groups writing into a buffer the program holds (in place
or a dead value's; memory_plan.py, ``fused.config.memory_plan``). Where a gradient is
needed, the compiled forward+backward (aot.py).
With ``fused.config.debug_dir`` set, the graph before and after each step is written
there as Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphgrad.backend import xp
from graphgrad.graph import (Graph, Interpreter, Node, dynamic_tuple_text, is_dynamic,
                             literal_text, python_code)
from graphgrad.graph.random_node import draw
from graphgrad.passes import Fused, fuse_elementwise, optimize
from graphgrad.tensor import Value, dispatch, is_grad_enabled
from graphgrad.tensor.modes import current_mode
from graphgrad.tensor import Tensor

from .eager import graph_of
from .fused import config, dump_graphs, lower
from .memory_plan import MemoryPlan, plan_memory

__all__ = ["default", "array_program"]


def default(gm: Any, example_inputs: list) -> Callable:
    """The graph after ``graphgrad.passes.optimize`` (exact simplifications, constant
    folding, CSE, dead code) as its printed program; when no gradient is needed, a program
    on NumPy arrays that calls each op's ``forward`` directly (no dispatch, no Tensor per
    intermediate). The callable's ``graph`` attribute is the optimized graph it runs."""
    captured = graph_of(gm)
    graph, _ = optimize(captured)
    slow = python_code(graph, name="forward").fn
    fused = fuse_elementwise(graph)
    dump_graphs(("captured", captured), ("optimized", graph), ("fused", fused))
    from .aot import AotProgram   # (aot.py builds on this module's array_function)
    fast = array_program(fused, example_inputs, slow, AotProgram(graph, slow))
    run = slow if fast is None else fast
    run.graph = graph
    run.fused_graph = fused
    return run


def array_program(graph: Graph, example_inputs: list, slow: Callable,
                  train: Callable | None = None) -> Callable | None:
    """``graph`` as Python over arrays, or None where a node needs more than that. Falls
    back to ``slow`` (the op-by-op program) when a gradient is needed, when something is
    on the dispatch stack (a transform), and for ops whose inputs differ in dtype (there
    dispatch's promotion rule decides); on an error ``slow`` runs again for its message.
    ``train``: what runs instead of ``slow`` when a gradient is needed (the compiled
    forward+backward, aot.py)."""
    ns: dict = {"_slow": slow, "_train": train or slow, "_T": Tensor._make,
                "_grad": is_grad_enabled, "_top": current_mode}
    emitted = _emit(graph, [isinstance(ex, Value) for ex in example_inputs], ns)
    if emitted is None:
        return None
    params, body, outs, rg = emitted
    sig = ", ".join(params)
    check = (f"if _top() is not None:\n        return _slow({sig})\n"
             f"    if _grad() and ({' or '.join(rg) or 'False'}):\n        return _train({sig})")
    src = (f"def forward({sig}):\n    {check}\n    try:\n"
           + "".join(f"        {line}\n" for line in body)
           + "    except Exception:\n"
           + f"        return _slow({sig})\n"
           + f"    return ({', '.join(map(_as_tensor, outs))}{',' if len(outs) == 1 else ''})\n")
    exec(compile(src, f"<graph {graph.name} arrays>", "exec"), ns)  # noqa: S102
    fn = ns["forward"]
    fn.source = src
    return fn


def _as_tensor(out: str) -> str:
    """An output's text as a Tensor: a computed array is wrapped; an input (the very
    object) or a literal passes as it is."""
    return f"_T({out})" if out.startswith("t") else out


def array_function(graph: Graph, boxed: bool = False) -> Callable | None:
    """``graph`` as a function from arrays to the tuple of its output arrays (every input
    an array; no fallback, no tensors), or None where a node needs more than arrays.
    ``boxed``: it takes one list of the input arrays, which it empties, and drops each
    input after its last use (PyTorch's boxed calling convention for compiled
    backwards): a caller that holds no other reference, as the compiled backward does
    for its saved activations, has each freed as soon as it is read for the last time,
    as eager backward frees what each node saved."""
    ns: dict = {}
    emitted = _emit(graph, [False] * len(graph.inputs), ns, free_inputs=boxed)
    if emitted is None:
        return None
    params, body, outs, _ = emitted
    if boxed:
        head = (f"def arrays(args):\n    {''.join(p + ', ' for p in params)}= args\n"
                "    args.clear()\n")
    else:
        head = f"def arrays({', '.join(params)}):\n"
    src = (head + "".join(f"    {line}\n" for line in body)
           + f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})\n")
    exec(compile(src, f"<graph {graph.name} arrays only>", "exec"), ns)  # noqa: S102
    fn = ns["arrays"]
    fn.source = src
    return fn


def _emit(graph: Graph, tensors: list[bool], ns: dict,
          free_inputs: bool = False) -> tuple | None:
    """The body of an array program: ``(params, lines, output texts, requires-grad
    tests)``; ``tensors[i]``: input i is a tensor (its array is read first). Fills ``ns``
    with what the lines call; None where a node needs more than arrays. ``free_inputs``:
    inputs are deleted after their last use too."""
    ns.update({"_nd": xp.ndarray, "_asarray": xp.asarray, "_i64": xp.int64})
    names: dict[Node, str] = {}
    params, head, body, rg = [], [], [], []
    lines_of: dict[Node, int] = {}   # node -> index in body just past its statement
    order = [n for n in graph.nodes if n.kind not in ("placeholder", "output")]
    plan = plan_memory(graph, order, lower) if config.memory_plan else MemoryPlan()
    for i, (p, is_tensor) in enumerate(zip(graph.inputs, tensors, strict=True)):
        arg = f"x{i}"
        params.append(arg)
        if is_tensor:
            names[p] = f"a{i}"
            head.append(f"a{i} = {arg}._array")
            rg.append(f"{arg}._requires_grad")
        else:
            names[p] = arg
    for k, n in enumerate(graph.nodes):
        if n.kind in ("placeholder", "output"):
            continue
        out = f"t{k}"
        ins = [names[a] if isinstance(a, Node) else literal_text(a) for a in n.inputs]
        if n.kind == "shape":
            body.append(f"{out} = _asarray({ins[0]}.shape, dtype=_i64)")
        elif n.kind == "constant":
            ns[f"_c{k}"] = n.value
            body.append(f"{out} = _c{k}")
        elif n.kind == "call":
            into = plan.into.get(n)
            if into is not None:   # a buffer the program holds (memory_plan.py)
                v, in_place = into
                ns[f"_s{k}"], ns[f"_d{k}"] = tuple(n.spec.shape), xp.dtype(n.spec.dtype)
                body.append(plan.check(names[v], k, ns))
                if not in_place:
                    body.append(f"del {names[v]}")
                # (a kernel takes its array inputs, a lone op's literals are its step's;
                # a library call's forward takes ``out`` after its own arguments)
                if n in plan.kernel:
                    ins = [*(names[a] for a in n.inputs if isinstance(a, Node)), "out=_o"]
            kernel = plan.kernel.get(n)
            if not _call(n, k, out, ins, ns, body, kernel, into is not None and kernel is None):
                return None
            if into is not None:
                body.insert(len(body) - 1, "del _o")
        elif n.kind == "item":
            body.append(f"{out} = {ins[0]}[{n.params['index']}]")
        elif n.kind == "random":   # fresh samples each run (default or the node's generator)
            ns[f"_n{k}"] = n
            ns.setdefault("_draw", draw)
            ns.setdefault("_rs", {})
            body.append(f"{out} = _draw(_n{k}, _rs, [{', '.join(ins)}])._array")
        elif n.kind in INTERPRETED:
            ns[f"_n{k}"] = n
            ns.setdefault("_by_interp", _interpreted)
            ns.setdefault("_interp", Interpreter(graph))
            body.append(f"{out} = _by_interp(_interp, _n{k}, ({''.join(a + ', ' for a in ins)}))")
        else:
            return None
        names[n] = out
        lines_of[n] = len(body)
    if free_inputs:   # (an input is read from the first line on: its "statement" is line 0)
        lines_of.update((p, 0) for p in graph.inputs)
    body = head + (_free_at_last_use(graph, names, body, lines_of, plan.kept) or ["pass"])
    by_input = dict(zip(graph.inputs, params, strict=True))
    outs = [by_input[o] if o in by_input   # a passthrough input: the very object
            else names[o] if isinstance(o, Node) else literal_text(o) for o in graph.outputs]
    return params, body, outs, rg


def _call(n: Node, k: int, out: str, ins: list[str], ns: dict, body: list[str],
          kernel=None, into: bool = False) -> bool:
    """The lines of an op node: its fused kernel, its ``forward``, or (inputs of mixed
    dtypes) dispatch. False where it cannot be an array statement. ``kernel``: the
    kernel the memory plan runs a lone elementwise op by (it writes into a buffer);
    ``into``: ``forward`` is given the plan's buffer ``_o`` as ``out`` (a library call,
    memory_plan.py's ``writes_out``)."""
    specs = [a.spec for a in n.inputs if isinstance(a, Node)]
    if n.op is Fused or kernel is not None:   # one kernel for the group
        ns[f"_f{k}"] = kernel or lower(n.params["kernel"])
        body.append(f"{out} = _f{k}({', '.join(ins)})")
    elif any(getattr(sp, "dtype", None) != n.spec.dtype for sp in specs):
        return _mixed(ns, body, out, n, ins, k)
    else:
        ns[f"_f{k}"] = n.op.forward
        args = ins[:n.nargs]
        for key, v in n.params.items():
            if is_dynamic(v):
                args.append(f"{key}={dynamic_tuple_text(v, ins)}")
            else:
                ns[f"_p{k}_{key}"] = v
                args.append(f"{key}=_p{k}_{key}")
        if into:
            args.append("out=_o")
        body.append(f"{out} = _f{k}({', '.join(args)})")
    body.append(f"if type({out}) is not _nd: {out} = _asarray({out})")
    return True


# node kinds the IR's interpreter runs inside an array program: control flow (its
# branches and bodies are graphs of their own) and the run-time vjp nodes of passes.grad
INTERPRETED = frozenset({"cond", "while_loop", "while_grad", "vjp"})


def _interpreted(interp: Interpreter, node: Node, args: tuple):
    """``node`` run by the IR's interpreter on tensors of ``args``: its results as arrays
    (a tuple for a node of several results, which ``item`` nodes then pick)."""
    out = getattr(interp, "run_" + node.kind)(node, [_tensor_of(a) for a in args])
    if isinstance(out, tuple):
        return tuple(o._array if isinstance(o, Value) else o for o in out)
    return out._array if isinstance(out, Value) else out


def _tensor_of(a):
    """An array as a Tensor for dispatch; a Python scalar input stays itself."""
    return Tensor._make(a) if type(a) is xp.ndarray else a


def _free_at_last_use(graph: Graph, names: dict, body: list[str],
                      lines_of: dict, kept: set = frozenset()) -> list[str]:
    """``body`` with ``del`` statements after the last use of each intermediate (as
    torch.fx's generated code does): NumPy frees an array when its last reference goes,
    so the program's peak memory is eager's, not the sum of every intermediate.
    ``kept``: values the memory plan deletes itself, where it reuses their buffer."""
    keep = {o for o in graph.outputs if isinstance(o, Node)} | set(kept)
    last: dict[Node, Node] = {}
    for n in graph.nodes:
        if n in lines_of:
            for i in (*n.input_nodes(), *n.deps):
                last[i] = n
    dels: dict[int, list[str]] = {}
    for value, user in last.items():
        if value in lines_of and value not in keep:
            dels.setdefault(lines_of[user], []).append(names[value])
    for n in lines_of:   # computed but never read (a side effect's result)
        if n not in last and n not in keep:
            dels.setdefault(lines_of[n], []).append(names[n])
    out = [f"del {', '.join(sorted(dels[0]))}"] if 0 in dels else []   # unread inputs
    for i, line in enumerate(body, 1):
        out.append(line)
        if i in dels:
            out.append(f"del {', '.join(sorted(dels[i]))}")
    return out


def _mixed(ns, body, out, n, ins, k):
    """An op on inputs of different dtypes: through ``dispatch`` (its promotion rule)."""
    ns[f"_op{k}"] = n.op
    ns.setdefault("_dispatch", dispatch)
    ns.setdefault("_TT", _tensor_of)
    if any(is_dynamic(v) for v in n.params.values()):
        return None
    ns[f"_pp{k}"] = n.params
    args = ", ".join(f"_TT({a})" if a.startswith(("a", "t", "x")) else a
                     for a in ins[:n.nargs])
    body.append(f"{out} = _dispatch(_op{k}, ({args},), _pp{k})._array")
    return True
