"""Layer ``onnx``: the ``Emitter``, which collects the ONNX nodes and initializers one
export makes, and ``Val``, an exported value with the dtype and rank the mappings need.

ONNX ops want operands of one type where PyTorch promotes, so every mapping converts its
operands to the dtype the graphgrad op computed in (``cast``); a Python scalar operand
becomes a constant of that dtype. Values whose data is known at export time (parameters
with ``export_params=True``, constants) carry their array, so ``do_constant_folding`` can
compute ops on them once and store the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphgrad.backend import xp

__all__ = ["Val", "Emitter", "onnx_package"]


def onnx_package() -> Any:
    try:
        import onnx
    except ImportError as e:
        raise ImportError("graphgrad.onnx.export needs the onnx package: pip install "
                          "'graphgrad[onnx]' (and onnxruntime to run the exported model)"
                          ) from e
    return onnx


class Val:
    """One exported value: its ONNX name, NumPy dtype, rank, and (when known at export
    time) its array."""

    __slots__ = ("name", "dtype", "rank", "array")

    def __init__(self, name: str, dtype: Any, rank: int | None, array: Any = None):
        self.name, self.dtype, self.rank, self.array = name, xp.dtype(dtype), rank, array

    def __repr__(self) -> str:
        return f"Val({self.name}, {self.dtype}, rank={self.rank})"


class Emitter:
    """The nodes and initializers of one ONNX graph, built in order."""

    def __init__(self, opset: int):
        self.onnx = onnx_package()
        self.opset = opset
        self.nodes: list = []
        self.initializers: dict[str, Any] = {}  # name -> array (written once, when used)
        self.pending: dict[str, Any] = {}       # known arrays not yet written
        self.used: set[str] = set()
        self.memo: dict[str, Any] = {}          # what one mapping leaves for a later one
        self._count = 0

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}_{self._count}"

    def use(self, name: str) -> str:
        """``name`` as a node input: a pending known value becomes an initializer."""
        if name in self.pending:
            self.initializers[name] = self.pending.pop(name)
        self.used.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1,
           **attrs: Any) -> Any:
        """Append an ONNX node; returns its output name (a list when ``outputs`` > 1).
        An input named "" is an omitted optional input."""
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        ins = [self.use(i) if i else "" for i in inputs]
        while ins and not ins[-1]:  # omitted trailing inputs are left out (onnxruntime
            ins.pop()               # crashed on LayerNormalization's bias given as "")
        self.nodes.append(self.onnx.helper.make_node(op_type, ins, names,
                                                     name=self.fresh(op_type), **attrs))
        return names[0] if outputs == 1 else names

    def prune(self, outputs: Sequence[str]) -> None:
        """Drop the nodes no output depends on (a mapping may emit more than its users
        read: MaxPool's indices beside its values) and the initializers only they read;
        unread optional outputs of the kept nodes become "" (ONNX: not computed)."""
        needed = set(outputs)
        kept = []
        for n in reversed(self.nodes):
            if not any(o in needed for o in n.output):
                continue
            for k, o in enumerate(n.output):
                if o not in needed:
                    n.output[k] = ""
            while n.output and not n.output[-1]:
                del n.output[-1]
            needed.update(i for i in n.input if i)
            kept.append(n)
        self.nodes = kept[::-1]
        self.initializers = {k: v for k, v in self.initializers.items() if k in needed}

    def const(self, array: Any, base: str = "const") -> str:
        """A constant initializer holding ``array`` (written only if an op uses it)."""
        name = self.fresh(base)
        self.pending[name] = xp.asarray(array)
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(xp.asarray(list(values), dtype=xp.int64), "ints")

    def known(self, name: str, array: Any, dtype: Any, rank: int | None) -> Val:
        """A value whose array is known at export time (a parameter or a constant)."""
        self.pending[name] = xp.asarray(array)
        return Val(name, dtype, rank, self.pending[name])

    # ---------------------------------------------------------------- dtype handling
    def cast(self, v: Any, dtype: Any) -> str:
        """The name of ``v`` (a Val or a Python scalar) as ``dtype``."""
        dtype = xp.dtype(dtype)
        if not isinstance(v, Val):
            return self.const(xp.asarray(v, dtype=dtype), "scalar")
        if v.dtype == dtype:
            return v.name
        if v.array is not None:  # a known value: cast now, not in the graph
            return self.const(v.array.astype(dtype), "cast")
        return self.op("Cast", [v.name], to=self.onnx.helper.np_dtype_to_tensor_dtype(dtype))

    @staticmethod
    def promoted(args: Sequence[Any]) -> Any:
        """The dtype PyTorch computes a binary op on ``args`` in (scalars are weak)."""
        from graphgrad.backend import result_type, stand_in
        # a 0-d tensor promotes more weakly than one with dims, as in PyTorch
        operands = [stand_in(() if a.rank == 0 else (1,), a.dtype) if isinstance(a, Val)
                    else a for a in args]
        return xp.dtype(result_type(*operands))

    def unsqueeze(self, name: str, axes: Sequence[int]) -> str:
        return self.op("Unsqueeze", [name, self.ints(axes)])
