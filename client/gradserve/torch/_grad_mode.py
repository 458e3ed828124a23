"""Grad mode on the client, as torch's: ``no_grad()``, ``enable_grad()``, ``set_grad_enabled(mode)``
(context managers and decorators). Ops recorded while grad mode is off carry ``"no_grad": true``."""

from __future__ import annotations

import contextvars
import functools

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_torch_grad_enabled", default=True)


def is_grad_enabled() -> bool:
    return _enabled.get()


class _GradMode:
    """A context manager and decorator that runs its block (or function) in grad mode ``self.mode``."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self):
        self._tokens.append(_enabled.set(self.mode))
        return self

    def __exit__(self, *exc) -> bool:
        _enabled.reset(self._tokens.pop())
        return False

    def __call__(self, fn):
        """As a decorator: ``fn`` runs in this mode."""
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(mode):
                return fn(*args, **kwargs)
        return wrapper


class set_grad_enabled(_GradMode):
    """``torch.set_grad_enabled(mode)``: sets the mode when made, as torch does, so that it works called as a
    function; as a context manager the mode before it comes back on exit; as a decorator the mode before it
    comes back at once and ``fn`` runs in ``mode``."""

    def __init__(self, mode: bool = True):
        super().__init__(mode)
        self.prev = _enabled.get()
        _enabled.set(self.mode)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        _enabled.set(self.prev)
        return False

    def __call__(self, fn):
        _enabled.set(self.prev)
        return super().__call__(fn)

    def __repr__(self) -> str:
        return f"torch.autograd.grad_mode.set_grad_enabled(mode={self.mode})"


class no_grad(_GradMode):
    """``torch.no_grad()``."""

    def __init__(self):
        super().__init__(False)


class enable_grad(_GradMode):
    """``torch.enable_grad()``."""

    def __init__(self):
        super().__init__(True)


inference_mode = no_grad
