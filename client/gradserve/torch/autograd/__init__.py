"""``gradserve.torch.autograd``: ``backward`` and ``grad`` (torch's signatures), and grad-mode helpers."""

from __future__ import annotations

from gradserve.torch import _namespace
from gradserve.torch._grad_mode import enable_grad, no_grad, set_grad_enabled
from gradserve.torch._legacy import Variable
from gradserve.torch._tensor import backward, grad

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd")

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "Variable", "Function"]

# torch.autograd.functional and .forward_ad as attributes (import_module: `from . import x` would ask the
# module's __getattr__, i.e. the server's catalog, first)
import importlib as _importlib  # noqa: E402

for _sub in ("forward_ad", "functional", "function"):
    _importlib.import_module(f"{__name__}.{_sub}")

from gradserve.torch.autograd.function import Function  # noqa: E402
