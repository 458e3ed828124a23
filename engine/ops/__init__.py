"""Op families. Importing this package registers every op and primitive and binds Tensor methods."""

from __future__ import annotations

from ..registry import OPS
from ..tensor import Tensor
from . import backward, creation, elementwise, inplace, linalg, nn, reduction, shape  # noqa: F401

_NOT_METHODS = {"tensor"}


def _bind_methods() -> None:
    for name, spec in OPS.items():
        if name in _NOT_METHODS or (not spec.method and not name.startswith("__")):
            continue
        if name.startswith("__") or not hasattr(Tensor, name):
            setattr(Tensor, name, spec.fn)


_bind_methods()
