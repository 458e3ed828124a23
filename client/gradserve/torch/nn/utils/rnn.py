"""``torch.nn.utils.rnn.pad_sequence``: sequences of different lengths padded into one tensor, as torch's kernel
makes it (a tensor filled with the padding value, each sequence copied into its slice: grad_fn CopySlices)."""

from __future__ import annotations

import gradserve.torch as torch
from gradserve.torch._tensor import Tensor


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    first = sequences[0]
    longest = max(s.size(0) for s in sequences)
    trailing = list(first.shape[1:])
    dims = [len(sequences), longest, *trailing] if batch_first else [longest, len(sequences), *trailing]
    out = torch.full(dims, padding_value, dtype=first.dtype)  # (torch's new_full; a factory's shape is known here)
    for i, seq in enumerate(sequences):
        n = seq.size(0)
        start = longest - n if padding_side == "left" else 0
        out.select(0 if batch_first else 1, i).narrow(0, start, n).copy_(seq)
    return out


__all__ = ["pad_sequence"]
