"""Layer ``nn``: a whole recurrent network's pass as one function of its input, initial
state and flat weight list, every layer and direction of an RNN, LSTM or GRU, as
PyTorch's ``_VF.rnn_tanh`` / ``_VF.lstm`` / ``_VF.gru`` (``rnn`` here, with PyTorch's
mode names), and the single steps of the cells.

The modules' ``forward`` is a call of these functions with the module's parameters, so
graph capture (``graphgrad.compile``) interprets the forward and records these calls as
ops: each layer and direction is one sequence op of ``ops/recurrent.py`` (its input
projection one GEMM before it), and a model using the modules stays one graph.
"""

from __future__ import annotations

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.ops.recurrent import GruLayer, LstmLayer, RnnLayer
from graphgrad.tensor import Tensor, tensor, zeros

from ..utils.rnn import PackedSequence, packed_positions, pad_packed_sequence
from .dropouts import dropout as _dropout
from .linear_maps import linear

__all__ = ["rnn", "rnn_cell", "lstm_cell", "gru_cell"]

MODES = ("RNN_TANH", "RNN_RELU", "LSTM", "GRU")


def _rnn_layer(x, h0, w_ih, w_hh, b_ih, b_hh, nonlinearity: str):
    """(L, N, H_in) through an Elman layer: one GEMM for the input projection (both
    biases folded in: they are added before the activation), one op for the recurrence."""
    b = None if b_ih is None else b_ih + b_hh
    return RnnLayer.apply(linear(x, w_ih, b), h0, w_hh, nonlinearity=nonlinearity)


def _lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """(L, N, H_in) through an LSTM layer: the input projection of the whole sequence is
    one GEMM (both biases folded in), the recurrence one op; returns (L, N, 2H), each
    step's h and c side by side."""
    b = None if b_ih is None else b_ih + b_hh
    return LstmLayer.apply(linear(x, w_ih, b), h0, c0, w_hh)


def _gru_layer(x, h0, w_ih, w_hh, b_ih, b_hh):
    """(L, N, H_in) through a GRU layer: one GEMM for the input projection, one op for
    the recurrence (``b_hh`` stays inside: the reset gate multiplies it)."""
    rest = () if b_hh is None else (b_hh,)
    return GruLayer.apply(linear(x, w_ih, b_ih), h0, w_hh, *rest)


def rnn_cell(x: Tensor, h: Tensor, w_ih, w_hh, b_ih, b_hh, nonlinearity: str) -> Tensor:
    """One Elman step on (N, H_in), (N, H)."""
    if nonlinearity not in ("tanh", "relu"):
        raise RuntimeError(f"Unknown nonlinearity: {nonlinearity}")
    return _rnn_layer(x.unsqueeze(0), h, w_ih, w_hh, b_ih, b_hh, nonlinearity)[0]


def lstm_cell(x: Tensor, state: tuple, w_ih, w_hh, b_ih, b_hh) -> tuple:
    """One LSTM step: (h', c')."""
    h, c = state
    hidden = h.shape[-1]
    hc = _lstm_layer(x.unsqueeze(0), h, c, w_ih, w_hh, b_ih, b_hh)[0]
    return hc[:, :hidden], hc[:, hidden:]


def gru_cell(x: Tensor, h: Tensor, w_ih, w_hh, b_ih, b_hh) -> Tensor:
    """One GRU step."""
    return _gru_layer(x.unsqueeze(0), h, w_ih, w_hh, b_ih, b_hh)[0]


def _layer(mode: str, x, state, weights, hidden: int):
    """One layer and direction over ``x`` (L, N, H_in) from ``state``: (outputs (L, N, H),
    every step's state (L, N, S))."""
    if mode == "LSTM":
        hc = _lstm_layer(x, *state, *weights)
        return hc[..., :hidden], hc
    if mode == "GRU":
        out = _gru_layer(x, state, *weights)
    else:
        out = _rnn_layer(x, state, *weights, "tanh" if mode == "RNN_TANH" else "relu")
    return out, out


def _run(mode: str, x, states: list, weights: list, lengths, *, hidden: int,
         num_layers: int, directions: int, dropout: float, training: bool):
    """``x`` (L, N, H_in) through every layer and direction from ``states`` (one per
    layer and direction); returns the last layer's outputs and the final states. With
    ``lengths`` (packed input) each sequence ends at its own length: the final state is
    taken there and the reverse direction starts there."""
    finals = []
    steps, n = x.shape[:2]
    per = len(weights) // (num_layers * directions)
    if lengths is not None:
        batch = tensor(xp.arange(n))
        last = tensor(lengths - 1)
        t = xp.arange(steps)[:, None]
        # each sequence's own steps reversed, its padding left in place
        reverse = tensor(xp.where(t < lengths, lengths - 1 - t, t)), batch
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            w = weights[k * per:(k + 1) * per]
            if per == 2:  # no biases
                w = [*w, None, None]
            if d:  # the reverse direction runs on the time-reversed sequence
                flipped = ops.flip(x, (0,)) if lengths is None else x[reverse]
                out, seq = _layer(mode, flipped, states[k], w, hidden)
                out = ops.flip(out, (0,)) if lengths is None else out[reverse]
            else:
                out, seq = _layer(mode, x, states[k], w, hidden)
            outs.append(out)
            finals.append(seq[-1] if lengths is None else seq[last, batch])
        x = outs[0] if directions == 1 else ops.cat(outs, -1)
        if dropout and training and layer < num_layers - 1:
            x = _dropout(x, dropout)
    return x, finals


def _layout(input, input_size: int, batch_first: bool, name: str):
    """(input as (L, N, H), whether it was unbatched, the lengths of packed input or
    None)."""
    if isinstance(input, PackedSequence):
        padded, lengths = pad_packed_sequence(input)
        if padded.shape[-1] != input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{input_size}, got {padded.shape[-1]}")
        return padded, False, lengths._array
    if input.ndim not in (2, 3):
        raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D instead")
    if input.shape[-1] != input_size:
        raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                           f"{input_size}, got {input.shape[-1]}")
    if input.ndim == 2:
        return input.unsqueeze(1), True, None
    return (input.transpose(0, 1) if batch_first else input), False, None


def _initial(hx, layers: int, n: int, hidden: int, dtype, unbatched: bool, what: str):
    """The (layers, N, H) initial state, zeros when not given (``what``: how PyTorch's
    size error names it)."""
    if hx is None:
        return zeros(layers, n, hidden, dtype=dtype)
    if unbatched:
        if hx.ndim != 2:
            raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got "
                               f"{hx.ndim}-D tensor")
        hx = hx.unsqueeze(1)
    elif hx.ndim != 3:
        raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                           f"{hx.ndim}-D tensor")
    expected = (layers, n, hidden)
    if tuple(hx.shape) != expected:
        raise RuntimeError(f"Expected {what} size {expected}, got {list(hx.shape)}")
    return hx


def _output(out: Tensor, unbatched: bool, batch_first: bool, input):
    if isinstance(input, PackedSequence):  # packed back as the input was
        steps, rows = packed_positions(input.batch_sizes._array, None
                                       if input.sorted_indices is None
                                       else input.sorted_indices._array)
        return input._replace(data=out[tensor(steps), tensor(rows)])
    if unbatched:
        return out.squeeze(1)
    return out.transpose(0, 1) if batch_first else out


def rnn(mode: str, input, hx, weights: list, *, input_size: int, hidden_size: int,
        num_layers: int, dropout: float, training: bool, bidirectional: bool,
        batch_first: bool, name: str) -> tuple:
    """An RNN/LSTM/GRU network on ``input`` ((L, N, H_in), batch first, unbatched or a
    ``PackedSequence``) from ``hx`` (None: zeros; for ``mode`` "LSTM" a pair (h_0, c_0)),
    with ``weights`` PyTorch's flat list (per layer and direction w_ih, w_hh[, b_ih,
    b_hh]). Returns (output, h_n), or (output, (h_n, c_n)) for the LSTM. ``name``: the
    module's, for its error messages."""
    x, unbatched, lengths = _layout(input, input_size, batch_first, name)
    directions = 2 if bidirectional else 1
    layers, n = num_layers * directions, x.shape[1]
    lstm = mode == "LSTM"
    if lstm:
        h0 = _initial(None if hx is None else hx[0], layers, n, hidden_size, x.dtype,
                      unbatched, "hidden[0]")
        c0 = _initial(None if hx is None else hx[1], layers, n, hidden_size, x.dtype,
                      unbatched, "hidden[1]")
        states = list(zip(h0.unbind(0), c0.unbind(0), strict=True))
    else:
        states = list(_initial(hx, layers, n, hidden_size, x.dtype, unbatched,
                               "hidden").unbind(0))
    out, finals = _run(mode, x, states, weights, lengths, hidden=hidden_size,
                       num_layers=num_layers, directions=directions, dropout=dropout,
                       training=training)
    output = _output(out, unbatched, batch_first, input)
    if lstm:
        h_n = ops.stack([f[:, :hidden_size] for f in finals], 0)
        c_n = ops.stack([f[:, hidden_size:] for f in finals], 0)
        if unbatched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return output, (h_n, c_n)
    h_n = ops.stack(finals, 0)
    return output, (h_n.squeeze(1) if unbatched else h_n)
