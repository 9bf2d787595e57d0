"""Layer ``nn``: ``torch.nn.utils.rnn``: ``pad_sequence`` and ``unpad_sequence`` (what a
collate function uses to batch sequences of different lengths) and packed sequences
(``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``,
``pack_sequence``, ``unpack_sequence``), which the recurrent layers take as input."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.tensor import Tensor, full, tensor

__all__ = ["pad_sequence", "unpad_sequence", "PackedSequence", "pack_padded_sequence",
           "pad_packed_sequence", "pack_sequence", "unpack_sequence"]


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


class PackedSequence(NamedTuple):
    """Sequences of different lengths as PyTorch packs them: ``data`` holds, step by
    step, the steps of the sequences still running (longest first), ``batch_sizes``
    how many that is per step; ``sorted_indices`` orders the batch by length (None:
    it was sorted), ``unsorted_indices`` undoes that."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None


def packed_positions(batch_sizes, order=None):
    """(time index, batch index) of each row of a packed ``data`` (``order``: the
    batch sorted by length; None: as it is)."""
    if order is None:
        order = xp.arange(batch_sizes[0])
    steps = xp.repeat(xp.arange(len(batch_sizes)), batch_sizes)
    rows = xp.concatenate([order[:n] for n in batch_sizes])
    return steps, rows


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """(L, N, *) padded sequences (or (N, L, *)) of the given lengths, packed."""
    lengths = xp.asarray(lengths._array if isinstance(lengths, Tensor) else lengths,
                         dtype=xp.int64).reshape(-1)
    if enforce_sorted:
        if (xp.diff(lengths) > 0).any():
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
        order = xp.arange(len(lengths))
    else:
        order = xp.argsort(-lengths, kind="stable")
    if (lengths <= 0).any():
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    longest = int(lengths.max())
    batch_sizes = (lengths[None, :] > xp.arange(longest)[:, None]).sum(axis=1)
    steps, rows = packed_positions(batch_sizes, order)
    data = input[tensor(steps), tensor(rows)]
    if enforce_sorted:
        return PackedSequence(data, tensor(batch_sizes))
    return PackedSequence(data, tensor(batch_sizes), tensor(order),
                          tensor(xp.argsort(order)))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None):
    """The inverse of ``pack_padded_sequence``: (padded, lengths), the batch in its
    original order."""
    data, batch_sizes = sequence.data, sequence.batch_sizes._array
    longest = len(batch_sizes)
    if total_length is not None:
        if total_length < longest:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {longest}")
        longest = total_length
    n = int(batch_sizes[0])
    order = xp.arange(n) if sequence.sorted_indices is None \
        else sequence.sorted_indices._array
    steps, rows = packed_positions(batch_sizes, order)
    padded = full((longest, n, *data.shape[1:]), padding_value, dtype=data.dtype)
    padded = ops.index_put(padded, (tensor(steps), tensor(rows)), data)
    lengths = xp.zeros(n, dtype=xp.int64)
    lengths[order] = (batch_sizes[None, :] > xp.arange(n)[:, None]).sum(axis=1)
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """A list of (L_i, *) tensors, packed."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
