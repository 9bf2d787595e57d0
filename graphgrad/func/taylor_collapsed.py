"""Layer ``func``: collapsed Taylor mode (Dangel, Siebert, Zeinhofer, Walther, 2025), a
level on the dispatch stack for weighted sums of second directional derivatives.

R 2-jets that share x_0 (seeds v_1..v_R, weights w_r) and are summed at the end need
not carry R second-order coefficients: by Faa di Bruno the top coefficient of every op
is linear in the inputs' top coefficients, y_2 = J(x_0) x_2 + P(x_1), with a Jacobian J
that does not depend on the direction. So each tensor carries its value, the R
first-order coefficients X_1 (one tensor, directions first) and the one *collapsed*
coefficient X_2 = sum_r w_r x_{2,r}, and each op computes

    Y_1 = the order-1 rule on X_1, per direction,
    Y_2 = the order-1 rule on X_2 (once)  +  sum_r w_r P_r(x_{1,r}),

where P_r is the op's own 2-jet rule with x_2 = 0. Both come from the op's one Taylor
rule (``Op.taylor``): nothing here is written per op. The per-direction call is
vmapped over the R directions, so the primal values are shared, never repeated.
This is the eager implementation ("written directly"); for the weighted Laplacian of a
2-jet seeded by e_i it coincides with the forward Laplacian (Li et al.) up to the 1/2.

Three things keep the work near the forward Laplacian's arithmetic (an MLP costs one
(R * batch, width) GEMM per hidden layer and two passes over the directions per
activation), all equal to the rule above:
- an elementwise op with one carried input gets J and c = P(1) from its own rule run
  once at the primal's shape (x_1 = 1), then Y_1 = J X_1 and
  Y_2 = J X_2 + c sum_r w_r x_{1,r}^2 (P is a quadratic form in x_1, elementwise);
- a row-wise op's result for a seed that is the same for every point stays one row
  (the first layer's first-order terms are W's columns, not broadcast over the batch);
- first-order terms are computed when a later op needs them (``_Later``): the output
  layer's and its activation's, which a second-order operator never reads, are not.
"""

from __future__ import annotations

import numpy as np

from graphgrad.tensor import Tensor, Value, current_mode, is_grad_enabled, ones_like

from graphgrad.autograd import set_grad_enabled

from graphgrad.ops.elementwise import Elementwise
from graphgrad.ops.linalg import Linear, Matmul

from .taylor_mode import SeriesLevel
from .vmap import vmap

__all__ = ["CollapsedLevel"]


class CollapsedLevel(SeriesLevel):
    """Carries (X_1 with R directions first, collapsed X_2) per tensor."""

    name = "laplacian"

    def __init__(self, weights):
        super().__init__()
        self.weights = weights  # (R,) tensor: the w_r of sum_r w_r y_{2,r}
        self.unit = bool((weights._array == 1).all())  # the Laplacian: no weighting pass

    def second(self, t):
        """``t``'s collapsed second-order coefficient (None: zero), leaving first-order
        terms that no op asked for uncomputed."""
        got = self.lookup(t)
        return None if got is None else got[1]

    def terms(self, t) -> tuple | None:
        got = self.lookup(t)
        if got is None or not isinstance(got[0], _Later):
            return got
        with self.lowered():
            return got[0].get(), got[1]

    def seed(self, t: Value, first: Value) -> None:
        """``t``'s R first-order coefficients ``first`` (shape (R, *t.shape))."""
        self.store(t, (first, None))

    def propagate(self, op, rule, terms, out, args, params):
        carried = [i for i, t in enumerate(terms) if t is not None]
        if len(carried) == 1 and issubclass(op, Elementwise) and terms[carried[0]][0] is not None:
            return self._elementwise(rule, carried[0], terms[carried[0]], out, args, params)
        if carried == [0] and op in _ROW_WISE:
            # linear in its one carried operand (the weight, the other matrix are
            # constants): no P term, so Y_1 is wanted only by later ops, if at all (the
            # output layer's is not: the Laplacian reads Y_2 alone)
            first = _Later(lambda: _row_wise_first(op, rule, terms, out, args, params))
            x2 = terms[0][1]
            top = None if x2 is None else rule(([x2], *terms[1:]), out, *args, **params)[0]
            if top is not None and top.shape != out.shape:
                top = top.expand(*out.shape)
            return first, top
        first, second = _per_direction(op, rule, _resolved(terms), out, args, params)
        top = None
        if any(t is not None and t[1] is not None for t in terms):
            top = rule(tuple(None if t is None or t[1] is None else [t[1]] for t in terms),
                       out, *args, **params)[0]
        if second is not None:
            if not self.unit:
                second = second * self.weights.reshape(-1, *([1] * out.ndim))
            second = second.sum(dim=0)
            top = second if top is None else top + second
        if top is not None and top.shape != out.shape:
            top = top.expand(*out.shape)
        return None if first is None and top is None else (first, top)

    def _elementwise(self, rule, i, term, out, args, params) -> tuple:
        """An elementwise op with one input carrying coefficients (tanh(h), h * 2, h + b).
        Its 2-jet rule is y_1 = J x_1, y_2 = J x_2 + c x_1^2 with J = f'(x_0) and
        c = f''(x_0) / 2 elementwise (Faa di Bruno; a piecewise-linear op has c = 0).
        The rule itself, run once on the primal's shape with x_1 = 1 and x_2 = 0, gives
        (J, c). Then
            Y_1 = J X_1 (one pass over the R directions),
            Y_2 = J X_2 + c sum_r w_r x_{1,r}^2,
        which is what the per-direction rule summed over r computes, without its
        (R, ...) temporaries: J, c and the square sum are computed once."""
        x1, x2 = term
        unit = [None] * len(args)
        unit[i] = [ones_like(args[i]), None]
        jac, curv = rule(tuple(unit), out, *args, **params)
        top = None if jac is None or x2 is None else jac * x2
        if curv is not None:
            x1 = _lined_up(x1.get() if isinstance(x1, _Later) else x1, out)
            bent = curv * self._square_sum(x1)
            top = bent if top is None else top + bent
        if top is not None and top.dtype != out.dtype:  # a cast: J is in the new dtype
            top = top.to(out.dtype)
        if top is not None and top.shape != out.shape:
            top = top.expand(*out.shape)
        # Y_1 only if a later op asks (the output layer's activation: none does)
        first = None if jac is None else _Later(lambda: _scaled(jac, x1, out),
                                                (jac, x1, out))
        return None if first is None and top is None else (first, top)


    def _square_sum(self, x1):
        """sum_r w_r x_{1,r}^2. Where nothing will differentiate it (no gradient wanted,
        plain eager below this level) it is one NumPy pass over x_1 (``einsum``);
        otherwise graphgrad ops compute it (a square, then a sum or a vector-matrix
        product for the weights), so reverse mode records it, vmap batches it."""
        if current_mode() is None and not (is_grad_enabled() and x1.requires_grad):
            a = x1._array
            if self.unit:
                return Tensor._make(np.asarray(np.einsum("r...,r...->...", a, a)))
            return Tensor._make(np.asarray(np.einsum("r,r...,r...->...", self.weights._array,
                                                     a, a)))
        square = x1 * x1
        if self.unit:
            return square.sum(dim=0)
        return (self.weights @ square.reshape(square.shape[0], -1)).reshape(*square.shape[1:])


# ops whose first operand's rows are independent: a first-order term that is the same
# for every row (the Laplacian's seed e_r, shape (1, d)) may stay unbroadcast, so the
# first layer multiplies R rows, not R times the batch
_ROW_WISE = (Linear, Matmul)


def _per_direction(op, rule, terms, out, args, params) -> tuple:
    """The op's 2-jet rule with x_2 = 0 over the directions of the X_1s: (Y_1 per
    direction, P per direction), each None where zero. An elementwise op's rule is
    elementwise too, so it runs on the (R, ...) terms directly, broadcasting against
    the primals (ranks lined up first); any other op's rule is vmapped."""
    positions = [i for i, t in enumerate(terms) if t is not None and t[0] is not None]
    if not positions:
        return None, None
    if issubclass(op, Elementwise):
        series = [None] * len(terms)
        for i in positions:
            x1 = terms[i][0]
            missing = out.ndim - (x1.ndim - 1)
            if missing:
                x1 = x1.reshape(x1.shape[0], *([1] * missing), *x1.shape[1:])
            series[i] = [x1, None]
        shape = (terms[positions[0]][0].shape[0], *out.shape)
        y1, y2 = rule(tuple(series), out, *args, **params)
        return tuple(c if c is None or c.shape == shape else c.expand(*shape)
                     for c in (y1, y2))
    pattern = []

    def one_direction(*firsts):
        series = [None] * len(terms)
        for i, x1 in zip(positions, firsts, strict=True):
            arg = args[i]
            if x1.shape != arg.shape and not (i == 0 and op in _ROW_WISE and arg.ndim >= 2):
                x1 = x1.expand(*arg.shape)  # a broadcast seed, spelled out for this op
            series[i] = [x1, None]
        y = rule(tuple(series), out, *args, **params)
        pattern[:] = [c is not None for c in y]
        return tuple(c if c.shape == out.shape or _rows_broadcast(c.shape, out.shape)
                     else c.expand(*out.shape) for c in y if c is not None)

    got = list(vmap(one_direction)(*[terms[i][0] for i in positions]))
    y1 = got.pop(0) if pattern[0] else None
    y2 = got.pop(0) if pattern[1] else None
    return y1, y2


def _rows_broadcast(shape: tuple, full: tuple) -> bool:
    """``c`` is one row (or one row per matrix) that broadcasts over ``out``'s rows: a
    row-wise op's result for a seed that is the same for every point. It is kept that
    way so the next elementwise op's square sum costs R rows, not R times the batch;
    every consumer broadcasts it (elementwise ops) or treats its rows independently
    (``_ROW_WISE``), and anything else expands it first."""
    return (len(shape) == len(full) >= 2 and shape[-1] == full[-1]
            and all(a in (1, b) for a, b in zip(shape, full, strict=True)))


class _Later:
    """A first-order coefficient computed when an op first needs it. The output layer's
    Y_1 (and the activation's before it) are never needed by an operator that reads
    Y_2 alone: deferring them skips an (R, batch, width) product and GEMM. Made inside
    ``propagate`` (the level lowered) and run there too, under the grad mode of its
    making, so it records exactly what computing it at once would have."""

    __slots__ = ("make", "grad", "value", "scaled")

    def __init__(self, make, scaled: tuple | None = None):
        self.make, self.grad, self.value = make, is_grad_enabled(), None
        self.scaled = scaled  # (J, X_1, out) where the value is J X_1 (an elementwise op)

    def get(self):
        if self.make is not None:
            with set_grad_enabled(self.grad):
                self.value = self.make()
            self.make = self.scaled = None
        return self.value


# the rows of J X_1 multiplied per block in _fused_linear: a block, its product and the
# weight stay in L2 (blocks of 256 KiB to 4 MiB measured: the smallest was fastest)
_BLOCK_BYTES = 1 << 18


def _row_wise_first(op, rule, terms, out, args, params):
    """Y_1 of a row-wise op linear in its first operand (see ``propagate``)."""
    src = terms[0][0]
    if op is Linear and isinstance(src, _Later) and src.make is not None and \
            src.scaled is not None and current_mode() is None:
        fused = _fused_linear(*src.scaled, args[1])
        if fused is not None:
            return fused
    return _per_direction(op, rule, _resolved(terms), out, args, params)[0]


def _fused_linear(jac, x1, h, w):
    """Linear's first-order terms (J X_1) @ w^T for X_1 fed through an elementwise op
    with Jacobian J, without materializing J X_1: a block of directions at a time is
    multiplied in a cache-sized buffer and goes straight into the GEMM (Linear's jvp;
    the bias does not enter first-order terms). The same products and sums as
    the two ops apart: only where nothing will differentiate the result (eager, no
    gradient wanted) and the shapes are plain; otherwise None (the op path runs)."""
    if h.ndim != 2:
        return None
    x1 = _lined_up(x1.get() if isinstance(x1, _Later) else x1, h)
    if is_grad_enabled() and (jac.requires_grad or w.requires_grad or x1.requires_grad):
        return None
    a, j, wa = x1._array, jac._array, w._array
    if a.ndim != 3 or not (a.dtype == j.dtype == wa.dtype):
        return None
    try:
        if np.broadcast_shapes(j.shape, a.shape[1:]) != tuple(h.shape):
            return None
    except ValueError:
        return None
    r, (n, width) = a.shape[0], h.shape
    block = max(1, _BLOCK_BYTES // max(1, n * width * a.itemsize))
    res = np.empty((r, n, wa.shape[0]), a.dtype)
    buf = np.empty((min(block, r), n, width), a.dtype)
    for start in range(0, r, block):
        stop = min(r, start + block)
        part = buf[:stop - start]
        np.multiply(j, a[start:stop], out=part)
        # Linear's jvp (x_1 @ w^T, no bias) written in place: Linear.forward would
        # allocate each block's result and copy it in
        np.matmul(part.reshape(-1, width), wa.T, out=res[start:stop].reshape(-1, wa.shape[0]))
    return Tensor._make(res)


def _resolved(terms) -> tuple:
    return tuple(t if t is None or not isinstance(t[0], _Later) else (t[0].get(), t[1])
                 for t in terms)


def _lined_up(x1, out):
    """(R, ...) with its rank lined up with ``out`` (ones inserted after R)."""
    missing = out.ndim - (x1.ndim - 1)
    return x1 if missing <= 0 else x1.reshape(x1.shape[0], *([1] * missing), *x1.shape[1:])


def _scaled(jac, x1, out):
    """J X_1 over the directions, shaped (R, *out.shape) unless it is one row."""
    x1 = _lined_up(x1.get() if isinstance(x1, _Later) else x1, out)
    first = jac * x1
    if first.dtype != out.dtype:  # a cast: J is in the new dtype, X_1 in the old
        first = first.to(out.dtype)
    shape = (x1.shape[0], *out.shape)
    return first if first.shape == shape or _rows_broadcast(first.shape[1:], out.shape) \
        else first.expand(*shape)
