"""Op families. Importing this package registers every op and primitive and binds Tensor methods."""

from __future__ import annotations

from ..registry import OPS
from ..tensor import Tensor
from . import (  # noqa: F401
    backward,
    conv,
    creation,
    decompositions,
    einsum,
    elementwise,
    indexing,
    inplace,
    linalg,
    matrix,
    nn,
    nn_functional,
    reduction,
    scan,
    shape,
    special,
)

_NOT_METHODS = {"tensor"}


def _bind_methods() -> None:
    for name, spec in OPS.items():
        # dotted names (linalg.det, special.xlogy) live in torch's submodules, never on Tensor
        if name in _NOT_METHODS or "." in name or (not spec.method and not name.startswith("__")):
            continue
        if name.startswith("__") or not hasattr(Tensor, name):
            setattr(Tensor, name, spec.fn)


_bind_methods()
