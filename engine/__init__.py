"""gradserve's engine: PyTorch autograd semantics on numpy.

Public surface: ``Tensor``, ``tensor()``, ``no_grad()``, ``backward()``, ``grad()``, ``run_program()``,
the op table (``OPS``), graph export and state serialisation.
"""

from __future__ import annotations

from . import ops  # noqa: F401  (registers ops, binds Tensor methods)
from .autograd import backward, grad
from .errors import EngineError
from .grad_mode import Limits, enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .registry import OPS, PRIMS, op_catalog
from .tensor import Tensor, tensor

__all__ = ["Tensor", "tensor", "backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "EngineError", "Limits", "OPS", "PRIMS", "op_catalog"]
