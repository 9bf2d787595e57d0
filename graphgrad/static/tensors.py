"""Layer ``static``: graph inputs and state: ``placeholder``, ``constant``, ``Variable``,
``global_variables_initializer``, ``assign``/``assign_add``/``assign_sub``."""

from __future__ import annotations

from graphgrad.backend import to_dtype, xp
from graphgrad.graph import Spec, Symbol, symbol
from graphgrad.graph.node import Node
from graphgrad.tensor import Value

from .graph import get_default_graph

__all__ = ["placeholder", "constant", "Variable", "global_variables_initializer",
           "variables_initializer", "assign", "assign_add", "assign_sub", "convert_to_tensor",
           "global_variables", "trainable_variables", "np_dtype"]


def np_dtype(dtype) -> xp.dtype:
    """A NumPy dtype from a graphgrad dtype, a NumPy dtype or a name."""
    if dtype is None:
        return xp.dtype(xp.float32)
    if isinstance(dtype, xp.dtype):
        return dtype
    return to_dtype(dtype).np


def _builder():
    from graphgrad.graph import builder_of
    return builder_of(get_default_graph().ir)


def placeholder(dtype, shape=None, name: str | None = None) -> Symbol:
    """A graph input that must be fed: ``shape`` may hold None dims, or be None (unknown
    rank)."""
    dims = None if shape is None else tuple(None if d is None else int(d) for d in shape)
    ir = get_default_graph().ir
    return symbol(ir.placeholder(Spec(dims, np_dtype(dtype)), name or "Placeholder"))


def convert_to_tensor(value, dtype=None, name: str | None = None) -> Symbol:
    """A Symbol of the default graph for ``value`` (Symbols pass through)."""
    if isinstance(value, Symbol):
        return value
    return constant(value, dtype=dtype, name=name)


def constant(value, dtype=None, shape=None, name: str | None = None) -> Symbol:
    if isinstance(value, Value):
        arr = value._array
    else:
        arr = xp.asarray(value)
        if dtype is None and not isinstance(value, xp.ndarray):
            # TF: Python floats make float32 constants, Python ints int32
            if arr.dtype == xp.float64:
                arr = arr.astype(xp.float32)
            elif arr.dtype == xp.int64:
                arr = arr.astype(xp.int32)
    if dtype is not None:
        arr = arr.astype(np_dtype(dtype))
    if shape is not None:
        arr = xp.broadcast_to(arr, tuple(shape)).copy()
    return symbol(get_default_graph().ir.constant(arr, name or "Const"))


class Variable(Symbol):
    """A TF1 variable: a state slot read by a ``variable`` node; ``initializer`` writes
    ``initial_value`` into it."""

    __slots__ = ("initializer", "initial_value", "trainable")

    def __new__(cls, initial_value, name: str | None = None, trainable: bool = True,
                dtype=None):
        g = get_default_graph()
        init = convert_to_tensor(initial_value, dtype=dtype)
        with g.building():
            if dtype is not None and init.dtype_name != np_dtype(dtype).name:
                init = init.to(to_dtype(dtype))
            node = g.ir.add("variable", name or "Variable", spec=init._node.spec)
            v = symbol(node, cls)
            v.initial_value = init
            v.trainable = trainable
            v.initializer = symbol(g.ir.add("assign", node.name + "_assign",
                                            inputs=(init._node,), target=node,
                                            params={"mode": "assign"}, spec=node.spec))
        g.variables.append(v)
        if trainable:
            g.trainable_variables.append(v)
        return v

    def __init__(self, *args, **kwargs):
        pass

    def __repr__(self) -> str:
        from graphgrad.graph import short
        return f"<graphgrad.static.Variable '{self.name}' {short(self._node.spec)}>"

    __str__ = __repr__

    def assign(self, value) -> Symbol:
        return assign(self, value)

    def assign_add(self, value) -> Symbol:
        return assign_add(self, value)

    def assign_sub(self, value) -> Symbol:
        return assign_sub(self, value)


def _assign(ref, value, mode: str) -> Symbol:
    if not isinstance(ref, Variable):
        raise TypeError(f"assign: ref must be a Variable, got {type(ref).__name__}")
    g = get_default_graph()
    value = convert_to_tensor(value)
    with g.building() as b:
        vnode = b.node_of(value, literal_ok=False)
        node = ref._node
        return symbol(g.ir.add("assign", f"{node.name}_{mode}", inputs=(vnode,), target=node,
                               params={"mode": mode}, spec=node.spec, deps=b.deps()))


def assign(ref, value) -> Symbol:
    return _assign(ref, value, "assign")


def assign_add(ref, value) -> Symbol:
    return _assign(ref, value, "add")


def assign_sub(ref, value) -> Symbol:
    return _assign(ref, value, "sub")


def global_variables() -> list:
    return list(get_default_graph().variables)


def trainable_variables() -> list:
    return list(get_default_graph().trainable_variables)


def variables_initializer(var_list, name: str = "init") -> Symbol:
    ir = get_default_graph().ir
    return symbol(ir.add("group", name, deps=tuple(v.initializer._node for v in var_list)))


def global_variables_initializer() -> Symbol:
    """An op that runs every variable's initializer (run it with ``sess.run``)."""
    return variables_initializer(get_default_graph().variables)


def node_of(x) -> Node:
    return x._node
