"""Layer ``nn``: the recurrent layers ``RNN``, ``LSTM`` and ``GRU`` with PyTorch's
parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse``...), gate order, layouts
(``batch_first``, unbatched input), stacking with inter-layer dropout and
bidirectionality, and the single-step cells ``RNNCell``, ``LSTMCell`` and ``GRUCell``.
The modules hold the parameters and check the configuration; the computation is
``nn/functional/recurrent.py`` (one call per forward, which graph capture records as
ops: each layer and direction one sequence op), and a cell is that layer op over one
step.
"""

from __future__ import annotations

import math
import warnings

from graphgrad.tensor import Tensor, empty, zeros

from ..functional import recurrent as R
from ..init import uniform_
from ..parameter import Parameter
from .module import Module

__all__ = ["RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


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

    @property
    def _flat_weights_names(self) -> list:
        """The parameters' names in PyTorch's flat order: per layer and direction w_ih,
        w_hh, then b_ih, b_hh when there are biases."""
        names = []
        for layer in range(self.num_layers):
            for suffix in ("", "_reverse")[:2 if self.bidirectional else 1]:
                kinds = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias
                                                      else ())
                names += [f"{k}_l{layer}{suffix}" for k in kinds]
        return names

    @property
    def _flat_weights(self) -> list:
        """The parameters in PyTorch's flat order, read at each call (a replaced
        parameter is seen at once)."""
        return [getattr(self, n) for n in self._flat_weights_names]

    def forward(self, input, hx: Tensor | tuple | None = None):
        """(output, h_n), or for the LSTM (output, (h_n, c_n)): the network in one call
        of ``nn.functional.recurrent.rnn`` (graph capture records it as ops)."""
        return R.rnn(self.mode, input, hx, self._flat_weights, input_size=self.input_size,
                     hidden_size=self.hidden_size, num_layers=self.num_layers,
                     dropout=self.dropout, training=self.training,
                     bidirectional=self.bidirectional, batch_first=self.batch_first,
                     name=type(self).__name__)

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


class RNN(_RNNBase):
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
        self.__dict__["mode"] = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(*args, **kwargs)


class GRU(_RNNBase):
    """Gated recurrent unit, gates (r, z, n) as PyTorch's."""

    _gates = 3
    mode = "GRU"


class LSTM(_RNNBase):
    """Long short-term memory, gates (i, f, g, o); ``forward(input, (h_0, c_0))`` returns
    ``(output, (h_n, c_n))``."""

    _gates = 4
    mode = "LSTM"

    def __init__(self, *args, proj_size: int = 0, **kwargs) -> None:
        if proj_size:
            raise NotImplementedError("LSTM: proj_size is not supported")
        super().__init__(*args, **kwargs)


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
        h = R.rnn_cell(x, h, *self._weights(), self.nonlinearity)
        return h.squeeze(0) if unbatched else h


class GRUCell(RNNCellBase):
    """One GRU step, gates (r, z, n) as PyTorch's; ``forward(input, hx=None)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), unbatched = self._states(input, None if hx is None else (hx,), 1, "hidden")
        h = R.gru_cell(x, h, *self._weights())
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step, gates (i, f, g, o); ``forward(input, (h, c)=None) -> (h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: tuple | None = None) -> tuple:
        x, (h, c), unbatched = self._states(input, hx, 2, "hx[{}]")
        h, c = R.lstm_cell(x, (h, c), *self._weights())
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)
