"""Layer ``ops``: the array kernels under ``convolution.py``'s two ops, for any number
of spatial dims, groups, stride, padding, dilation and output_padding.

Two ways to run the taps of a kernel, chosen by the input channels per group:

- few (below ``_TAP_CHANNELS``): im2col, the padded input seen through a strided view
  as every window under every output position, copied once per chunk of examples into
  columns, then one GEMM per example and group contracting over (channels x taps).
- many: tap by tap. The padded input is split by the residue of its positions mod
  stride into phase arrays; tap t then reads phase (dilation * t) mod stride from
  (dilation * t) // stride on, which in the flattened phase array is one contiguous
  slice, a GEMM operand as it is. Each tap's GEMM contracts over enough channels to
  run at BLAS speed, and nothing of prod(k) times the input's size is copied. The
  output (or the output gradient, for the weight gradient) lives on the same flattened
  grid; positions past its edge are cut off (or zeros).

``correlate`` is a plain convolution and ``weight_grad`` its weight gradient, either
way. ``transposed`` runs by output phases: output position u = stride * i + dilation * t
gets input i through tap t, so the outputs of one residue of u mod stride (every
stride-th position) receive only the taps with dilation * t of that residue, and each
phase is a stride-1 ``correlate`` of the input with those taps flipped, written into
the output's strided view. Every multiply is a useful one and nothing is scattered (the
older GEMM into columns then col2im read and added a buffer of C_out * prod(k) times
the input, a training step's largest temporary: 2.4x PyTorch's time for
``conv_transpose2d`` in bench/models.py, now under 1x).
"""

from __future__ import annotations

import itertools
import math

from graphgrad.backend import xp

__all__ = ["out_sizes", "transposed_sizes", "correlate", "transposed", "weight_grad"]


def out_sizes(size, k, stride, padding, dilation) -> tuple:
    return tuple((e + 2 * p - d * (ki - 1) - 1) // s + 1
                 for e, ki, s, p, d in zip(size, k, stride, padding, dilation, strict=True))


def transposed_sizes(size, k, stride, padding, dilation, output_padding) -> tuple:
    return tuple((e - 1) * s - 2 * p + d * (ki - 1) + op + 1 for e, ki, s, p, d, op in
                 zip(size, k, stride, padding, dilation, output_padding, strict=True))


# the unfolded columns of one chunk of examples: at most this (or one example's). They
# are a step's largest temporary: a small CNN's second layer unfolds to 4.5 MiB for a
# batch of 64, more than its activations; 2 MiB keeps its GEMMs thousands of columns wide
_COLUMNS_BYTES = 2 << 20


def _chunks(n_b: int, per_example: int, dtype):
    """Ranges of examples whose columns (``per_example`` elements each) fit in
    ``_COLUMNS_BYTES``: peak memory stays bounded, each GEMM stays large. The chunks
    are of equal size (up to one), so no chunk is a sliver."""
    step = max(1, _COLUMNS_BYTES // max(1, per_example * xp.dtype(dtype).itemsize))
    count = -(-n_b // step)
    if count == 0:  # an empty batch: nothing to compute
        return []
    bounds = [n_b * i // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _pad(x, lo, hi):
    """(N, C, *size) with ``lo[i]`` zeros before and ``hi[i]`` after spatial dim i; a
    negative amount cuts that many positions off instead. A view when nothing is added."""
    size = x.shape[2:]
    if all(a <= 0 for a in lo) and all(b <= 0 for b in hi):
        return x[(slice(None), slice(None),
                  *(slice(-a, e + b) for a, b, e in zip(lo, hi, size, strict=True)))]
    total = tuple(a + e + b for a, b, e in zip(lo, hi, size, strict=True))
    padded = xp.zeros((*x.shape[:2], *total), dtype=x.dtype)
    # target position j holds source position j - lo
    dst = tuple(slice(max(0, a), min(t, a + e)) for a, e, t in zip(lo, size, total, strict=True))
    if all(s.start < s.stop for s in dst):
        padded[(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *(
            slice(s.start - a, s.stop - a) for s, a in zip(dst, lo, strict=True)))]
    return padded


def _columns(x, k, stride, dilation, out, groups, per_example: bool = True):
    """im2col of an already padded (N, C, *size): (N, groups, C/groups * prod(k),
    prod(out)), rows (channel, kernel offsets), so that the GEMMs write the (N, C_out,
    ...) output in place, with no transpose after them; or, without ``per_example``,
    (groups, C/groups * prod(k), N * prod(out)), columns (example, output position)."""
    n_b, c = x.shape[:2]
    x = xp.ascontiguousarray(x)
    cg = c // groups
    sn, sc, *sd = x.strides
    windows = xp.lib.stride_tricks.as_strided(
        x, shape=(groups, cg, *k, n_b, *out),
        strides=(cg * sc, sc, *(a * d for a, d in zip(sd, dilation, strict=True)), sn,
                 *(a * s for a, s in zip(sd, stride, strict=True))), writeable=False)
    if per_example:  # one copy either way
        windows = xp.moveaxis(windows, 2 + len(k), 0)
        return windows.reshape(n_b, groups, cg * math.prod(k), math.prod(out))
    return windows.reshape(groups, cg * math.prod(k), n_b * math.prod(out))


def _by_group(a, groups):
    """(N, C, *sp) -> (groups, C/groups, N * prod(sp)): a GEMM operand per group."""
    n_b, c = a.shape[:2]
    a = a.reshape(n_b, groups, c // groups, -1).transpose(1, 2, 0, 3)
    return a.reshape(groups, c // groups, -1)


def correlate(x, w, stride, padding, dilation, groups, out=None):
    """A plain convolution (no bias) of (N, C_in, *size) with (C_out, C_in/groups, *k).
    ``out``, if given, is the (N, C_out, *out_size) array (any strides, e.g. one phase
    of a larger output) that receives the result."""
    n_b = x.shape[0]
    k = w.shape[2:]
    w_rows = w.reshape(groups, w.shape[0] // groups, -1)
    dtype = xp.result_type(x, w)
    size = out_sizes(x.shape[2:], k, stride, padding, dilation)
    y = xp.empty((n_b, w.shape[0], *size), dtype=dtype) if out is None else out
    if x.shape[1] // groups >= _TAP_CHANNELS:
        _correlate_by_taps(x, w, stride, padding, dilation, groups, y)
        return y
    x = _pad(x, padding, padding)
    for lo, hi in _chunks(n_b, x.shape[1] * math.prod(k) * math.prod(size), dtype):
        cols = _columns(x[lo:hi], k, stride, dilation, size, groups)
        # (G, O/G, C/G K) @ (n, G, C/G K, L): one GEMM per example and group
        if out is None:  # written straight into y's (n, O, ...) memory
            xp.matmul(w_rows, cols, out=y[lo:hi].reshape(hi - lo, groups, -1, math.prod(size)))
        else:
            y[lo:hi] = xp.matmul(w_rows, cols).reshape(hi - lo, w.shape[0], *size)
        del cols  # before the next chunk's: never two chunks' columns at once
    return y


# from this many input channels per group on, a convolution runs tap by tap: each tap's
# GEMM then contracts over enough channels to run at BLAS speed, and no columns (prod(k)
# times the input) are copied. Below, one GEMM over (channels x taps) of columns wins.
_TAP_CHANNELS = 32


def _correlate_by_taps(x, w, stride, padding, dilation, groups, y):
    """``correlate`` into ``y`` as one GEMM per tap, of the tap's weight with a slice of
    the input's phase arrays, summed on the phase grid and then cut to the output."""
    n_b, c = x.shape[:2]
    o, size = w.shape[0], y.shape[2:]
    k = w.shape[2:]
    cg, og = c // groups, o // groups
    grid, flat = _grid(x.shape[2:], stride, padding)
    span = sum((e - 1) * f for e, f in zip(size, flat, strict=True)) + 1
    phases = list(itertools.product(*(range(s) for s in stride)))
    # (prod(k), G, O/G, C/G): each tap's weight one contiguous matrix per group
    w_taps = xp.moveaxis(w.reshape(groups, og, cg, -1), -1, 0).copy()
    for lo, hi in _chunks(n_b, (c * len(phases) + o) * math.prod(grid), y.dtype):
        n = hi - lo
        split = _split(x[lo:hi], stride, padding, grid, phases)
        split = split.reshape(len(phases), n, groups, cg, -1)
        acc = xp.zeros((n, groups, og, math.prod(grid)), dtype=y.dtype)
        part = acc[..., :span]  # grid positions past the output take garbage, cut below
        for i, (_, phase, start) in enumerate(_taps(k, stride, dilation, phases, flat)):
            part += xp.matmul(w_taps[i], split[phase, ..., start:start + span])
        del split
        y[lo:hi] = acc.reshape(n, o, *grid)[(slice(None), slice(None),
                                            *(slice(0, e) for e in size))]
        del acc


def _phase(r, e, k, s, p, d, size):
    """One dim of output phase ``r`` (full-output positions u = r mod s) of a transposed
    convolution of an ``e``-long input into ``size`` outputs (u = output position + p):
    (first output position, step of its kernel taps, first tap, their dilation in the
    input, input padding before, after), or None when no tap reaches this phase."""
    v0 = (r - p) % s  # the first output position in the phase
    cnt = len(range(v0, size, s))
    g = math.gcd(d, s)
    # taps t with d * t = r (mod s) repeat every s / g taps, each d / g inputs further
    t0 = next((t for t in range(s // g) if (d * t) % s == r), None)
    if t0 is None or t0 >= k:
        return None
    step, dq = s // g, d // g
    m = len(range(t0, k, step))
    j0 = (v0 + p - r) // s  # the phase's first output counted within the phase
    # phase output j takes input j - (d t0 // s) - m' dq from tap t0 + m' step; flipped,
    # a correlation of the input padded by ``lo`` in front
    lo = d * t0 // s + (m - 1) * dq - j0
    return v0, step, t0, dq, lo, cnt + (m - 1) * dq - e - lo


def transposed(x, w, stride, padding, dilation, output_padding, groups):
    """A transposed convolution (no bias) of (N, C_in, *size) with (C_in, C_out/groups,
    *k): one ``correlate`` per output phase into that phase's strided view."""
    n_b, c_in = x.shape[:2]
    k = w.shape[2:]
    nd = len(k)
    size = transposed_sizes(x.shape[2:], k, stride, padding, dilation, output_padding)
    c_out = w.shape[1] * groups
    y = xp.empty((n_b, c_out, *size), dtype=xp.result_type(x, w))
    # as a convolution's weight: (C_out, C_in/G, *k), output channels in group order
    w = w.reshape(groups, c_in // groups, w.shape[1], *k).swapaxes(1, 2).reshape(
        c_out, c_in // groups, *k)
    everything = (slice(None), slice(None))
    for r in itertools.product(*(range(s) for s in stride)):
        dims = [_phase(*a) for a in zip(r, x.shape[2:], k, stride, padding, dilation, size,
                                         strict=True)]
        where = tuple(slice((ri - p) % s, None, s)
                      for ri, p, s in zip(r, padding, stride, strict=True))
        target = y[(*everything, *where)]
        if target.size == 0:
            continue
        if any(dim is None for dim in dims):
            target[...] = 0  # output_padding, or a dilation sharing a factor with the stride
            continue
        taps = w[(*everything, *(slice(t0, None, step) for _, step, t0, *_ in dims))]
        taps = taps[(*everything, *(slice(None, None, -1),) * nd)]
        xq = _pad(x, [dim[4] for dim in dims], [dim[5] for dim in dims])
        correlate(xq, taps, (1,) * nd, (0,) * nd, tuple(dim[3] for dim in dims), groups,
                  out=target)
    return y


def _grid(size, stride, padding):
    """The length of the padded input's phases per dim: the residue-0 phase's, the longest;
    and the element strides of that grid flattened."""
    grid = tuple(-(-(e + 2 * p) // s) for e, p, s in zip(size, padding, stride, strict=True))
    return grid, [math.prod(grid[i + 1:]) for i in range(len(grid))]


def _split(x, stride, padding, grid, phases):
    """(len(phases), N, C, *grid): phase r holds the padded input's position s * j + r
    at j, zeros past the input. A tap t then reads phase (d * t) mod s from offset
    (d * t) // s on: in the flattened grid, a contiguous slice. With stride 1 the one
    phase is the padded input itself (no copy when there is no padding either)."""
    if all(s == 1 for s in stride):
        return xp.ascontiguousarray(_pad(x, padding, padding))[None]
    split = xp.empty((len(phases), *x.shape[:2], *grid), dtype=x.dtype)
    everything = (slice(None), slice(None))
    for i, r in enumerate(phases):
        first = [(ri - p) % s for ri, p, s in zip(r, padding, stride, strict=True)]
        src = x[(*everything, *(slice(f, None, s) for f, s in zip(first, stride, strict=True)))]
        at = [slice((f + p - ri) // s, (f + p - ri) // s + e) for f, p, ri, s, e in
              zip(first, padding, r, stride, src.shape[2:], strict=True)]
        split[(i, *everything, *at)] = src
        # zeros around it, slab by slab (an empty + these is faster than zeros + copy)
        for dim, a in enumerate(at):
            before = (slice(None),) * dim
            split[(i, *everything, *before, slice(0, a.start))] = 0
            split[(i, *everything, *before, slice(a.stop, None))] = 0
    return split


def _taps(k, stride, dilation, phases, flat):
    """Per kernel tap: (its index, its phase, its offset in the flattened grid)."""
    for t in itertools.product(*(range(ki) for ki in k)):
        at = [d * ti for d, ti in zip(dilation, t, strict=True)]
        yield (t, phases.index(tuple(a % s for a, s in zip(at, stride, strict=True))),
               sum(a // s * f for a, s, f in zip(at, stride, flat, strict=True)))


def weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    """The weight gradient (C_out, C_in/groups, *kernel_size) of a convolution of
    (N, C_in, *size) whose output gradient is ``g`` (N, C_out, *out): one GEMM of ``g``
    with the input's columns, or per tap one batched GEMM of ``g`` with a slice of the
    input's phase arrays."""
    n_b, c = x.shape[:2]
    o, out = g.shape[1], tuple(g.shape[2:])
    k = tuple(kernel_size)
    cg, og = c // groups, o // groups
    dtype = xp.result_type(x, g)
    gw = xp.zeros((groups, og, cg, *k), dtype=dtype)
    if gw.size == 0 or x.size == 0 or g.size == 0:
        return gw.reshape(o, cg, *k)
    grid, flat = _grid(x.shape[2:], stride, padding)
    span = sum((e - 1) * f for e, f in zip(out, flat, strict=True)) + 1
    phases = list(itertools.product(*(range(s) for s in stride)))
    everything = (slice(None), slice(None))
    if cg < _TAP_CHANNELS:  # few channels: one GEMM per group over im2col columns
        x = _pad(x, padding, padding)
        # a chunk holds its columns and the copy of its g that _by_group makes
        per_example = (c * math.prod(k) + o) * math.prod(out)
        for lo, hi in _chunks(n_b, per_example, dtype):
            cols = _columns(x[lo:hi], k, stride, dilation, out, groups, per_example=False)
            gw += xp.matmul(_by_group(g[lo:hi], groups), cols.swapaxes(-1, -2)).reshape(
                gw.shape)
            del cols
        return gw.reshape(o, cg, *k)
    for lo, hi in _chunks(n_b, (c * len(phases) + o) * math.prod(grid), dtype):
        n = hi - lo
        split = _split(x[lo:hi], stride, padding, grid, phases)
        split = split.reshape(len(phases), n, groups, cg, -1)
        # g on the same grid, so that tap t's input is one slice of the flattened phase
        wide = xp.zeros((n, o, *grid), dtype=g.dtype)
        wide[(*everything, *(slice(0, e) for e in out))] = g[lo:hi]
        wide = wide.reshape(n, groups, og, -1)[..., :span]
        # (n, G, O/G, span) @ (n, G, span, C/G) per tap, summed over the examples
        for t, phase, start in _taps(k, stride, dilation, phases, flat):
            src = split[phase, ..., start:start + span]
            gw[(*everything, slice(None), *t)] += xp.matmul(
                wide, src.swapaxes(-1, -2)).sum(axis=0)
        del split, wide
    return gw.reshape(o, cg, *k)
