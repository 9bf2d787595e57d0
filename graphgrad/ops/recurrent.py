"""Layer ``ops``: a recurrent layer's pass over a whole sequence as one op, for the LSTM
(``LstmLayer``), the GRU (``GruLayer``) and the Elman RNN (``RnnLayer``, tanh or relu),
with the backward through time as one op (``LstmLayerBackward``, ``GruLayerBackward``,
``RnnLayerBackward``): one loop over the steps in each direction, where the composite
records a dozen ops per step.

The input projection of every step (``x_t W_ih^T + b``) is not part of the op: the layer
computes it for the whole sequence as one GEMM and hands it in as ``xg`` (L, N, G*H).
Only the recurrence is here: per step one (N, H) x (H, G*H) product and the gates.

The forwards and the plain eager backward through time (the forward of the
``...Backward`` op: nothing recorded) are array kernels, in ``recurrent_kernels.py``:
preallocated buffers, in-place steps, the gates kept by the forward for the backward.
Under ``create_graph`` or a function transform the vjp is the same BPTT written in
graphgrad ops (``_lstm_bptt`` / ``_gru_bptt`` / ``_rnn_bptt``, over the ``_TENSORS``
namespace), so gradients of gradients differentiate it; the tests hold both against
torch. Forward-mode is the tangent recurrence, also in graphgrad ops.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from graphgrad.backend import xp

from .base import Op, Spec
from .fused import array_backward, unpack
from .batching import by_example, to_front
from .join import Cat, Stack
from .recurrent_kernels import (gru_backward, gru_forward, lstm_backward, lstm_forward,
                                rnn_backward, rnn_forward)
from .taylor_composite import Jet, cat_jets, jets, stack_jets
from .unary import Relu, Sigmoid, Tanh

__all__: list[str] = []

_TENSORS = SimpleNamespace(sigmoid=Sigmoid.apply, tanh=Tanh.apply, relu=Relu.apply,
                           cat=lambda ts: Cat.apply(*ts, dim=ts[0].ndim - 1),
                           stack=lambda ts: Stack.apply(*ts, dim=0), t=lambda w: w.mT,
                           lstm_factors=lambda *a: _lstm_factors(*a))
# Taylor mode: the composite step on jets (each primitive's own Taylor rule)
_JETS = SimpleNamespace(sigmoid=lambda j: Jet.apply(Sigmoid, j),
                        tanh=lambda j: Jet.apply(Tanh, j), relu=lambda j: Jet.apply(Relu, j),
                        cat=cat_jets, stack=stack_jets,
                        t=lambda w: w.mT)


# ---- LSTM ------------------------------------------------------------------------------

def _lstm_gates(k, pre, hidden: int):
    """(i, f, g, o) from the pre-activations: one sigmoid over all four (g's part
    unused) costs less than three calls."""
    s = k.sigmoid(pre)
    g = k.tanh(pre[..., 2 * hidden:3 * hidden])
    return s[..., :hidden], s[..., hidden:2 * hidden], g, s[..., 3 * hidden:]


def _lstm_factors(pre, c, c_prev, hidden: int):
    """The factors of an LSTM step's backward that do not depend on the incoming
    gradient, for every step at once: f, dc/dh (o tanh'(c)), and each gate's
    pre-activation derivative per unit of dc (i, f, g) or of dh (o)."""
    i, f, g, o = _lstm_gates(_TENSORS, pre, hidden)
    tc = Tanh.apply(c)
    return f, o * (1 - tc * tc), g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g), \
        tc * o * (1 - o)


def _lstm_bptt(k, grad, hc, xg, h0, c0, w_hh):
    """Gradients of an LSTM layer's (L, N, 2H) output [h_t | c_t] with respect to xg,
    h0, c0 and w_hh. The gates of every step are recomputed at once from the saved
    states (one GEMM), and so is every factor that does not depend on the incoming
    gradient; only the recurrence of (dh, dc) loops."""
    steps, hidden = hc.shape[0], h0.shape[-1]
    h_prev = k.stack([h0] + [hc[t, :, :hidden] for t in range(steps - 1)])
    c_prev = k.stack([c0] + [hc[t, :, hidden:] for t in range(steps - 1)])
    f, via_h, di, df, dg, do = k.lstm_factors(xg + h_prev @ k.t(w_hh), hc[..., hidden:], c_prev,
                                              hidden)
    dh = dc = None
    dpre = [None] * steps
    for t in range(steps - 1, -1, -1):
        gh = grad[t, :, :hidden] if dh is None else grad[t, :, :hidden] + dh
        gc = grad[t, :, hidden:] if dc is None else grad[t, :, hidden:] + dc
        dct = gc + gh * via_h[t]
        dpre[t] = k.cat([dct * di[t], dct * df[t], dct * dg[t], gh * do[t]])
        dh = dpre[t] @ w_hh
        dc = dct * f[t]
    dxg = k.stack(dpre)
    rows = steps * h0.shape[0]
    dw = k.t(dxg.reshape(rows, 4 * hidden)) @ h_prev.reshape(rows, hidden)
    return dxg, dh, dc, dw


class LstmLayer(Op):
    """An LSTM layer over a sequence: ``xg`` (L, N, 4H), the input projections with both
    biases, gates (i, f, g, o) as PyTorch's; initial ``h0``, ``c0`` (N, H); ``w_hh``
    (4H, H). Returns (L, N, 2H): each step's h and c side by side."""

    holomorphic = True  # analytic: the complex step goes through it

    saves_output = True

    forward = staticmethod(lstm_forward)

    @staticmethod
    def vjp(g, out, xg, h0, c0, w_hh):
        return _layer_vjp(LstmLayerBackward, _lstm_bptt, g, out, (xg, h0, c0, w_hh))

    @staticmethod
    def kernel_vjp(g, out, xg, h0, c0, w_hh):
        return _kernel_vjp(LstmLayerBackward, g, out, (xg, h0, c0, w_hh))

    @staticmethod
    def jvp(dots, out, xg, h0, c0, w_hh):
        """The tangent recurrence, step by step in graphgrad ops."""
        dxg, dh, dc, dw = dots
        k, hidden, steps = _TENSORS, h0.shape[-1], xg.shape[0]
        h_prev = [h0] + [out[t, :, :hidden] for t in range(steps - 1)]
        c_prev = [c0] + [out[t, :, hidden:] for t in range(steps - 1)]
        tangents = []
        for t in range(steps):
            i, f, g, o = _lstm_gates(k, xg[t] + h_prev[t] @ k.t(w_hh), hidden)
            terms = [d for d in (None if dxg is None else dxg[t],
                                 None if dh is None else dh @ k.t(w_hh),
                                 None if dw is None else h_prev[t] @ k.t(dw)) if d is not None]
            dpre = terms[0]
            for d in terms[1:]:
                dpre = dpre + d
            di, df = dpre[:, :hidden], dpre[:, hidden:2 * hidden]
            dg, do = dpre[:, 2 * hidden:3 * hidden], dpre[:, 3 * hidden:]
            di, df, do = di * i * (1 - i), df * f * (1 - f), do * o * (1 - o)
            dg = dg * (1 - g * g)
            dc_new = df * c_prev[t] + di * g + i * dg
            if dc is not None:
                dc_new = dc_new + f * dc
            tc = k.tanh(out[t, :, hidden:])
            dh = do * tc + o * (1 - tc * tc) * dc_new
            dc = dc_new
            tangents.append(k.cat([dh, dc]))
        return k.stack(tangents)

    @staticmethod
    def taylor(series, out, xg, h0, c0, w_hh):
        """The layer's composite (gates, cell update) step by step on jets."""
        k, hidden = _JETS, h0.shape[-1]
        xg, h, c, w_hh = jets(series, (xg, h0, c0, w_hh))
        w = k.t(w_hh)
        steps = []
        for t in range(xg.primal.shape[0]):
            i, f, g, o = _lstm_gates(k, xg[t] + h @ w, hidden)
            c = f * c + i * g
            h = o * k.tanh(c)
            steps.append(k.cat([h, c]))
        return k.stack(steps).terms

    @classmethod
    def batch(cls, vals, bdims):
        return _batch_layer(cls, vals, bdims, n_weights=1, folded=(1, 0, 0))

    @classmethod
    def infer(cls, xg, h0, c0, w_hh) -> Spec:
        return Spec((xg.shape[0], *h0.shape[:-1], 2 * h0.shape[-1]),
                    xp.result_type(xg.dtype, h0.dtype, c0.dtype, w_hh.dtype))


class _BackwardThroughTime(Op):
    """A layer's backward through time on arrays, the cotangents packed in one 1-D buffer.
    Runs only in a plain eager backward (nothing recorded), so its result carries no
    gradient; under ``create_graph`` the same BPTT runs as graphgrad ops instead."""

    differentiable = False

    @classmethod
    def batch(cls, vals, bdims, **params):
        return by_example(cls, vals, bdims, **params)


class LstmLayerBackward(_BackwardThroughTime):
    """``LstmLayer``'s: (grad, out, xg, h0, c0, w_hh) -> the cotangents of xg, h0, c0 and
    w_hh."""

    holomorphic = True  # analytic: the complex step goes through it

    forward = staticmethod(lstm_backward)

    @classmethod
    def infer(cls, g, out, xg, h0, c0, w_hh) -> Spec:
        size = sum(math.prod(s.shape) for s in (xg, h0, c0, w_hh))
        return Spec((size,), xg.dtype)


# ---- GRU -------------------------------------------------------------------------------

def _gru_parts(k, xg, hg, hidden: int):
    r = k.sigmoid(xg[..., :hidden] + hg[..., :hidden])
    z = k.sigmoid(xg[..., hidden:2 * hidden] + hg[..., hidden:2 * hidden])
    hn = hg[..., 2 * hidden:]
    n = k.tanh(xg[..., 2 * hidden:] + r * hn)
    return r, z, n, hn


def _gru_bptt(k, grad, hs, xg, h0, w_hh, b_hh=None):
    """Gradients of a GRU layer's (L, N, H) outputs with respect to xg, h0, w_hh, b_hh."""
    steps, hidden = hs.shape[0], h0.shape[-1]
    h_prev = k.stack([h0] + [hs[t] for t in range(steps - 1)])
    hg = h_prev @ k.t(w_hh)
    if b_hh is not None:
        hg = hg + b_hh
    r, z, n, hn = _gru_parts(k, xg, hg, hidden)
    dh = None
    dxs, dhs = [None] * steps, [None] * steps
    for t in range(steps - 1, -1, -1):
        gh = grad[t] if dh is None else grad[t] + dh
        dn = gh * (1 - z[t]) * (1 - n[t] * n[t])
        dr = dn * hn[t] * r[t] * (1 - r[t])
        dz = gh * (h_prev[t] - n[t]) * z[t] * (1 - z[t])
        dxs[t] = k.cat([dr, dz, dn])
        dhs[t] = k.cat([dr, dz, dn * r[t]])
        dh = gh * z[t] + dhs[t] @ w_hh
    dxg, dhg = k.stack(dxs), k.stack(dhs)
    rows = steps * h0.shape[0]
    dhg2 = dhg.reshape(rows, 3 * hidden)
    dw = k.t(dhg2) @ h_prev.reshape(rows, hidden)
    grads = [dxg, dh, dw]
    if b_hh is not None:
        grads.append(dhg2.sum(0))
    return grads


class GruLayer(Op):
    """A GRU layer over a sequence: ``xg`` (L, N, 3H) the input projections with
    ``b_ih``, gates (r, z, n) as PyTorch's; initial ``h0`` (N, H); ``w_hh`` (3H, H) and
    an optional ``b_hh`` (3H) (inside the reset gate's product, so not foldable into
    xg). Returns the (L, N, H) outputs."""

    holomorphic = True  # analytic: the complex step goes through it

    saves_output = True

    forward = staticmethod(gru_forward)

    @staticmethod
    def vjp(g, out, xg, h0, w_hh, b_hh=None):
        return _layer_vjp(GruLayerBackward, _gru_bptt, g, out,
                          (xg, h0, w_hh) if b_hh is None else (xg, h0, w_hh, b_hh))

    @staticmethod
    def kernel_vjp(g, out, xg, h0, w_hh, b_hh=None):
        return _kernel_vjp(GruLayerBackward, g, out,
                           (xg, h0, w_hh) if b_hh is None else (xg, h0, w_hh, b_hh))

    @staticmethod
    def jvp(dots, out, xg, h0, w_hh, b_hh=None):
        """The tangent recurrence, step by step in graphgrad ops."""
        dxg, dh, dw = dots[0], dots[1], dots[2]
        db = dots[3] if b_hh is not None else None
        k, hidden, steps = _TENSORS, h0.shape[-1], xg.shape[0]
        tangents = []
        for t in range(steps):
            h = h0 if t == 0 else out[t - 1]
            hg = h @ k.t(w_hh)
            if b_hh is not None:
                hg = hg + b_hh
            r, z, n, hn = _gru_parts(k, xg[t], hg, hidden)
            terms = [d for d in (None if dh is None else dh @ k.t(w_hh),
                                 None if dw is None else h @ k.t(dw), db) if d is not None]
            dhg = None
            for d in terms:
                dhg = d if dhg is None else dhg + d
            dx = None if dxg is None else dxg[t]
            parts = []
            for lo in (0, hidden, 2 * hidden):
                a = None if dx is None else dx[..., lo:lo + hidden]
                b = None if dhg is None else dhg[..., lo:lo + hidden]
                parts.append((a, b))
            dr = _sum(parts[0]) * r * (1 - r)
            dz = _sum(parts[1]) * z * (1 - z)
            dn_pre = dr * hn
            if parts[2][1] is not None:
                dn_pre = dn_pre + r * parts[2][1]
            if parts[2][0] is not None:
                dn_pre = dn_pre + parts[2][0]
            dn = dn_pre * (1 - n * n)
            dh_new = dn * (1 - z) + dz * (h - n)
            if dh is not None:
                dh_new = dh_new + z * dh
            dh = dh_new
            tangents.append(dh)
        return k.stack(tangents)

    @staticmethod
    def taylor(series, out, xg, h0, w_hh, b_hh=None):
        """The layer's composite step by step on jets."""
        k, hidden = _JETS, h0.shape[-1]
        xg, h, w_hh, *bias = jets(series, (xg, h0, w_hh) if b_hh is None
                                   else (xg, h0, w_hh, b_hh))
        w = k.t(w_hh)
        steps = []
        for t in range(xg.primal.shape[0]):
            hg = h @ w if not bias else h @ w + bias[0]
            r, z, n, _ = _gru_parts(k, xg[t], hg, hidden)
            h = n + z * (h - n)
            steps.append(h)
        return k.stack(steps).terms

    @classmethod
    def batch(cls, vals, bdims):
        return _batch_layer(cls, vals, bdims, n_weights=len(vals) - 2, folded=(1, 0))

    @classmethod
    def infer(cls, xg, h0, w_hh, b_hh=None) -> Spec:
        return Spec((xg.shape[0], *h0.shape), xp.result_type(xg.dtype, h0.dtype, w_hh.dtype))


class GruLayerBackward(_BackwardThroughTime):
    """``GruLayer``'s: the cotangents of (xg, h0, w_hh[, b_hh])."""

    holomorphic = True  # analytic: the complex step goes through it

    forward = staticmethod(gru_backward)

    @classmethod
    def infer(cls, g, out, xg, h0, w_hh, b_hh=None) -> Spec:
        size = sum(math.prod(s.shape) for s in (xg, h0, w_hh) + (() if b_hh is None else (b_hh,)))
        return Spec((size,), xg.dtype)


# ---- Elman RNN ---------------------------------------------------------------------------

def _elman_slope(h, nonlinearity: str):
    """The activation's derivative read from its output h: 1 - h^2 (tanh), h > 0 (relu)."""
    if nonlinearity == "tanh":
        return 1 - h * h
    return (h > 0).astype(h.dtype) if isinstance(h, xp.ndarray) else (h > 0).to(h.dtype)


def _rnn_bptt(k, grad, hs, xg, h0, w_hh, *, nonlinearity):
    """Gradients of an Elman layer's (L, N, H) outputs with respect to xg, h0, w_hh."""
    steps, hidden = hs.shape[0], h0.shape[-1]
    h_prev = k.stack([h0] + [hs[t] for t in range(steps - 1)])
    slope = _elman_slope(hs, nonlinearity)  # every step at once
    dh = None
    dpre = [None] * steps
    for t in range(steps - 1, -1, -1):
        dpre[t] = (grad[t] if dh is None else grad[t] + dh) * slope[t]
        dh = dpre[t] @ w_hh
    dxg = k.stack(dpre)
    rows = steps * h0.shape[0]
    dw = k.t(dxg.reshape(rows, hidden)) @ h_prev.reshape(rows, hidden)
    return dxg, dh, dw


class RnnLayer(Op):
    """An Elman RNN layer over a sequence: ``xg`` (L, N, H), the input projections with
    both biases (outside the activation, so they fold into one); initial ``h0`` (N, H);
    ``w_hh`` (H, H); ``nonlinearity`` 'tanh' or 'relu'. Returns the (L, N, H) outputs."""

    saves_output = True

    forward = staticmethod(rnn_forward)

    @staticmethod
    def vjp(g, out, xg, h0, w_hh, *, nonlinearity):
        return _layer_vjp(RnnLayerBackward, _rnn_bptt, g, out, (xg, h0, w_hh),
                          nonlinearity=nonlinearity)

    @staticmethod
    def kernel_vjp(g, out, xg, h0, w_hh, *, nonlinearity):
        return _kernel_vjp(RnnLayerBackward, g, out, (xg, h0, w_hh),
                           nonlinearity=nonlinearity)

    @staticmethod
    def jvp(dots, out, xg, h0, w_hh, *, nonlinearity):
        """The tangent recurrence: dh_t = act'(h_t) (dxg_t + dh_{t-1} W^T + h_{t-1} dW^T)."""
        dxg, dh, dw = dots
        slope = _elman_slope(out, nonlinearity)
        tangents = []
        for t in range(xg.shape[0]):
            h_prev = h0 if t == 0 else out[t - 1]
            dpre = _sum((None if dxg is None else dxg[t], None if dh is None else dh @ w_hh.mT))
            dpre = _sum((dpre, None if dw is None else h_prev @ dw.mT))
            dh = dpre * slope[t]
            tangents.append(dh)
        return Stack.apply(*tangents, dim=0)

    @staticmethod
    def taylor(series, out, xg, h0, w_hh, *, nonlinearity):
        """The layer's composite, act(xg_t + h W^T), step by step on jets."""
        k = _JETS
        act = k.tanh if nonlinearity == "tanh" else k.relu
        xg, h, w_hh = jets(series, (xg, h0, w_hh))
        w = k.t(w_hh)
        steps = []
        for t in range(xg.primal.shape[0]):
            h = act(xg[t] + h @ w)
            steps.append(h)
        return k.stack(steps).terms

    @classmethod
    def batch(cls, vals, bdims, **params):
        return _batch_layer(cls, vals, bdims, n_weights=1, folded=(1, 0), **params)

    @classmethod
    def infer(cls, xg, h0, w_hh, *, nonlinearity) -> Spec:
        return Spec((xg.shape[0], *h0.shape), xp.result_type(xg.dtype, h0.dtype, w_hh.dtype))


class RnnLayerBackward(_BackwardThroughTime):
    """``RnnLayer``'s: the cotangents of (xg, h0, w_hh)."""

    forward = staticmethod(rnn_backward)

    @classmethod
    def infer(cls, g, out, xg, h0, w_hh, **_) -> Spec:
        return Spec((sum(math.prod(s.shape) for s in (xg, h0, w_hh)),), xg.dtype)


# ---- shared helpers ----------------------------------------------------------------------

def _layer_vjp(backward, bptt, g, out, args: tuple, **params) -> tuple:
    """A layer op's vjp: in a plain eager backward its ``...Backward`` op on arrays (one
    op, nothing recorded), otherwise the same BPTT program as graphgrad ops."""
    if array_backward():
        return _kernel_vjp(backward, g, out, args, **params)
    return tuple(bptt(_TENSORS, g, out, *args, **params))


def _kernel_vjp(backward, g, out, args: tuple, **params) -> tuple:
    """A layer op's ``kernel_vjp`` (ops/fused.py): its ``...Backward`` op, whose packed
    cotangents ``unpack`` splits. A compiled backward uses it: there the BPTT program
    would be every step's ops, unrolled into the graph."""
    flat = backward.apply(g, out, *args, **params)
    return tuple(unpack(flat, [tuple(v.shape) for v in args]))


def _sum(pair):
    a, b = pair
    return a if b is None else b if a is None else a + b


def _batch_layer(cls, vals, bdims, n_weights: int, folded: tuple, **params):
    """vmap of a layer op: with unbatched weights the batch joins the examples (dim 1
    of the sequence inputs, dim 0 of the states); otherwise one call per batch entry."""
    if all(d is None for d in bdims[len(bdims) - n_weights:]):
        size = next(v.shape[d] for v, d in zip(vals, bdims, strict=True) if d is not None)
        args = []
        for v, d, ex in zip(vals, bdims, folded + (None,) * n_weights, strict=True):
            if ex is None:
                args.append(v)
                continue
            v = to_front(v, d) if d is not None else v.unsqueeze(0).expand(size, *v.shape)
            if ex == 1:  # (B, L, N, ...) -> (L, B*N, ...)
                v = v.movedim(0, 1)
                v = v.reshape(v.shape[0], size * v.shape[2], *v.shape[3:])
            else:
                v = v.reshape(size * v.shape[1], *v.shape[2:])
            args.append(v)
        y = cls.apply(*args, **params)
        return y.reshape(y.shape[0], size, -1, *y.shape[2:]), 1
    return by_example(cls, vals, bdims, **params)


