"""Grad mode and limits: context-local, never module-level mutable state.

``no_grad()``, ``enable_grad()`` and ``set_grad_enabled()`` mirror torch's context managers (and work as
decorators). Each thread and each asyncio task sees its own mode through ``contextvars``.
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass

_grad_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_grad_enabled", default=True)
_limits: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("gradserve_limits", default=None)


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


def emit_warning(message: str, once_key: str | None = None) -> None:
    """Give a UserWarning the way torch does: into the active sink, else through ``warnings``.
    ``once_key`` marks torch's TORCH_WARN_ONCE warnings (once per sink history)."""
    sink = _warning_sink.get()
    if sink is None:
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
    """Resource limits checked before allocation (elements per tensor, graph nodes, bytes)."""

    max_elements_per_tensor: int = 16_777_216
    max_nodes: int = 1_000_000
    max_bytes: int = 1 << 34


class limits:
    """Context manager installing ``Limits`` for the ops run inside it."""

    def __init__(self, value: Limits | None):
        self.value = value
        self._token = None

    def __enter__(self):
        self._token = _limits.set(self.value)
        return self.value

    def __exit__(self, *exc):
        _limits.reset(self._token)
        return False


def current_limits() -> Limits | None:
    return _limits.get()


def check_numel(shape, what: str = "tensor") -> None:
    """Refuse, before allocating, a result whose element count exceeds the active limit."""
    n = 1
    for s in shape:
        if s < 0:
            from .errors import TorchRuntimeError
            raise TorchRuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}",
                                    code="invalid_shape")
        n *= s
    lim = _limits.get()
    if lim is None:
        return
    if n > lim.max_elements_per_tensor:
        from .errors import LimitExceededError
        raise LimitExceededError(
            f"{what} of shape {list(shape)} would have {n} elements; the limit is "
            f"{lim.max_elements_per_tensor} elements per tensor")
