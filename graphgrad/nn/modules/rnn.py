"""Layer ``nn``: the recurrent layers ``RNN``, ``LSTM`` and ``GRU`` with PyTorch's
parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse``...), gate order, layouts
(``batch_first``, unbatched input), stacking with inter-layer dropout and
bidirectionality, and the single-step cells ``RNNCell``, ``LSTMCell`` and ``GRUCell``.
Each step is a few graphgrad ops, so gradients (of any order) flow through time with no
rule of their own; a layer and its cell run the same step function.
"""

from __future__ import annotations

import math
import warnings

from graphgrad import ops
from graphgrad.ops.recurrent import GruLayer, LstmLayer
from graphgrad.backend import xp
from graphgrad.tensor import Tensor, empty, tensor, zeros

from .. import functional as F
from ..init import uniform_
from ..parameter import Parameter
from ..utils.rnn import PackedSequence, pad_packed_sequence, packed_positions
from .module import Module

__all__ = ["RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


def _rnn_tanh_cell(x, state, w_ih, w_hh, b_ih, b_hh):
    return ops.tanh(F.linear(x, w_ih, b_ih) + F.linear(state, w_hh, b_hh))


def _rnn_relu_cell(x, state, w_ih, w_hh, b_ih, b_hh):
    return ops.relu(F.linear(x, w_ih, b_ih) + F.linear(state, w_hh, b_hh))


def _lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """(L, N, H_in) through an LSTM layer: the input projection of the whole sequence is
    one GEMM (both biases folded in), the recurrence one op; returns (L, N, 2H), each
    step's h and c side by side."""
    b = None if b_ih is None else b_ih + b_hh
    return LstmLayer.apply(F.linear(x, w_ih, b), h0, c0, w_hh)


def _lstm_cell(x, state, w_ih, w_hh, b_ih, b_hh):
    h, c = state
    hidden = h.shape[-1]
    hc = _lstm_layer(x.unsqueeze(0), h, c, w_ih, w_hh, b_ih, b_hh)[0]
    return hc[:, :hidden], hc[:, hidden:]


def _gru_layer(x, h0, w_ih, w_hh, b_ih, b_hh):
    """(L, N, H_in) through a GRU layer: one GEMM for the input projection, one op for
    the recurrence (``b_hh`` stays inside: the reset gate multiplies it)."""
    rest = () if b_hh is None else (b_hh,)
    return GruLayer.apply(F.linear(x, w_ih, b_ih), h0, w_hh, *rest)


def _gru_cell(x, state, w_ih, w_hh, b_ih, b_hh):
    return _gru_layer(x.unsqueeze(0), state, w_ih, w_hh, b_ih, b_hh)[0]


class _RNNBase(Module):
    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = 0
        directions = 2 if bidirectional else 1
        gate = self._gates * hidden_size
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                name = f"l{layer}{suffix}"
                setattr(self, f"weight_ih_{name}", Parameter(empty(gate, layer_in, dtype=dtype)))
                setattr(self, f"weight_hh_{name}",
                        Parameter(empty(gate, hidden_size, dtype=dtype)))
                if bias:
                    setattr(self, f"bias_ih_{name}", Parameter(empty(gate, dtype=dtype)))
                    setattr(self, f"bias_hh_{name}", Parameter(empty(gate, dtype=dtype)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            uniform_(p, -bound, bound)

    def _cell(self, x, state, name: str):
        b_ih = getattr(self, f"bias_ih_{name}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_{name}") if self.bias else None
        return self._step(x, state, getattr(self, f"weight_ih_{name}"),
                          getattr(self, f"weight_hh_{name}"), b_ih, b_hh)

    def _step(self, x, state, w_ih, w_hh, b_ih, b_hh):
        raise NotImplementedError

    def _weights_of(self, name: str) -> tuple:
        return (getattr(self, f"weight_ih_{name}"), getattr(self, f"weight_hh_{name}"),
                getattr(self, f"bias_ih_{name}") if self.bias else None,
                getattr(self, f"bias_hh_{name}") if self.bias else None)

    def _layer(self, x: Tensor, state, name: str):
        """One layer and direction over the sequence ``x`` (L, N, H_in) from ``state``:
        (outputs (L, N, H), every step's state (L, N, S)). Here a loop of cell steps;
        LSTM and GRU run their fused sequence ops instead."""
        seq = []
        for t in range(x.shape[0]):
            state = self._cell(x[t], state, name)
            seq.append(state)
        out = ops.stack(seq, 0)
        return out, out

    def _state_of(self, row: Tensor):
        """The state held in one step of the sequence ``_layer`` returns second."""
        return row

    def _run(self, input: Tensor, states: list, lengths=None):
        """``input`` (L, N, H_in) through every layer and direction from ``states`` (one
        per layer and direction); returns the last layer's outputs and the final states.
        With ``lengths`` (packed input) each sequence ends at its own length: the final
        state is taken there and the reverse direction starts there."""
        directions = 2 if self.bidirectional else 1
        finals = []
        x = input
        steps, n = input.shape[:2]
        batch = tensor(xp.arange(n))
        if lengths is None:
            last = None
        else:
            last = tensor(lengths - 1)
            t = xp.arange(steps)[:, None]
            # each sequence's own steps reversed, its padding left in place
            reverse = tensor(xp.where(t < lengths, lengths - 1 - t, t)), batch
        for layer in range(self.num_layers):
            outs = []
            for d in range(directions):
                state = states[layer * directions + d]
                name = f"l{layer}" + ("_reverse" if d else "")
                if d:  # the reverse direction runs on the time-reversed sequence
                    flipped = ops.flip(x, (0,)) if lengths is None else x[reverse]
                    out, seq = self._layer(flipped, state, name)
                    out = ops.flip(out, (0,)) if lengths is None else out[reverse]
                else:
                    out, seq = self._layer(x, state, name)
                outs.append(out)
                finals.append(self._state_of(seq[-1] if last is None else seq[last, batch]))
            x = outs[0] if directions == 1 else ops.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        return x, finals

    def _layout(self, input):
        """(input as (L, N, H), whether it was unbatched, the lengths of packed input or
        None)."""
        if isinstance(input, PackedSequence):
            padded, lengths = pad_packed_sequence(input)
            if padded.shape[-1] != self.input_size:
                raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                                   f"{self.input_size}, got {padded.shape[-1]}")
            return padded, False, lengths._array
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                             f"{input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")
        if input.ndim == 2:
            return input.unsqueeze(1), True, None
        return (input.transpose(0, 1) if self.batch_first else input), False, None

    def _initial(self, hx, n: int, dtype, unbatched: bool, what: str = "hidden"):
        """The (num_layers * directions, N, H) initial state, zeros when not given
        (``what``: how PyTorch's size error names it)."""
        layers = self.num_layers * (2 if self.bidirectional else 1)
        if hx is None:
            return zeros(layers, n, self.hidden_size, dtype=dtype)
        if unbatched:
            if hx.ndim != 2:
                raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got "
                                   f"{hx.ndim}-D tensor")
            hx = hx.unsqueeze(1)
        elif hx.ndim != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                               f"{hx.ndim}-D tensor")
        expected = (layers, n, self.hidden_size)
        if tuple(hx.shape) != expected:
            raise RuntimeError(f"Expected {what} size {expected}, got {list(hx.shape)}")
        return hx

    def _output(self, out: Tensor, unbatched: bool, input=None):
        if isinstance(input, PackedSequence):  # packed back as the input was
            steps, rows = packed_positions(input.batch_sizes._array, None
                                           if input.sorted_indices is None
                                           else input.sorted_indices._array)
            return input._replace(data=out[tensor(steps), tensor(rows)])
        if unbatched:
            return out.squeeze(1)
        return out.transpose(0, 1) if self.batch_first else out

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class _SingleState(_RNNBase):
    """RNN and GRU: one state tensor ``h``; ``forward(input, hx) -> (output, h_n)``."""

    def forward(self, input, hx: Tensor | None = None):
        x, unbatched, lengths = self._layout(input)
        h0 = self._initial(hx, x.shape[1], x.dtype, unbatched)
        out, finals = self._run(x, list(h0.unbind(0)), lengths)
        h_n = ops.stack(finals, 0)
        return self._output(out, unbatched, input), (h_n.squeeze(1) if unbatched else h_n)


class RNN(_SingleState):
    """Elman RNN: ``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu).
    ``nonlinearity`` is the fourth positional argument, as in PyTorch."""

    def __init__(self, *args, **kwargs) -> None:
        if len(args) > 3:
            nonlinearity, args = args[3], args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__(*args, **kwargs)

    def _step(self, *args):
        return _elman_step(self.nonlinearity)(*args)


def _elman_step(nonlinearity: str):
    if nonlinearity == "tanh":
        return _rnn_tanh_cell
    if nonlinearity == "relu":
        return _rnn_relu_cell
    raise RuntimeError(f"Unknown nonlinearity: {nonlinearity}")


class GRU(_SingleState):
    """Gated recurrent unit, gates (r, z, n) as PyTorch's."""

    _gates = 3

    def _step(self, *args):
        return _gru_cell(*args)

    def _layer(self, x: Tensor, state, name: str):
        out = _gru_layer(x, state, *self._weights_of(name))
        return out, out


class LSTM(_RNNBase):
    """Long short-term memory, gates (i, f, g, o); ``forward(input, (h_0, c_0))`` returns
    ``(output, (h_n, c_n))``."""

    _gates = 4

    def __init__(self, *args, proj_size: int = 0, **kwargs) -> None:
        if proj_size:
            raise NotImplementedError("LSTM: proj_size is not supported")
        super().__init__(*args, **kwargs)

    def _step(self, *args):
        return _lstm_cell(*args)

    def _layer(self, x: Tensor, state, name: str):
        hc = _lstm_layer(x, *state, *self._weights_of(name))
        return hc[..., :self.hidden_size], hc

    def _state_of(self, row: Tensor):
        return row[:, :self.hidden_size], row[:, self.hidden_size:]

    def forward(self, input, hx: tuple | None = None):
        x, unbatched, lengths = self._layout(input)
        n = x.shape[1]
        h0 = self._initial(None if hx is None else hx[0], n, x.dtype, unbatched,
                           "hidden[0]")
        c0 = self._initial(None if hx is None else hx[1], n, x.dtype, unbatched,
                           "hidden[1]")
        out, finals = self._run(x, list(zip(h0.unbind(0), c0.unbind(0), strict=True)),
                                lengths)
        h_n = ops.stack([h for h, _ in finals], 0)
        c_n = ops.stack([c for _, c in finals], 0)
        if unbatched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return self._output(out, unbatched, input), (h_n, c_n)


class RNNCellBase(Module):
    """One recurrent step: ``weight_ih`` (chunks * hidden, input), ``weight_hh`` (chunks *
    hidden, hidden) and the biases, initialised uniform on +-1/sqrt(hidden_size) as the
    layers are. Inputs are (N, input_size) or unbatched (input_size,)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = _RNNBase.reset_parameters

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _states(self, input: Tensor, hx: tuple | None, count: int, label: str):
        """(input as (N, input_size), the ``count`` states as (N, hidden_size), whether the
        input was unbatched), with PyTorch's checks in its order (``label``: how its
        messages name state ``k``, formatted with ``k``)."""
        cls = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{cls}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if hx is not None:
            for k, h in enumerate(hx):
                if h.ndim not in (1, 2):
                    raise ValueError(f"{cls}: Expected {label.format(k)} to be 1D or 2D, got "
                                     f"{h.ndim}D instead")
        unbatched = input.ndim == 1
        if unbatched:
            input = input.unsqueeze(0)
        if hx is None:
            hx = (zeros(input.shape[0], self.hidden_size, dtype=input.dtype),) * count
        elif unbatched:
            hx = tuple(h.unsqueeze(0) for h in hx)
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} "
                               f"expected {self.input_size}")
        for k, h in enumerate(hx):
            if h.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match hidden{k} "
                                   f"batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {h.shape[1]}, "
                                   f"expected {self.hidden_size}")
        return input, hx, unbatched

    def _weights(self) -> tuple:
        return self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh


class RNNCell(RNNCellBase):
    """``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu); ``forward(input, hx=None)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), unbatched = self._states(input, None if hx is None else (hx,), 1, "hidden")
        h = _elman_step(self.nonlinearity)(x, h, *self._weights())
        return h.squeeze(0) if unbatched else h


class GRUCell(RNNCellBase):
    """One GRU step, gates (r, z, n) as PyTorch's; ``forward(input, hx=None)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), unbatched = self._states(input, None if hx is None else (hx,), 1, "hidden")
        h = _gru_cell(x, h, *self._weights())
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step, gates (i, f, g, o); ``forward(input, (h, c)=None) -> (h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: tuple | None = None) -> tuple:
        x, (h, c), unbatched = self._states(input, hx, 2, "hx[{}]")
        h, c = _lstm_cell(x, (h, c), *self._weights())
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)
