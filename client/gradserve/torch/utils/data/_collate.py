"""``default_collate`` and ``default_convert``, as torch's: a batch of tensors is stacked, of numbers becomes a
tensor (floats float64, ints int64, bools bool), of numpy arrays is stacked as tensors, strings stay a list;
dicts, named tuples and sequences are collated field by field (a tuple of fields comes back as a list)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

_NOT_COLLATABLE = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _torch():
    import gradserve.torch as torch

    return torch


def _rebuild(elem, values):
    """A container of ``elem``'s type holding ``values`` (a plain one when that type cannot be made so)."""
    try:
        return type(elem)(values)
    except TypeError:
        return dict(values) if isinstance(elem, Mapping) else list(values)


def default_collate(batch):
    torch = _torch()
    elem = batch[0]
    if isinstance(elem, torch.Tensor):
        return torch.stack(list(batch), 0)
    if isinstance(elem, (str, bytes)):  # (numpy's str_ and bytes_ too)
        return batch
    if isinstance(elem, np.ndarray) and elem.dtype.kind in "USO":
        raise TypeError(_NOT_COLLATABLE.format(elem.dtype))
    if isinstance(elem, np.ndarray):
        return torch.stack([torch.tensor(np.asarray(b)) for b in batch], 0)
    if isinstance(elem, np.generic):
        return torch.tensor(np.asarray(batch))
    if isinstance(elem, bool):
        return torch.tensor(list(batch), dtype=torch.bool)
    if isinstance(elem, float):
        return torch.tensor(list(batch), dtype=torch.float64)
    if isinstance(elem, int):
        return torch.tensor(list(batch))
    if isinstance(elem, Mapping):
        return _rebuild(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return type(elem)(*(default_collate(list(samples)) for samples in zip(*batch)))
    if isinstance(elem, Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(samples)) for samples in zip(*batch)]
        return fields if isinstance(elem, tuple) else _rebuild(elem, fields)
    raise TypeError(_NOT_COLLATABLE.format(type(elem)))


def default_convert(data):
    """Without batching (``batch_size=None``): numpy arrays and numbers inside ``data`` become tensors."""
    torch = _torch()
    if isinstance(data, np.ndarray) and data.dtype.kind not in "USO":
        return torch.tensor(data)
    if isinstance(data, np.generic) and data.dtype.kind not in "USO":
        return torch.tensor(np.asarray(data))
    if isinstance(data, Mapping):
        return _rebuild(data, {key: default_convert(v) for key, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild(data, [default_convert(d) for d in data])
    return data
