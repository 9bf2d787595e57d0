"""Layer ``ops``: Taylor rules for fused ops by running their composite definition on
jets.

A fused op (an LSTM layer, attention) is one op for speed, but its Taylor rule need not
be a new recurrence: the op equals a short program of primitive ops, each of which has
its own rule. ``Jet`` is a value with its coefficients (x_0, [x_1..x_K]) whose
arithmetic applies those primitive rules (``Mul.taylor``, ``Matmul.taylor``,
``Sigmoid.taylor``...), so a fused op's rule is its composite written once on jets.
Linear steps (slicing, transposes, concatenation) act term by term. Everything runs as
graphgrad ops, so a jet through a fused op can still be differentiated in reverse mode.
"""

from __future__ import annotations

from .arithmetic import Add, Mul, Sub
from .join import Cat, Stack
from .linalg import Matmul
from .taylor import order_of

__all__ = ["Jet", "cat_jets", "jets", "stack_jets"]


class Jet:
    """A primal tensor and its Taylor coefficients x_1..x_K (``None`` entries are
    symbolic zeros), inside an op's Taylor rule."""

    __slots__ = ("primal", "terms")

    def __init__(self, primal, terms, order: int):
        self.primal = primal
        self.terms = list(terms) if terms is not None else [None] * order

    @staticmethod
    def apply(op, *args, **params) -> Jet:
        """``op`` on the primals, and its Taylor rule on the coefficients; arguments
        that are not jets are constants (no series)."""
        order = next(len(a.terms) for a in args if isinstance(a, Jet))
        primals = tuple(a.primal if isinstance(a, Jet) else a for a in args)
        series = tuple(a.terms if isinstance(a, Jet) and any(c is not None for c in a.terms)
                       else None for a in args)
        out = op.apply(*primals, **params)
        if all(s is None for s in series):
            return Jet(out, None, order)
        terms = op.taylor(series, out, *primals, **params)
        # a rule may leave broadcasting implicit (a term with fewer dims than the output)
        return Jet(out, [c if c is None or c.shape == out.shape else c.expand(*out.shape)
                         for c in terms], order)

    def map(self, linear) -> Jet:
        """A linear function applied to the primal and to each coefficient."""
        return Jet(linear(self.primal), [None if c is None else linear(c) for c in self.terms],
                   len(self.terms))

    @staticmethod
    def join(jets: list, linear) -> Jet:
        """A linear function of several jets (cat, stack), term by term; zero terms are
        filled in only where another jet's term at that order is not zero."""
        order = len(jets[0].terms)
        terms = []
        for k in range(order):
            cs = [j.terms[k] for j in jets]
            if all(c is None for c in cs):
                terms.append(None)
            else:
                terms.append(linear([c if c is not None else j.primal.new_zeros(
                    tuple(j.primal.shape)) for c, j in zip(cs, jets, strict=True)]))
        return Jet(linear([j.primal for j in jets]), terms, order)

    def __add__(self, other) -> Jet:
        return Jet.apply(Add, self, other)

    __radd__ = __add__

    def __sub__(self, other) -> Jet:
        return Jet.apply(Sub, self, other)

    def __rsub__(self, other) -> Jet:
        return Jet.apply(Sub, other, self)

    def __mul__(self, other) -> Jet:
        return Jet.apply(Mul, self, other)

    __rmul__ = __mul__

    def __matmul__(self, other) -> Jet:
        return Jet.apply(Matmul, self, other)

    def __getitem__(self, index) -> Jet:
        return self.map(lambda a: a[index])

    @property
    def mT(self) -> Jet:  # noqa: N802 (PyTorch's name)
        return self.map(lambda a: a.mT)


def cat_jets(jets: list) -> Jet:
    """Concatenation along the last dim."""
    return Jet.join(jets, lambda ts: Cat.apply(*ts, dim=ts[0].ndim - 1))


def stack_jets(jets: list) -> Jet:
    return Jet.join(jets, lambda ts: Stack.apply(*ts, dim=0))


def jets(series, values) -> list:
    """A Taylor rule's inputs and their series as jets."""
    order = order_of(series)
    return [Jet(v, s, order) for v, s in zip(values, series, strict=True)]
