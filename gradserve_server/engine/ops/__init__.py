"""Op families. Importing this package registers every op and primitive and binds Tensor methods."""

from __future__ import annotations

from ..registry import OPS
from ..signature import check_call
from ..tensor import Tensor
from . import (  # noqa: F401
    attention,
    backward,
    composites,
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
    normalization,
    order_stats,
    pooling,
    queries,
    random,
    reduction,
    scan,
    shape,
    special,
    upsample,
)

_NOT_METHODS = {"tensor"}


def _bind_methods() -> None:
    for name, spec in OPS.items():
        # dotted names (linalg.det, special.xlogy) live in torch's submodules, never on Tensor
        if name in _NOT_METHODS or "." in name or (not spec.method and not name.startswith("__")):
            continue
        if name.startswith("__"):
            setattr(Tensor, name, spec.fn)
        elif not hasattr(Tensor, name):
            setattr(Tensor, name, _method(name, spec))


def _method(name: str, spec):
    """``Tensor.<name>``: torch's argument checks for the method form (self not counted), then the op."""
    fn = spec.fn

    def method(self, *args, **kwargs):
        check_call(spec, name, args, kwargs, method=True)
        return fn(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = fn.__doc__
    method.__wrapped__ = fn
    return method


_bind_methods()
