"""Layer ``nn``: the module classes (``Module`` and the layers built on it)."""

from .activation import *  # noqa: F401,F403
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import Dropout, Dropout1d, Dropout2d
from .flatten import Flatten, Unflatten
from .fold import Fold, Unfold
from .linear import Bilinear, Identity, Linear
from .loss import *  # noqa: F401,F403
from .module import Module
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d,
                            InstanceNorm2d, InstanceNorm3d, LayerNorm, RMSNorm)
from .padding import *  # noqa: F401,F403
from .parameter_containers import ParameterDict, ParameterList
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
                      AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d,
                      MaxUnpool2d, MaxUnpool3d, Upsample)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell, RNNCellBase
from .sparse import Embedding
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from . import activation, loss, padding

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
           "Identity", "Linear", "Bilinear", "Conv1d", "Conv2d", "ConvTranspose2d",
           "Conv3d", "ConvTranspose1d", "ConvTranspose3d", "InstanceNorm3d", "MaxPool3d",
           "AvgPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
           "Dropout", "Dropout1d", "Dropout2d", "Flatten", "Unflatten", "Fold", "Unfold",
           "PixelShuffle", "PixelUnshuffle",
           "LayerNorm", "RMSNorm", "GroupNorm",
           "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
           "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
           "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "Upsample",
           "Embedding", "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
           "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           *activation.__all__, *loss.__all__,
           *padding.__all__]
