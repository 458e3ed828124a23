"""Typed engine errors: a stable code, PyTorch's exception type and PyTorch's message.

Every failure the engine reports is an ``EngineError``. ``exception`` names the Python exception type
torch raises for the same program (RuntimeError, ValueError, TypeError, IndexError, AttributeError), and
``message`` is torch's text, so a client sees what ``torch`` would have told it.
"""

from __future__ import annotations

FREED_GRAPH = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)
NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad attribute won't "
    "be populated during autograd.backward(). If you indeed want the .grad field to be populated for a "
    "non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by "
    "mistake, make sure you access the leaf Tensor instead. See github.com/pytorch/pytorch/pull/30531 for "
    "more information."
)
CREATE_GRAPH_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter and its "
    "gradient which can cause a memory leak. We recommend using autograd.grad when creating the graph to "
    "avoid this. If you have to use this function, make sure to reset the .grad fields of your parameters "
    "to None after use to break the cycle and avoid the leak."
)
VERSION_HINT = (
    "Hint: enable anomaly detection to find the operation that failed to compute its gradient, with "
    "torch.autograd.set_detect_anomaly(True, check_nan=False)."
)


class EngineError(Exception):
    """Base of all engine errors. ``code`` is stable for clients; ``message`` is torch's text."""

    code = "engine_error"
    exception = "RuntimeError"

    def __init__(self, message: str, *, code: str | None = None, exception: str | None = None,
                 op_index: int | None = None, op: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if exception is not None:
            self.exception = exception
        self.op_index = op_index
        self.op = op

    def at(self, op_index: int, op: str) -> EngineError:
        """Attach the position of the failing op in a program (first attachment wins)."""
        if self.op_index is None:
            self.op_index, self.op = op_index, op
        return self

    def to_dict(self) -> dict:
        return {"code": self.code, "exception": self.exception, "message": self.message,
                "op_index": self.op_index, "op": self.op}

    def __str__(self) -> str:
        return self.message


class TorchRuntimeError(EngineError):
    code = "runtime_error"
    exception = "RuntimeError"


class TorchValueError(EngineError):
    code = "value_error"
    exception = "ValueError"


class TorchTypeError(EngineError):
    code = "type_error"
    exception = "TypeError"


class TorchIndexError(EngineError):
    code = "index_error"
    exception = "IndexError"


class TorchAttributeError(EngineError):
    code = "attribute_error"
    exception = "AttributeError"


class ShapeError(TorchRuntimeError):
    code = "shape_mismatch"


class GraphFreedError(TorchRuntimeError):
    code = "graph_freed"

    def __init__(self, **kw):
        super().__init__(FREED_GRAPH, **kw)


class VersionMismatchError(TorchRuntimeError):
    code = "version_mismatch"


class LeafInplaceError(TorchRuntimeError):
    code = "leaf_inplace"


class RequiresGradError(TorchRuntimeError):
    code = "requires_grad"


class NoGradFnError(TorchRuntimeError):
    code = "no_grad_fn"


class UnknownOpError(EngineError):
    code = "unknown_op"
    exception = "ValueError"


class UnknownTensorError(EngineError):
    code = "unknown_tensor"
    exception = "NameError"


class InvalidArgumentError(EngineError):
    code = "invalid_argument"
    exception = "TypeError"


class LimitExceededError(EngineError):
    code = "limit_exceeded"
    exception = "RuntimeError"


class DeadlineExceededError(EngineError):
    """The run passed its deadline (checked between ops and between backward nodes); nothing applied."""

    code = "deadline_exceeded"
    exception = "RuntimeError"


class CancelledError(EngineError):
    """The run was cancelled from outside (its client went away); nothing applied."""

    code = "cancelled"
    exception = "RuntimeError"


class DimensionError(TorchIndexError):
    code = "dim_out_of_range"


def dim_out_of_range(dim: int, ndim: int) -> DimensionError:
    lo, hi = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
    return DimensionError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")


class BatchingUnsupported(Exception):
    """A primitive (or a situation) with no batching rule: the caller falls back to one pass per entry."""
