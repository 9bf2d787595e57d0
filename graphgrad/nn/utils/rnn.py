"""Layer ``nn``: ``pad_sequence`` and ``unpad_sequence``, as ``torch.nn.utils.rnn``
(what a collate function uses to batch sequences of different lengths)."""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad import ops
from graphgrad.tensor import Tensor

__all__ = ["pad_sequence", "unpad_sequence"]


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack tensors of shapes (L_i, *) into (L_max, B, *) (or (B, L_max, *) with
    ``batch_first``), filling with ``padding_value`` after (or before) each."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError(f"pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}")
    sequences = tuple(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        if extra:  # pad's pairs run from the last dim: (0, 0) for each trailing dim
            pairs = [0, 0] * (s.ndim - 1) + ([0, extra] if padding_side == "right"
                                             else [extra, 0])
            s = ops.pad(s, tuple(pairs), value=padding_value)
        padded.append(s)
    return ops.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The inverse of ``pad_sequence`` (right padding): the first ``lengths[i]`` steps of
    each sequence."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[:int(n)] for seq, n in zip(padded_sequences, lengths, strict=True)]
