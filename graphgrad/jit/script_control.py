"""Layer ``jit``: control flow for ``graphgrad.jit.script``: ``if`` on a tensor as a
``cond`` node holding both branches, ``while`` on a tensor and ``for i in range(n)`` as
a ``while_loop`` node, built from the statements of the user's source.

Each branch, loop condition and loop body is compiled into its own sub-graph by a
``ScriptBuilder`` whose parent is the enclosing one, exactly as ``graphgrad.static``
builds TF1's ``cond``/``while_loop`` (its ``unify_branches`` gives every sub-graph of a node the
same captured inputs). What flows out of a branch are the variables it assigns (and,
for an ``if`` containing a ``return``, the function's result: the statements after the
``if`` are compiled into both branches, the single-exit form); what a loop carries are
the variables its body assigns that exist before it.

``break`` and ``continue`` go through TorchScript's *exit transform* (``exit_transform``)
before a loop body is compiled: each becomes an assignment of a flag (``$did_break``,
``$did_continue``), the statements after a statement that may exit run under
``if not flag``, and the loop's condition is and-ed with ``not $did_break`` (a loop-
carried variable). On a Python condition the flag is a Python bool and the guards pick
their branch at compile time; on a tensor condition the flag is a bool tensor (the
condition itself) and the guards are ``cond`` nodes. A ``return`` in a loop on a tensor
sets ``$did_return`` and ``$return_value`` (carried by every loop around it) and leaves
the loop by its break flag; the compiler returns after the outermost loop.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from graphgrad.backend import xp
from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import Graph, Spec, Symbol, is_impure, symbol
from graphgrad.graph.interpreter import as_tensor
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value
from graphgrad.static.control_flow import unify_branches

from .script_values import ScriptBuilder, ShapeValue

__all__ = ["assigned_names", "has_return", "Undefined", "SubGraph", "merge_spec",
           "build_cond", "build_while", "to_node_value", "Exits", "loop_exits",
           "exit_transform", "unless", "Guard", "ReturnValue", "DID_RETURN",
           "RETURN_VALUE", "Iteration"]


class Undefined:
    """A variable that exists on some paths only (one branch, a loop body)."""

    def __init__(self, why: str):
        self.why = why


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names bound by assignments (and for-targets, and ``x`` of ``x[i] = v``) anywhere in
    ``stmts``, in order."""
    out: dict[str, None] = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out[n.id] = None
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and \
                    isinstance(n.value, ast.Name):  # x[i] = v gives x a new value
                out[n.value.id] = None
    return list(out)


def has_return(stmts: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


@dataclass(frozen=True)
class Exits:
    """The flags of one loop's exit transform: variable names (``$`` keeps them apart from
    the user's, and the printer shows ``_did_break``), None where the body has no such
    exit. Nested loops number theirs by depth, so that an inner ``break`` leaves the
    outer loop's flag alone."""

    brk: str | None
    cont: str | None
    ret: bool = False  # the body returns from the function (a loop on a tensor only)

    def any(self) -> bool:
        return self.brk is not None or self.cont is not None


def is_flag(name: str) -> bool:
    """A flag of the exit transform (a bool that only guards statements and loops)."""
    return name.startswith("$did_")


@dataclass(frozen=True)
class _Folded:
    """A flag set on one side of a cond only: its merged value is the condition itself
    (``then``: True where the condition holds), not an output of the cond node."""

    then: bool


def _own_exits(stmts: list[ast.stmt]) -> tuple[bool, bool]:
    """Whether ``stmts`` hold a ``break`` / a ``continue`` of the loop around them: in
    them or in their ``if`` blocks (one in a nested loop exits that loop; other blocks,
    ``with``, ``try``, ``match``, are refused when compiled)."""
    brk = cont = False
    todo = list(stmts)
    while todo:
        s = todo.pop()
        brk = brk or isinstance(s, ast.Break)
        cont = cont or isinstance(s, ast.Continue)
        if isinstance(s, ast.If):
            todo += s.body + s.orelse
    return brk, cont


# a return inside a loop on a tensor: it sets both (carried by every loop around it) and
# leaves each loop by its break flag; after the outermost one the function returns
DID_RETURN, RETURN_VALUE = "$did_return", "$return_value"


class ReturnValue(ast.Assign):
    """``$return_value = value``, what ``return value`` in a loop body becomes."""


def loop_exits(body: list[ast.stmt], depth: int, graph: bool) -> Exits:
    """The flags a loop body at nesting ``depth`` (1: outermost) needs; ``graph``: the
    loop is a ``while_loop`` node (a ``return`` in an unrolled loop stays one)."""
    brk, cont = _own_exits(body)
    ret = graph and has_return(body)
    suffix = "" if depth == 1 else str(depth)
    return Exits(f"$did_break{suffix}" if brk or ret else None,
                 f"$did_continue{suffix}" if cont else None, ret)


def _located(node: ast.AST, where: ast.AST) -> ast.AST:
    """A synthesized node placed at ``where`` (errors point at the user's source)."""
    return ast.fix_missing_locations(ast.copy_location(node, where))


def _set(name: str, value: bool, where: ast.stmt) -> ast.stmt:
    return _located(ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value)), where)


class Guard(ast.If):
    """``if not flag: body``, made by the exit transform: ``flags`` are the flags it tests.
    Its body runs only while they are all False, so the compiler clears them there (a
    nested exit then sets a flag to its own condition) and a flag the body leaves clear
    keeps the value it had before (not a cond output)."""

    flags: tuple = ()
    dead: tuple = ()  # flags nothing reads after it (``continue`` at the end of the body)


class Iteration(ast.stmt):
    """One iteration of a loop over a Python sequence: ``target = item``, then ``body``
    (``brk``: the loop's break flag). The loop compiles as the list of its iterations, so
    that the statements after one are the iterations left and the statements after the
    loop: an ``if`` on a tensor with a ``return`` compiles them into both branches."""

    _fields = ("target", "body")

    def __init__(self, target: ast.expr, item, body: list[ast.stmt], brk: str | None):
        super().__init__(target=target, body=body)
        self.item, self.brk = item, brk


def unless(flags: list[str], body: list[ast.stmt], where: ast.stmt,
           dead: tuple = ()) -> Guard:
    """``if not flag: body`` (``if not (a or b)`` for two flags)."""
    names = [ast.Name(f, ast.Load()) for f in flags]
    test = names[0] if len(names) == 1 else ast.BoolOp(ast.Or(), names)
    guard = Guard(ast.UnaryOp(ast.Not(), test), body, [])
    guard.flags, guard.dead = tuple(flags), dead
    return _located(guard, where)


def exit_transform(body: list[ast.stmt], exits: Exits) -> list[ast.stmt]:
    """A loop body with its ``break``/``continue`` replaced by flag assignments: the
    flags start False, and what follows a statement that may exit runs under ``if not
    flag`` (TorchScript's exit transform). ``body`` is left unchanged."""
    start = [_set(f, False, body[0]) for f in (exits.brk, exits.cont) if f is not None]
    return start + _guarded(body, exits, True)


def _guarded(stmts: list[ast.stmt], exits: Exits, tail: bool) -> list[ast.stmt]:
    """``stmts`` transformed; ``tail``: nothing follows them in the loop body (the
    ``continue`` flag is dead after them)."""
    out: list[ast.stmt] = []
    for k, s in enumerate(stmts):
        if isinstance(s, (ast.Break, ast.Continue)):
            out.append(_set(exits.brk if isinstance(s, ast.Break) else exits.cont, True, s))
            return out  # what follows in this block is unreachable
        if isinstance(s, ast.Return) and exits.ret:
            value = s.value if s.value is not None else ast.Constant(None)
            out += [_located(ReturnValue([ast.Name(RETURN_VALUE, ast.Store())], value), s),
                    _set(DID_RETURN, True, s), _set(exits.brk, True, s)]
            return out
        returns = exits.ret and has_return([s])
        if isinstance(s, (ast.For, ast.While)) and returns:
            # a nested loop that returned has left itself: this loop leaves too
            out += [s, _located(ast.Assign([ast.Name(exits.brk, ast.Store())],
                                           ast.Name(DID_RETURN, ast.Load())), s)]
            brk, cont = True, False
        else:
            brk, cont = _own_exits([s]) if isinstance(s, ast.If) else (False, False)
            brk = brk or (returns and isinstance(s, ast.If))
            if not (brk or cont):
                out.append(s)
                continue
            last = k == len(stmts) - 1
            out.append(ast.copy_location(ast.If(
                s.test, _guarded(s.body, exits, tail and last),
                _guarded(s.orelse, exits, tail and last)), s))
        rest = _guarded(stmts[k + 1:], exits, tail)
        if rest:
            flags = [f for f, used in ((exits.brk, brk), (exits.cont, cont)) if used]
            dead = (exits.cont,) if tail and exits.cont is not None else ()
            out.append(unless(flags, rest, s, dead))
        return out
    return out


def merge_spec(a: Spec, b: Spec) -> Spec:
    """The Spec both values fit (unknown where they differ; dtypes promoted)."""
    dtype = xp.result_type(a.dtype, b.dtype)
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return Spec(None, dtype)
    return Spec(tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)),
                dtype)


def _is_number(v) -> bool:
    return isinstance(v, (bool, int, float)) and not isinstance(v, Symbol)


def _spec_of(v) -> Spec:
    """The Spec of a loop variable's initial value (a Symbol, a tensor or a number)."""
    if isinstance(v, Symbol):
        return v._node.spec
    arr = v._array if isinstance(v, Value) else xp.asarray(v)
    return Spec(arr.shape, arr.dtype)


def to_node_value(sb: ScriptBuilder, v, like: Spec | None = None):
    """A graph node of ``sb`` for a branch/loop result; Python numbers become constants
    (of ``like``'s dtype when the other side is a tensor)."""
    if _is_number(v):
        arr = xp.asarray(v, like.dtype) if like is not None else xp.asarray(v)
        return sb.node_of(as_tensor(arr), literal_ok=False)
    return sb.node_of(v, literal_ok=False)


class SubGraph:
    """One sub-graph under construction (a branch, a loop condition or body)."""

    def __init__(self, comp, name: str, inputs: list[tuple[str, Spec]] = ()):
        self.comp = comp
        self.graph = Graph(name)
        self.builder = ScriptBuilder(self.graph, parent=comp.b)
        self.phs = [self.graph.placeholder(s, n) for n, s in inputs]
        self.nodes: list = []

    @contextlib.contextmanager
    def active(self) -> Iterator[SubGraph]:
        saved, self.comp.b = self.comp.b, self.builder
        try:
            with self.builder.active():
                yield self
        finally:
            self.comp.b = saved

    def finish(self, values: list, likes: list) -> None:
        self.nodes = [to_node_value(self.builder, v, s) for v, s in zip(values, likes,
                                                                         strict=True)]
        self.graph.set_outputs(self.nodes)

    def part(self) -> tuple:
        """The shape ``static.control_flow._unify`` takes."""
        return self.graph, self.builder, None, self.nodes, self.phs


def _same_constant(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, (Value, ShapeValue)) or isinstance(b, (Value, ShapeValue)):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a plain equality are not equal
        return False


def _scalar(comp, v) -> bool:
    """A Python number, or a Symbol holding one (see ``Calls.is_scalar``)."""
    return _is_number(v) or comp.is_scalar(v)


def _type_name(v) -> str:
    return "Tensor" if isinstance(v, Value) else type(v).__name__


def pair_leaves(name: str, a, b, fail: Callable[[str], Exception]):
    """Flatten two values a variable has on two paths: (structure, leaves, indices of
    the leaves that differ). Python constants equal on both paths stay constants."""
    la, sa = tree_flatten(a, none_is_leaf=True)
    lb, sb = tree_flatten(b, none_is_leaf=True)
    if sa != sb:
        raise fail(f"Type mismatch: {name} is set to type {_type_name(a)} in the true branch "
                   f"and type {_type_name(b)} in the false branch")
    differ = []
    for k, (x, y) in enumerate(zip(la, lb, strict=True)):
        if _same_constant(x, y):
            continue
        ok = all(isinstance(v, Value) or _is_number(v) for v in (x, y))
        if not ok:
            raise fail(f"Type mismatch: {name} is set to type {_type_name(x)} in the true "
                       f"branch and type {_type_name(y)} in the false branch")
        differ.append(k)
    return sa, la, lb, differ


def _like(x, y) -> Spec | None:
    """The Spec a number on one side takes from a tensor on the other."""
    for v in (x, y):
        if isinstance(v, Symbol):
            return v._node.spec
        if isinstance(v, Value):
            return Spec(v._array.shape, v._array.dtype)
    return None


def build_cond(comp, pred: Symbol, run_branch: Callable[[bool], list],
               names: list[str], fail: Callable[[str], Exception]) -> list:
    """A ``cond`` node: ``run_branch(True/False)`` compiles one branch (inside its
    sub-graph) and returns one value per entry of ``names``; the result is the merged
    value of each (Symbols from the node where the branches differ)."""
    subs, values = [], []
    for which in (True, False):
        sub = SubGraph(comp, f"cond_{'then' if which else 'else'}")
        with sub.active():
            values.append(run_branch(which))
        subs.append(sub)
    plans, leaves_t, leaves_f = [], [], []
    for name, a, b in zip(names, values[0], values[1], strict=True):
        if is_flag(name) and type(a) is bool and type(b) is bool and a != b:
            plans.append((_Folded(a), None, None, None))  # the flag is the condition
            continue
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            plans.append((a if isinstance(a, Undefined) else b, None, None, None))
            continue
        struct, la, lb, differ = pair_leaves(name, a, b, fail)
        plans.append((struct, la, differ, len(leaves_t)))
        leaves_t += [la[k] for k in differ]
        leaves_f += [lb[k] for k in differ]
    likes = [_like(x, y) for x, y in zip(leaves_t, leaves_f, strict=True)]
    subs[0].finish(leaves_t, likes)
    subs[1].finish(leaves_f, likes)
    specs = tuple(merge_spec(x.spec, y.spec) for x, y in zip(subs[0].nodes, subs[1].nodes,
                                                             strict=True))
    outer = unify_branches([subs[0].part(), subs[1].part()], 0)
    outs: tuple = ()
    if specs or any(is_impure(n) for sub in subs for n in sub.graph.nodes):
        outs = comp.b.multi("cond", [pred, *[symbol(o) for o in outer]],
                            {"then": subs[0].graph, "else": subs[1].graph}, specs)
    for k, (x, y) in enumerate(zip(leaves_t, leaves_f, strict=True)):
        if _scalar(comp, x) and _scalar(comp, y):
            comp.mark_scalar(outs[k])
    result = []
    for struct, la, differ, start in plans:
        if isinstance(struct, _Folded):
            result.append(pred if struct.then else REGISTRY["LogicalNot"].apply(pred))
            continue
        if isinstance(struct, Undefined):
            result.append(struct)
            continue
        leaves = list(la)
        for j, k in enumerate(differ):
            leaves[k] = outs[start + j]
        result.append(tree_unflatten(leaves, struct))
    return result


def build_while(comp, names: list[str], init: list, run_cond: Callable[[list], Symbol],
                run_body: Callable[[list], list], fail: Callable[[str], Exception]) -> list:
    """A ``while_loop`` node carrying ``names`` (initial values ``init``);
    ``run_cond(values)`` / ``run_body(values)`` compile the condition and the body on
    the loop variables. Returns the variables' values after the loop."""
    flat, structs = [], []
    for name, v in zip(names, init, strict=True):
        leaves, struct = tree_flatten(v, none_is_leaf=True)
        for x in leaves:
            if not (isinstance(x, Value) or _is_number(x)):
                raise fail(f"the loop changes {name!r}, which holds a value of type "
                           f"{_type_name(x)}: only tensors and numbers can be loop-carried")
        structs.append((struct, len(flat), len(leaves)))
        flat += leaves
    scalar = [_scalar(comp, x) for x in flat]
    labels = [n for n, (_, _, k) in zip(names, structs, strict=True) for _ in range(k)]
    specs = [_spec_of(x) for x in flat]  # the nodes come last: a compile may be abandoned

    def regroup(vals: list) -> list:
        return [tree_unflatten(vals[s:s + k], st) for st, s, k in structs]

    for _ in range(4):  # grow the specs until the body keeps them (a fixed point)
        inputs = list(zip(labels, specs, strict=True))
        cs = SubGraph(comp, "while_cond", inputs)
        bs = SubGraph(comp, "while_body", inputs)
        for k in range(len(flat)):
            if scalar[k]:  # the loop variable holds a Python number (a counter)
                comp.scalars.update((cs.phs[k], bs.phs[k]))
        with cs.active():
            pred = run_cond(regroup([symbol(p) for p in cs.phs]))
        cs.finish([pred], [None])
        with bs.active():
            after = run_body(regroup([symbol(p) for p in bs.phs]))
            out = []
            for name, v, (struct, _, _) in zip(names, after, structs, strict=True):
                leaves, st = tree_flatten(v, none_is_leaf=True)
                if st != struct:
                    raise fail(f"the loop changes the structure of {name!r} "
                               f"({_type_name(v)})")
                out += leaves
        bs.finish(out, specs)
        new = [merge_spec(s, n.spec) for s, n in zip(specs, bs.nodes, strict=True)]
        if new == specs:
            break
        specs = new
    outer = unify_branches([cs.part(), bs.part()], len(flat))
    init_nodes = [to_node_value(comp.b, x) for x in flat]
    outs = comp.b.multi("while_loop", [*[symbol(n) for n in init_nodes],
                                       *[symbol(o) for o in outer]],
                        {"cond": cs.graph, "body": bs.graph}, tuple(specs),
                        params={"n": len(flat)})
    for k, o in enumerate(outs):
        if scalar[k]:
            comp.mark_scalar(o)
    return regroup(list(outs))
