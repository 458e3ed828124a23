"""Grad mode and limits: context-local, never module-level mutable state.

``no_grad()``, ``enable_grad()`` and ``set_grad_enabled()`` mirror torch's context managers (and work as
decorators). Each thread and each asyncio task sees its own mode through ``contextvars``.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass

from .budget import Budget, _budget

_grad_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_grad_enabled", default=True)


_warning_sink: contextvars.ContextVar[WarningSink | None] = contextvars.ContextVar("gradserve_warnings",
                                                                                  default=None)


class WarningSink:
    """Collects torch's warning texts for one program (thread- and task-safe, unlike
    warnings.catch_warnings). ``seen`` holds the keys of warn-once warnings already given."""

    def __init__(self, seen: set | None = None):
        self.messages: list[str] = []
        self.seen = seen if seen is not None else set()
        self._token = None

    def __enter__(self):
        self._token = _warning_sink.set(self)
        return self

    def __exit__(self, *exc):
        _warning_sink.reset(self._token)
        return False


#: the TORCH_WARN_ONCE warnings given outside any sink (the engine called as a library): torch gives each once per
#: process, whatever Python's warning filters and registries say, so this one set is per process too (a run with a
#: sink, as the service's, keeps its own history: ``WarningSink.seen``)
_WARNED_ONCE: set = set()


def emit_warning(message: str, once_key: str | None = None) -> None:
    """Give a UserWarning the way torch does: into the active sink, else through ``warnings``.
    ``once_key`` marks torch's TORCH_WARN_ONCE warnings (once per sink history; without a sink, once per process)."""
    sink = _warning_sink.get()
    if sink is None:
        if once_key is not None:
            if once_key in _WARNED_ONCE:
                return
            _WARNED_ONCE.add(once_key)
        import warnings
        warnings.warn(message, UserWarning, stacklevel=3)
        return
    if once_key is not None:
        if once_key in sink.seen:
            return
        sink.seen.add(once_key)
    sink.messages.append(message)


def is_grad_enabled() -> bool:
    return _grad_enabled.get()


class set_grad_enabled:
    """Context manager / decorator setting grad mode, like ``torch.set_grad_enabled``."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self._token = None

    def __enter__(self):
        self._token = _grad_enabled.set(self.mode)
        return self

    def __exit__(self, *exc):
        _grad_enabled.reset(self._token)
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            token = _grad_enabled.set(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _grad_enabled.reset(token)

        return wrapper


class no_grad(set_grad_enabled):
    """``torch.no_grad()``: results do not require grad; in-place updates of leaves are allowed."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self):
        super().__init__(True)


@dataclass(frozen=True)
class Limits:
    """Resource limits, checked before allocation where the size is known (see ``engine.budget``).

    ``max_bytes``: bytes of arrays a session may hold at any point of a run (its named tensors, their graphs
    and gradients, and what the run holds meanwhile). ``max_response_bytes``: bytes of tensor data a run's
    records and reported tensors may take (None: unbounded). ``names`` maps a field to the name under which
    the caller configures it, quoted in the messages (``{"max_bytes": "GRADSERVE_MAX_BYTES_PER_SESSION"}``).
    """

    max_elements_per_tensor: int = 16_777_216
    max_nodes: int = 1_000_000
    max_bytes: int = 1 << 34
    max_response_bytes: int | None = None
    names: tuple[tuple[str, str], ...] = ()

    def setting(self, field: str) -> str:
        """`` (NAME)`` of the field's setting, or ``""``."""
        name = dict(self.names).get(field)
        return f" ({name})" if name else ""


class limits:
    """Context manager installing ``Limits`` (as a ``Budget`` with nothing held) for the ops run inside it."""

    def __init__(self, value: Limits | None):
        self.value = value
        self._budget = None

    def __enter__(self):
        if self.value is not None:
            self._budget = Budget(self.value).__enter__()
        return self.value

    def __exit__(self, *exc):
        if self._budget is not None:
            self._budget.__exit__(*exc)
        return False


def current_limits() -> Limits | None:
    b = _budget.get()
    return None if b is None else b.limits


def check_numel(shape, what: str = "tensor", itemsize: int | None = None) -> None:
    """Refuse, before allocating, a result whose element count exceeds the active limit, or (given the
    element size) whose bytes do not fit in the run's budget."""
    n = 1
    for s in shape:
        if s < 0:
            from .errors import TorchRuntimeError
            raise TorchRuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}",
                                    code="invalid_shape")
        n *= s
    b = _budget.get()
    if b is None:
        return
    if n > b.max_elements:
        from .errors import LimitExceededError
        raise LimitExceededError(
            f"{what} of shape {list(shape)} would have {n} elements; the limit is "
            f"{b.max_elements} elements per tensor{b.limits.setting('max_elements_per_tensor')}")
    if itemsize is not None and n * itemsize > b.room:  # Budget.reserve's test first: the message only if asked
        b.reserve(n * itemsize, f"a {what} of shape {list(shape)}")


def check_results(blocks, what: str, each: str, shown: bool = False) -> None:
    """Refuse, before any pass makes them, results known from their shapes (a transform's blocks, a batched
    pass's gradients): ``blocks`` of (shape, dtype), each against the per-tensor limit (called ``each``), all
    together against the run's bytes, and when ``shown`` (the response will carry them) its limit."""
    b = _budget.get()
    if b is None:
        return
    nbytes = 0
    for shape, dtype in blocks:
        itemsize = dtype.itemsize
        check_numel(shape, each, itemsize)
        n = itemsize
        for s in shape:
            n *= s
        nbytes += n
    if nbytes > b.room:
        b.reserve(nbytes, f"the {what} (its blocks together)")
    if shown:
        b.respond_ahead(blocks, f"the {what} in the response")
