"""Layer ``ops``: the array kernels of the recurrent layer ops (``ops/recurrent.py``): the
forward of ``LstmLayer``, ``GruLayer`` and ``RnnLayer`` and the backward through time of
their ``...Backward`` ops, on NumPy arrays.

They are written for the eager hot path: every buffer of the sequence is allocated once
and each step writes into it (``out=``), so a step is one small GEMM and a handful of
in-place ufuncs. The factors of the backward that do not depend on the incoming
gradient are computed for all steps at once, before the loop; the weight gradients are
one GEMM over the whole sequence after it. The cotangents are written straight into the
packed 1-D buffer the backward op returns.

The LSTM and GRU forwards keep what their backward reads (the activated gates; the
GRU's ``W_hn h + b_hn``) right after their output, in the same allocation, as PyTorch
keeps its gates for backward: the backward then runs no gate GEMM. It is found again
from the output array through ``_SAVED``, which holds only allocations made here; an
output that is not the start of one (a copy, a batched reshape) has its gates
recomputed, by one GEMM over the sequence.

A sigmoid is computed as ``0.5 tanh(0.5 x) + 0.5``: one transcendental ufunc per step for
all gates; the halving is folded into copies of the weights and inputs (exact: a power
of two).
"""

from __future__ import annotations

import math
import weakref

from graphgrad.backend import xp
from graphgrad.tensor import is_grad_enabled

__all__ = ["lstm_forward", "lstm_backward", "gru_forward", "gru_backward", "rnn_forward",
           "rnn_backward"]

# buffers made by a forward here, by id: a backward trusts the gates next to an output
# only when the output's base is one of them
_SAVED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _with_kept(out_shape: tuple, kept_shape: tuple, dtype) -> tuple:
    """(the output, what the backward reads): two C-contiguous arrays in one allocation,
    the output first. With gradients off no backward can read them: two allocations,
    the second freed with the forward's locals (not held as long as the output)."""
    if not is_grad_enabled():
        return xp.empty(out_shape, dtype=dtype), xp.empty(kept_shape, dtype=dtype)
    size = math.prod(out_shape)
    buf = xp.empty(size + math.prod(kept_shape), dtype=dtype)
    _SAVED[id(buf)] = buf
    return buf[:size].reshape(out_shape), buf[size:].reshape(kept_shape)


def _kept(out, kept_shape: tuple):
    """What the forward kept behind its output ``out``, or None: ``out`` is not the
    start of one of its buffers (a copy, a batched reshape)."""
    base = out.base
    if base is None or _SAVED.get(id(base)) is not base or not out.flags.c_contiguous or \
            base.size != out.size + math.prod(kept_shape) or \
            base.__array_interface__["data"][0] != out.__array_interface__["data"][0]:
        return None
    return base[out.size:].reshape(kept_shape)


def _flat(steps: int, rows: int, hidden: int, arrays, dtype, gates: int):
    """The packed cotangent buffer of (xg, *arrays): its views, xg's as (L, N, gates*H)."""
    sizes = [steps * rows * gates * hidden] + [math.prod(a.shape) for a in arrays]
    flat = xp.empty(sum(sizes), dtype=dtype)
    views, at = [], 0
    for size in sizes:
        views.append(flat[at:at + size])
        at += size
    views[0] = views[0].reshape(steps, rows, gates * hidden)
    return flat, views


def _sigmoid_scale(hidden: int, gates: int, sigmoid_gates, dtype):
    """(G*H,) of 0.5 where a gate is a sigmoid, 1 elsewhere."""
    s = xp.ones(gates * hidden, dtype=dtype)
    for k in sigmoid_gates:
        s[k * hidden:(k + 1) * hidden] = 0.5
    return s


def _weight_grad(dw, dpre, seq, first):
    """dw (G*H, H) = sum_t dpre_t^T h_{t-1}: one GEMM over steps 1.. (the states are a
    strided view of the output) plus step 0's product with the initial state."""
    steps, rows, width = dpre.shape
    if steps > 1:
        xp.matmul(dpre[1:].reshape(-1, width).T, seq[:-1].reshape(-1, seq.shape[-1]), out=dw)
        dw += dpre[0].T @ first
    else:
        xp.matmul(dpre[0].T, first, out=dw)


# ---- LSTM ------------------------------------------------------------------------------
# The LSTM steps run gate-major: a step's gates are (4, N, H), each gate a contiguous
# (N, H) block (in (N, 4H) a gate is H strided columns, and a ufunc on such a view costs
# ~3x one on a contiguous block); the recurrent product is then a batch of four (N, H) x
# (H, H) GEMMs, as fast as the one (N, H) x (H, 4H). The kept gates and c_t are
# (L, 5, N, H).

def _lstm_activate(s, scale, add):
    """Gates (i, f, g, o) from halved-where-sigmoid pre-activations (..., 4H), in place."""
    xp.tanh(s, out=s)
    s *= scale
    s += add


def _gate_major(a, gates: int, hidden: int):
    """(..., N, G*H) viewed as (..., G, N, H) (a view, not a copy)."""
    return xp.moveaxis(a.reshape(*a.shape[:-1], gates, hidden), -2, -3)


def lstm_forward(xg, h0, c0, w_hh):
    """(L, N, 2H) of [h_t | c_t]; each step's activated gates (i, f, g, o) and c_t are
    kept after it (``_with_kept``), gate-major: (L, 5, N, H)."""
    steps, hidden = xg.shape[0], h0.shape[-1]
    dtype = xp.result_type(xg, h0, c0, w_hh)
    lead = h0.shape[:-1]
    h, c = h0.reshape(-1, hidden), c0.reshape(-1, hidden)
    rows = h.shape[0]
    out, kept = _with_kept((steps, rows, 2 * hidden), (steps, 5, rows, hidden), dtype)
    gates, cs, hs = kept[:, :4], kept[:, 4], out[..., :hidden]
    scale = _sigmoid_scale(1, 4, (0, 1, 3), dtype)[:, None, None]  # (4, 1, 1)
    xgm = _gate_major(xg.reshape(steps, rows, 4 * hidden), 4, hidden)
    for k in range(4):  # (by gate with a scalar: ~10% less than one broadcast)
        if k == 2:
            gates[:, k] = xgm[:, k]
        else:
            xp.multiply(xgm[:, k], 0.5, out=gates[:, k])
    # each gate's (H, H) block of W^T, halved where a sigmoid: h @ w is (4, N, H)
    w = xp.ascontiguousarray((w_hh.reshape(4, hidden, hidden) * scale).transpose(0, 2, 1),
                             dtype=dtype)
    mm, mul, tanh = xp.matmul, xp.multiply, xp.tanh
    tmp = xp.empty((4, rows, hidden), dtype=dtype)
    tc = xp.empty((rows, hidden), dtype=dtype)
    for t in range(steps):  # (the recurrence: nothing here can be batched over t)
        s = gates[t]
        mm(h, w, out=tmp)
        s += tmp
        tanh(s, out=s)
        a, o = s[:2], s[3]  # the sigmoids: 0.5 tanh + 0.5 (by blocks: ~2x a broadcast)
        a *= 0.5
        a += 0.5
        o *= 0.5
        o += 0.5
        ct = cs[t]
        mul(s[1], c, out=ct)
        mul(s[0], s[2], out=tc)
        ct += tc
        tanh(ct, out=tc)
        mul(s[3], tc, out=hs[t])
        h, c = hs[t], ct
    out[..., hidden:] = cs
    return out.reshape(steps, *lead, 2 * hidden)


def _lstm_kept_of(out, xg, h0, w_hh, hidden: int):
    """(L, 5, N, H): the activated gates and c_t; the forward's, or recomputed by one
    GEMM."""
    steps, rows = out.shape[:2]
    kept = _kept(out, (steps, 5, rows, hidden))
    if kept is not None:
        return kept
    dtype = out.dtype
    scale = _sigmoid_scale(hidden, 4, (0, 1, 3), dtype)
    h_prev = xp.concatenate([h0.reshape(1, -1, hidden), out[:-1, :, :hidden]])
    s = xp.matmul(h_prev, (w_hh * scale[:, None]).T.astype(dtype))
    s += xg.reshape(steps, -1, 4 * hidden) * scale
    _lstm_activate(s, scale, 1 - scale)
    kept = xp.empty((steps, 5, rows, hidden), dtype=dtype)
    kept[:, :4] = _gate_major(s, 4, hidden)
    kept[:, 4] = out[..., hidden:]
    return kept


def lstm_backward(g, out, xg, h0, c0, w_hh):
    """The cotangents of (xg, h0, c0, w_hh), packed in one 1-D buffer. Each step's
    factors are computed in the loop, on that step's contiguous (N, H) blocks."""
    steps, hidden = xg.shape[0], h0.shape[-1]
    dtype = out.dtype
    h0, c0 = h0.reshape(-1, hidden), c0.reshape(-1, hidden)
    rows = h0.shape[0]
    out = out.reshape(steps, rows, 2 * hidden)
    g = g.reshape(steps, rows, 2 * hidden)
    kept = _lstm_kept_of(out, xg, h0, w_hh, hidden)
    gates, cs = kept[:, :4], kept[:, 4]
    flat, (dxg, dh0, dc0, dw) = _flat(steps, rows, hidden, (h0, c0, w_hh), dtype, 4)
    dxg_major = _gate_major(dxg, 4, hidden)  # (L, 4, N, H) view of dxg
    gh, gc = g[..., :hidden], g[..., hidden:]
    w = xp.ascontiguousarray(w_hh, dtype=dtype)
    dh = xp.zeros((rows, hidden), dtype=dtype)
    dc = xp.zeros((rows, hidden), dtype=dtype)
    dct, ght, tc, via_h = (xp.empty((rows, hidden), dtype=dtype) for _ in range(4))
    d = xp.empty((4, rows, hidden), dtype=dtype)
    di, df, dg, do = d
    mm, mul, sub, add, tanh = xp.matmul, xp.multiply, xp.subtract, xp.add, xp.tanh
    for t in range(steps - 1, -1, -1):
        s = gates[t]
        i, f, gt, o = s
        sub(1, s, out=d)  # s (1 - s): each sigmoid's slope (g's replaced below)
        d *= s
        mul(gt, gt, out=dg)
        sub(1, dg, out=dg)
        di *= gt  # per unit of dc: i, f, g's pre-activation derivatives
        df *= c0 if t == 0 else cs[t - 1]
        dg *= i
        tanh(cs[t], out=tc)
        do *= tc  # per unit of dh
        mul(tc, tc, out=via_h)  # dc/dh = o (1 - tanh(c)^2)
        sub(1, via_h, out=via_h)
        via_h *= o
        add(gh[t], dh, out=ght)
        mul(ght, via_h, out=dct)
        dct += gc[t]
        dct += dc
        di *= dct  # (three products: less than one broadcast over the three)
        df *= dct
        dg *= dct
        do *= ght
        mul(dct, f, out=dc)
        dxg_major[t] = d
        mm(dxg[t], w, out=dh)
    dh0[...] = dh.reshape(-1)
    dc0[...] = dc.reshape(-1)
    _weight_grad(dw.reshape(4 * hidden, hidden), dxg, out[..., :hidden], h0)
    return flat


# ---- GRU -------------------------------------------------------------------------------
# Gate-major as the LSTM: a step's (r, z, n, hn) are (4, N, H), kept as (L, 4, N, H).

def gru_forward(xg, h0, w_hh, b_hh=None):
    """(L, N, H) outputs; each step's r, z, n and hn = W_hn h + b_hn (which the reset
    gate multiplies) are kept after them, gate-major: (L, 4, N, H)."""
    steps, hidden = xg.shape[0], h0.shape[-1]
    dtype = xp.result_type(xg, h0, w_hh) if b_hh is None else \
        xp.result_type(xg, h0, w_hh, b_hh)
    lead = h0.shape[:-1]
    h = h0.reshape(-1, hidden)
    rows = h.shape[0]
    xg = _gate_major(xg.reshape(steps, rows, 3 * hidden), 3, hidden)  # (L, 3, N, H) view
    hs, parts = _with_kept((steps, rows, hidden), (steps, 4, rows, hidden), dtype)
    rz, ns, hns = parts[:, :2], parts[:, 2], parts[:, 3]
    # r and z: 0.5 (xg + b_hh) for the whole sequence; the recurrent half added per step
    if b_hh is None:
        xp.multiply(xg[:, :2], 0.5, out=rz)
    else:
        xp.add(xg[:, :2], b_hh[:2 * hidden].reshape(2, 1, hidden), out=rz)
        rz *= 0.5
    b_n = None if b_hh is None else b_hh[2 * hidden:]
    xn = xg[:, 2]
    scale = _sigmoid_scale(1, 3, (0, 1), dtype)[:, None, None]
    w = xp.ascontiguousarray((w_hh.reshape(3, hidden, hidden) * scale).transpose(0, 2, 1),
                             dtype=dtype)
    mm, mul, add, sub, tanh = xp.matmul, xp.multiply, xp.add, xp.subtract, xp.tanh
    tmp = xp.empty((3, rows, hidden), dtype=dtype)
    for t in range(steps):
        mm(h, w, out=tmp)
        a = rz[t]
        a += tmp[:2]
        tanh(a, out=a)
        a *= 0.5
        a += 0.5
        hn = hns[t]
        if b_n is None:
            hn[...] = tmp[2]
        else:
            add(tmp[2], b_n, out=hn)
        n = ns[t]
        mul(a[0], hn, out=n)
        n += xn[t]
        tanh(n, out=n)
        ht = hs[t]
        sub(h, n, out=ht)  # h' = n + z (h - n)
        ht *= a[1]
        ht += n
        h = ht
    return hs.reshape(steps, *lead, hidden)


def _gru_parts_of(out, xg, h0, w_hh, b_hh, hidden: int):
    """(L, 4, N, H) of r, z, n, hn: the forward's, or recomputed by one GEMM."""
    steps, rows = out.shape[:2]
    parts = _kept(out, (steps, 4, rows, hidden))
    if parts is not None:
        return parts
    h_prev = xp.concatenate([h0.reshape(1, rows, hidden), out[:-1]])
    hg = xp.matmul(h_prev, w_hh.T.astype(out.dtype))
    if b_hh is not None:
        hg += b_hh
    xg = xg.reshape(steps, rows, 3 * hidden)
    parts = xp.empty((steps, 4, rows, hidden), dtype=out.dtype)
    rz = parts[:, :2]
    xp.add(_gate_major(xg[..., :2 * hidden], 2, hidden),
           _gate_major(hg[..., :2 * hidden], 2, hidden), out=rz)
    rz *= 0.5
    xp.tanh(rz, out=rz)
    rz *= 0.5
    rz += 0.5
    parts[:, 3] = hg[..., 2 * hidden:]
    n = parts[:, 2]
    xp.multiply(rz[:, 0], parts[:, 3], out=n)
    n += xg[..., 2 * hidden:]
    xp.tanh(n, out=n)
    return parts


def gru_backward(g, out, xg, h0, w_hh, b_hh=None):
    """The cotangents of (xg, h0, w_hh[, b_hh]), packed in one 1-D buffer."""
    steps, hidden = xg.shape[0], h0.shape[-1]
    dtype = out.dtype
    h0 = h0.reshape(-1, hidden)
    rows = h0.shape[0]
    out = out.reshape(steps, rows, hidden)
    g = g.reshape(steps, rows, hidden)
    parts = _gru_parts_of(out, xg, h0, w_hh, b_hh, hidden)
    rest = (h0, w_hh) if b_hh is None else (h0, w_hh, b_hh)
    flat, (dxg, dh0, dw, *db) = _flat(steps, rows, hidden, rest, dtype, 3)
    dxg_major = _gate_major(dxg, 3, hidden)
    mul, sub, add, mm = xp.multiply, xp.subtract, xp.add, xp.matmul
    dhn = xp.empty((steps, rows, hidden), dtype=dtype)  # each step's dn r: hn's cotangent
    w = xp.ascontiguousarray(w_hh, dtype=dtype)
    w_rz, w_n = w[:2 * hidden], w[2 * hidden:]
    dh = xp.zeros((rows, hidden), dtype=dtype)
    ght, tmp, part = (xp.empty((rows, hidden), dtype=dtype) for _ in range(3))
    d = xp.empty((3, rows, hidden), dtype=dtype)
    dr, dz, dn = d
    for t in range(steps - 1, -1, -1):
        r, z, n, hn = parts[t]
        add(g[t], dh, out=ght)
        mul(n, n, out=dn)  # dn = (1 - n^2)(1 - z) gh
        sub(1, dn, out=dn)
        sub(1, z, out=tmp)
        dn *= tmp
        dn *= ght
        mul(tmp, z, out=dz)  # dz = z (1 - z)(h_prev - n) gh
        sub(h0 if t == 0 else out[t - 1], n, out=tmp)
        dz *= tmp
        dz *= ght
        sub(1, r, out=dr)  # dr = r (1 - r) hn dn
        dr *= r
        dr *= hn
        dr *= dn
        mul(dn, r, out=dhn[t])
        dxg_major[t] = d
        mul(ght, z, out=dh)  # dh = gh z + [dr dz] W_rz + dhn W_n
        mm(dxg[t, :, :2 * hidden], w_rz, out=part)
        dh += part
        mm(dhn[t], w_n, out=part)
        dh += part
    dh0[...] = dh.reshape(-1)
    dw = dw.reshape(3 * hidden, hidden)
    _weight_grad(dw[:2 * hidden], dxg[..., :2 * hidden], out, h0)
    _weight_grad(dw[2 * hidden:], dhn, out, h0)
    if db:
        db[0][:2 * hidden] = dxg[..., :2 * hidden].sum((0, 1))
        db[0][2 * hidden:] = dhn.sum((0, 1))
    return flat


# ---- Elman RNN ---------------------------------------------------------------------------

def rnn_forward(xg, h0, w_hh, *, nonlinearity: str):
    """(L, N, H) outputs of act(xg_t + h_{t-1} W^T), each step written in place."""
    steps = xg.shape[0]
    dtype = xp.result_type(xg, h0, w_hh)
    out = xp.empty((steps, *h0.shape), dtype=dtype)
    h = h0
    w = xp.ascontiguousarray(w_hh.T, dtype=dtype)
    mm, tanh = xp.matmul, nonlinearity == "tanh"
    for t in range(steps):
        ht = out[t]
        mm(h, w, out=ht)
        ht += xg[t]
        if tanh:
            xp.tanh(ht, out=ht)
        else:
            xp.maximum(ht, 0, out=ht)
        h = ht
    return out


def rnn_backward(g, out, xg, h0, w_hh, *, nonlinearity: str):
    """The cotangents of (xg, h0, w_hh), packed in one 1-D buffer."""
    steps, hidden = xg.shape[0], h0.shape[-1]
    dtype = out.dtype
    h0 = h0.reshape(-1, hidden)
    rows = h0.shape[0]
    out = out.reshape(steps, rows, hidden)
    g = g.reshape(steps, rows, hidden)
    flat, (dpre, dh0, dw) = _flat(steps, rows, hidden, (h0, w_hh), dtype, 1)
    if nonlinearity == "tanh":  # the activation's slope, read from its output
        xp.multiply(out, out, out=dpre)
        xp.subtract(1, dpre, out=dpre)
    else:
        xp.greater(out, 0, out=dpre)
    w = xp.ascontiguousarray(w_hh, dtype=dtype)
    dh = xp.zeros((rows, hidden), dtype=dtype)
    mm, add = xp.matmul, xp.add
    for t in range(steps - 1, -1, -1):
        d = dpre[t]
        add(g[t], dh, out=dh)
        d *= dh
        mm(d, w, out=dh)
    dh0[...] = dh.reshape(-1)
    _weight_grad(dw.reshape(hidden, hidden), dpre, out, h0)
    return flat
