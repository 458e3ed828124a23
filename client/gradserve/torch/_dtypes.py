"""``torch.float32`` and friends (the dtypes gradserve's engine has), and ``torch.Size``."""

from __future__ import annotations

import numpy as np


class dtype:
    """A torch dtype: prints as ``torch.float32``; ``name`` is the wire name the HTTP API uses."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    @property
    def is_floating_point(self) -> bool:
        return self.name.startswith("float")

    @property
    def itemsize(self) -> int:
        return np.dtype(self.name).itemsize

    def __reduce__(self):
        return by_name, (self.name,)


float32 = dtype("float32")
float64 = dtype("float64")
int64 = dtype("int64")
int32 = dtype("int32")
int16 = dtype("int16")
int8 = dtype("int8")
uint8 = dtype("uint8")
bool = dtype("bool")  # noqa: A001 - torch.bool
DTYPES = {d.name: d for d in (float32, float64, int64, int32, int16, int8, uint8, bool)}


def by_name(name: str) -> dtype:
    return DTYPES[name]


class Size(tuple):
    """``torch.Size``: a tuple that prints as ``torch.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"

    __str__ = __repr__

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n
