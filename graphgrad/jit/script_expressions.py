"""Layer ``jit``: how ``graphgrad.jit.script`` compiles an expression (the
``Expressions`` part of its compiler).

Names resolve to the function's variables, then its closure cells and globals (a
tensor read from outside becomes a graph input bound at call time; a mutable container
is refused), then builtins. Operators apply the Python operator to the operands, so on
Symbols they build nodes and on constants they fold. ``x.shape`` is a run-time shape
of unknown length; an ``if`` expression on a tensor is a ``cond``; comprehensions over
compile-time sequences unroll.
"""

from __future__ import annotations

import ast
import builtins
import operator
from typing import TYPE_CHECKING

from graphgrad.backend import xp
from graphgrad.graph import Spec, Symbol, symbol
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value

from .script_calls import Calls, as_bool_tensor, as_eager, unknown_rank
from .script_control import Undefined, build_cond
from .script_values import ShapeValue, TupleResult, is_module

if TYPE_CHECKING:
    from .script_frames import Frame

__all__ = ["Expressions", "BINOPS"]

BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
           ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNSUPPORTED_EXPR = {ast.Lambda: "Lambda aren't supported",
                     ast.NamedExpr: "assignment expressions aren't supported",
                     ast.Await: "await expressions aren't supported",
                     ast.Yield: "yield expressions aren't supported",
                     ast.YieldFrom: "yield expressions aren't supported",
                     ast.JoinedStr: "f-strings aren't supported",
                     ast.Set: "set literals aren't supported",
                     ast.SetComp: "set comprehensions aren't supported",
                     ast.DictComp: "dict comprehensions aren't supported"}
_MUTABLE = (list, dict, set, bytearray)


class Expressions(Calls):
    """Mixin of ``Compiler``: expressions."""

    # ---- expressions -------------------------------------------------------------------

    def visit(self, node: ast.AST, fr: Frame, refused: dict, what: str, *extra):
        """Dispatch ``node`` to ``e_<Kind>``/``s_<Kind>``; a kind in ``refused`` or
        without a method is a ScriptError (``what``: expressions or statements)."""
        kind = type(node)
        if kind in refused:
            raise fr.error(refused[kind], node)
        method = getattr(self, what[0] + "_" + kind.__name__, None)
        if method is None:
            raise fr.error(f"{kind.__name__} {what} aren't supported", node)
        return method(node, fr, *extra)

    def expr(self, e: ast.expr, fr: Frame):
        return self.visit(e, fr, _UNSUPPORTED_EXPR, "expressions")

    def e_Constant(self, e, fr):
        return e.value

    def e_Name(self, e, fr):
        return self.name(e, fr)

    def name(self, e: ast.Name, fr: Frame):
        n = e.id
        if n in fr.env:
            v = fr.env[n]
            if isinstance(v, Undefined):
                raise fr.error(f"{n} is not defined on every path", e, v.why)
            return v
        if n in fr.closure:
            cell = fr.closure[n]
            try:
                value = cell.cell_contents
            except ValueError:
                raise fr.error(f"undefined value {n}", e) from None
            return self.outside(value, n, e, fr, lambda c=cell: c.cell_contents, "closure")
        if n in fr.globals:
            g = fr.globals
            return self.outside(g[n], n, e, fr, lambda g=g, n=n: g[n], "global")
        if hasattr(builtins, n):
            return getattr(builtins, n)
        raise fr.error(f"undefined value {n}", e)

    def outside(self, value, name: str, e: ast.AST, fr: Frame, getter, where: str):
        """A value read from outside the function (a global, a closure, an attribute)."""
        if isinstance(value, Symbol):
            return value
        if isinstance(value, Value):
            return self.b.lifted(value, name, getter)
        if isinstance(value, _MUTABLE):
            raise fr.error("closures over mutable state aren't supported", e,
                           f"{name!r} is a {type(value).__name__} read from the enclosing "
                           f"scope ({where}): closures over mutable state aren't supported "
                           f"(a scripted graph cannot see later changes); pass it as an "
                           f"argument or make it a tuple")
        if isinstance(value, xp.ndarray):
            raise fr.error("NumPy arrays aren't supported", e,
                           f"{name!r} is a NumPy array: graphgrad.jit.script takes graphgrad "
                           f"tensors and Python numbers (wrap it with graphgrad.tensor)")
        if isinstance(value, tuple):
            return tuple(self.outside(v, f"{name}_{k}", e, fr,
                                      lambda k=k: getter()[k], where)
                         for k, v in enumerate(value))
        return value

    def e_Attribute(self, e, fr):
        base = self.expr(e.value, fr)
        attr = e.attr
        if isinstance(base, Symbol):
            return self.tensor_attr(base, attr, e, fr)
        if isinstance(base, ShapeValue):
            raise fr.error("shape of unknown rank", e, base.rank_error())
        if isinstance(base, TupleResult):
            if attr not in base.fields:
                raise fr.error("several values", e, base.error())
            return self.tuple_item(base, base.fields.index(attr))
        if is_module(base):
            store = base.__dict__
            for key in ("_parameters", "_buffers"):
                if attr in store.get(key, {}):
                    value = store[key][attr]
                    if value is None:
                        return None
                    owner = self.module_names.get(id(base), "")
                    label = f"{owner}.{attr}" if owner else attr
                    return self.b.lifted(value, label, lambda m=base, a=attr: getattr(m, a))
        try:
            value = getattr(base, attr)
        except AttributeError as err:
            raise fr.error(f"object has no attribute {attr}", e, str(err)) from None
        return self.outside(value, attr, e, fr, lambda b=base, a=attr: getattr(b, a),
                            "attribute")

    def tensor_attr(self, x: Symbol, attr: str, e: ast.AST, fr: Frame):
        if attr == "shape":
            return self.shape_of(x, ast.unparse(e.value))
        if attr in ("ndim", "dtype"):
            what = "rank" if attr == "ndim" else "dtype"
            raise fr.error(f"tensor {what} unknown", e,
                           f"{ast.unparse(e)}: a Tensor's {what} is not known at compile time "
                           f"(graphgrad.jit.script compiles from the source, without inputs)")
        if not callable(getattr(type(x), attr, None)):  # a property (x.T): it runs now
            self.needs_rank([x], f"{ast.unparse(e)}")
        try:
            return getattr(x, attr)
        except Exception as err:  # noqa: BLE001 - reported with the source line
            raise fr.error(f"tensor attribute {attr}", e, f"{type(err).__name__}: {err}") \
                from None

    def shape_of(self, x: Symbol, text: str) -> ShapeValue:
        """``x.shape`` as a run-time int64 vector (its length is the rank, not known)."""
        source = self.b.node_of(x)
        node = self.shape_nodes.get(source)  # one shape node per tensor
        if node is None:
            rank = source.spec.shape
            vec = Spec(None if rank is None else (len(rank),), xp.dtype(xp.int64))
            node = self.b.graph.add("shape", "shape", inputs=(source,), spec=vec,
                                    deps=self.b.deps())
            self.shape_nodes[source] = node
        return ShapeValue(text, symbol(node))

    def e_Subscript(self, e, fr):
        base = self.expr(e.value, fr)
        index = self.expr(e.slice, fr)
        if isinstance(base, ShapeValue):
            if isinstance(index, int):
                return self.mark_scalar(base[index])
            raise fr.error("shape of unknown rank", e, base.rank_error())
        if isinstance(base, TupleResult):
            if not isinstance(index, int) or isinstance(index, bool):
                raise fr.error("several values", e, base.error())
            return self.tuple_item(base, index)
        if isinstance(base, Symbol) and self.generic and _static_index(index) and \
                unknown_rank([base], {}, self.flats):
            # the op needs the rank to place the index: x[1:] is made when the graph runs
            return self.deferred(operator.getitem, (base, index), {},
                                 len(self.b.graph.nodes))
        if isinstance(base, Symbol):
            self.needs_rank([base], f"{ast.unparse(e)} (indexing)")
        return self.apply(operator.getitem, (base, index), e, fr)

    def e_Slice(self, e, fr):
        parts = [None if p is None else self.expr(p, fr) for p in (e.lower, e.upper, e.step)]
        return slice(*parts)

    def e_Tuple(self, e, fr):
        return tuple(self.elements(e.elts, fr))

    def e_List(self, e, fr):
        return list(self.elements(e.elts, fr))

    def elements(self, elts, fr: Frame) -> list:
        out = []
        for el in elts:
            if isinstance(el, ast.Starred):
                v = self.expr(el.value, fr)
                out += self.unpack(v, len(list(v)) if isinstance(v, (tuple, list)) else -1,
                                   el, fr)
            else:
                out.append(self.expr(el, fr))
        return out

    def e_Dict(self, e, fr):
        raise fr.error("dict literals aren't supported", e)

    def e_BinOp(self, e, fr):
        a, b = self.expr(e.left, fr), self.expr(e.right, fr)
        return self.apply(BINOPS[type(e.op)], (a, b), e, fr)

    def e_UnaryOp(self, e, fr):
        v = self.expr(e.operand, fr)
        if isinstance(e.op, ast.Not):
            if isinstance(v, Symbol):
                return self.apply(REGISTRY["LogicalNot"].apply, (self.predicate(v),), e, fr)
            return not self.truth(v, e.operand, fr)
        op = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
        return self.apply(op[type(e.op)], (v,), e, fr)

    def e_BoolOp(self, e, fr):
        is_and = isinstance(e.op, ast.And)
        result = self.expr(e.values[0], fr)
        for operand in e.values[1:]:
            if not isinstance(result, Symbol):
                if self.truth(result, e, fr) != is_and:
                    return result  # Python's short circuit
                result = self.expr(operand, fr)
                continue
            other = self.expr(operand, fr)
            op = REGISTRY["LogicalAnd" if is_and else "LogicalOr"].apply
            result = self.apply(op, (self.predicate(result), self.predicate(
                other if isinstance(other, Symbol) else as_eager(xp.asarray(bool(other))))),
                e, fr)
        return result

    def e_Compare(self, e, fr):
        left = self.expr(e.left, fr)
        result = None
        for op, right_e in zip(e.ops, e.comparators, strict=True):
            right = self.expr(right_e, fr)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (Symbol, ShapeValue)):
                raise fr.error("'in' on a tensor isn't supported", e)
            part = self.apply(_CMPOPS[type(op)], (left, right), e, fr)
            if result is None:
                result = part
            elif isinstance(result, Symbol) or isinstance(part, Symbol):
                result = self.apply(REGISTRY["LogicalAnd"].apply, (
                    self.predicate(as_bool_tensor(result)),
                    self.predicate(as_bool_tensor(part))), e, fr)
            else:
                result = result and part
            if result is False:
                return False
            left = right
        return result

    def e_IfExp(self, e, fr):
        test = self.expr(e.test, fr)
        if not isinstance(test, Symbol):
            return self.expr(e.body if self.truth(test, e.test, fr) else e.orelse, fr)

        def run(which: bool) -> list:
            return [self.expr(e.body if which else e.orelse, fr)]

        def fail(msg):
            return fr.error("type mismatch between branches", e, msg)
        return build_cond(self, self.predicate(test), run, ["<if expression>"], fail)[0]

    def e_ListComp(self, e, fr):
        return list(self.comprehension(e, fr))

    def e_GeneratorExp(self, e, fr):
        return tuple(self.comprehension(e, fr))

    def comprehension(self, e, fr: Frame) -> list:
        """Over a sequence known at compile time: unrolled."""
        if len(e.generators) != 1 or e.generators[0].is_async:
            raise fr.error("comprehensions with several for clauses aren't supported", e)
        gen = e.generators[0]
        seq = self.expr(gen.iter, fr)
        if isinstance(seq, (Symbol, ShapeValue)):
            raise fr.error("comprehensions over tensors aren't supported", gen.iter,
                           "comprehensions over tensors aren't supported: the number of "
                           "elements is not known at compile time")
        sub = fr.child(dict(fr.env))
        out = []
        for item in seq:
            self.assign(gen.target, item, sub, e)
            if all(self.truth(self.expr(c, sub), c, sub) for c in gen.ifs):
                out.append(self.expr(e.elt, sub))
        return out

    def e_Starred(self, e, fr):
        raise fr.error("starred expressions aren't supported here", e)

    def e_Call(self, e, fr):
        fn = self.expr(e.func, fr)
        args = self.elements(e.args, fr)
        kwargs = {}
        for kw in e.keywords:
            if kw.arg is None:
                raise fr.error("**kwargs in calls aren't supported", kw.value)
            kwargs[kw.arg] = self.expr(kw.value, fr)
        return self.call(fn, args, kwargs, e, fr)


def _static_index(index) -> bool:
    """An index of Python ints, slices of ints, None and Ellipsis (no traced value)."""
    parts = index if isinstance(index, tuple) else (index,)
    for p in parts:
        if isinstance(p, slice):
            if not all(v is None or type(v) is int for v in (p.start, p.stop, p.step)):
                return False
        elif not (p is None or p is Ellipsis or type(p) is int):
            return False
    return True
