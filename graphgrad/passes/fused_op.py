"""Layer ``passes``: ``Fused``, the op a fusion group becomes, and ``FusedProgram``, what
it computes: a little straight-line program of elementwise ops with at most one trailing
reduction, over the group's external inputs.

``Fused`` is an op like any other (``forward``, a shape rule, ``vjp``), so a fused graph
still verifies, prints as Python (``Fused(x, w, kernel=_p0)``) and draws. It is not
registered in ``graphgrad.ops.REGISTRY``: it is made by the fusion pass, never called by
users, and its rules are those of the ops inside it. ``forward`` is the reference
lowering, each inner op's own ``forward`` in order, exactly what eager execution does;
the backends (``graphgrad.backends.fused``) choose faster lowerings of the same program.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from graphgrad.ops import Op, Spec
from graphgrad.ops.unbroadcast import unbroadcast
from graphgrad.tensor import Value

__all__ = ["Fused", "FusedProgram", "Step", "Ref"]


class Ref(NamedTuple):
    """An operand inside a program: external input ``index`` (``kind == "in"``) or the
    value of step ``index`` (``kind == "t"``)."""

    kind: str
    index: int

    def __repr__(self) -> str:
        return f"{'x' if self.kind == 'in' else 't'}{self.index}"


class Step(NamedTuple):
    """One op of a program: the op class, its operands (``Ref``s or Python scalars), its
    keyword params, the spec of its result and the name of the graph node it was."""

    op: type
    args: tuple
    params: dict
    spec: Spec
    name: str


class FusedProgram:
    """The steps of one fusion group; the last step's value is the result. Hashed by
    identity (a node param); ``key`` is its structure as text, equal for equal
    programs, which kernel caches use."""

    def __init__(self, steps: list[Step], input_specs: list[Spec]):
        self.steps = tuple(steps)
        self.input_specs = tuple(input_specs)
        self.key = ";".join(
            f"{s.op.__name__}({','.join(map(repr, s.args))}"
            + "".join(f",{k}={v!r}" for k, v in sorted(s.params.items())) + ")"
            for s in self.steps)

    @property
    def spec(self) -> Spec:
        return self.steps[-1].spec

    @property
    def op_names(self) -> list[str]:
        return [s.op.__name__ for s in self.steps]

    def __repr__(self) -> str:
        return f"<fused {' -> '.join(self.op_names)}>"

    def run(self, arrays: tuple) -> Any:
        """The reference lowering: each op's ``forward`` in order (eager's computation)."""
        return self._evaluate(arrays, lambda s, args: s.op.forward(*args, **s.params))

    def infer(self, specs: tuple) -> Spec:
        """Each step's shape rule re-run on the given input specs (the verifier's check)."""
        return self._evaluate(specs, lambda s, args: s.op.infer(*args, **s.params))

    def _evaluate(self, inputs: tuple, apply) -> Any:
        vals: list = []
        for s in self.steps:
            vals.append(apply(s, [_operand(a, inputs, vals) for a in s.args]))
        return vals[-1]


class _Fused(Op):
    """A fusion group as one op (see the module docstring). ``kernel`` is the
    ``FusedProgram``."""

    promotes = False   # each inner op promoted for itself when the group was formed

    @staticmethod
    def forward(*arrays, kernel: FusedProgram):
        return kernel.run(arrays)

    @classmethod
    def infer(cls, *specs, kernel: FusedProgram) -> Spec:
        return kernel.infer(specs)

    @staticmethod
    def vjp(g, out, *inputs, kernel: FusedProgram):
        """Reverse mode through the steps: recompute them in graphgrad ops (through
        dispatch, so a ``create_graph`` backward records them too), then run each op's
        own vjp rule backward, un-broadcasting inner cotangents as the engine does."""
        vals: list = []
        for s in kernel.steps:
            args = [_operand(a, inputs, vals) for a in s.args]
            vals.append(s.op.apply(*args, **s.params))
        cts: dict[Ref, Any] = {Ref("t", len(kernel.steps) - 1): g}
        for i in range(len(kernel.steps) - 1, -1, -1):
            ct = cts.pop(Ref("t", i), None)
            s = kernel.steps[i]
            if ct is None or not s.op.differentiable:
                continue
            args = [_operand(a, inputs, vals) for a in s.args]
            grads = s.op.vjp(ct, vals[i], *args, **s.params)
            for a, arg, ga in zip(s.args, args, grads, strict=True):
                if ga is None or not isinstance(a, Ref) or not isinstance(arg, Value):
                    continue
                ga = unbroadcast(ga, tuple(arg.shape), arg._array.dtype, s.op.__name__)
                cts[a] = ga if a not in cts else cts[a] + ga
        return tuple(cts.get(Ref("in", k)) for k in range(len(inputs)))


def _operand(a, inputs: tuple, vals: list):
    if isinstance(a, Ref):
        return (inputs if a.kind == "in" else vals)[a.index]
    return a


_Fused.__name__ = _Fused.__qualname__ = "Fused"   # printed as Fused...(...); not registered
Fused = _Fused
