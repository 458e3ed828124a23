"""Grad mode on the client, as torch's: ``no_grad()``, ``enable_grad()``, ``set_grad_enabled(mode)``
(context managers and decorators). Ops recorded while grad mode is off carry ``"no_grad": true``."""

from __future__ import annotations

import contextvars
import functools

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_torch_grad_enabled", default=True)


def is_grad_enabled() -> bool:
    return _enabled.get()


class set_grad_enabled:
    """``torch.set_grad_enabled(mode)``: sets the mode when made (as torch does), restores it on exit."""

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
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


class no_grad(set_grad_enabled):
    """``torch.no_grad()``."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """``torch.enable_grad()``."""

    def __init__(self):
        super().__init__(True)


inference_mode = no_grad
