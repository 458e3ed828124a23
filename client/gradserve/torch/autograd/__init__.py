"""``gradserve.torch.autograd``: ``backward`` and ``grad`` (torch's signatures), and grad-mode helpers."""

from __future__ import annotations

from gradserve.torch import _namespace
from gradserve.torch._grad_mode import enable_grad, no_grad, set_grad_enabled
from gradserve.torch._legacy import Variable
from gradserve.torch._tensor import backward, grad

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd")

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "Variable", "Function", "detect_anomaly",
           "set_detect_anomaly"]

#: anomaly mode (on, check NaN): kept, to no effect: the server's backward raises on a failed check as it is
_ANOMALY = [False, True]


def is_anomaly_enabled() -> bool:
    return _ANOMALY[0]


def is_anomaly_check_nan_enabled() -> bool:
    return _ANOMALY[1]


class set_detect_anomaly:  # noqa: N801 - torch's name
    """``torch.autograd.set_detect_anomaly(mode, check_nan=True)``: set now; as a context manager, restored at its
    end. The mode is kept and read back (``torch.is_anomaly_enabled``); the server's backward does not trace the
    forward ops of a failing node."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev = tuple(_ANOMALY)
        _ANOMALY[:] = [mode, check_nan]

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        _ANOMALY[:] = list(self.prev)


class detect_anomaly:  # noqa: N801 - torch's name
    """``with torch.autograd.detect_anomaly():``: anomaly mode on inside, with torch's warning."""

    def __init__(self, check_nan: bool = True):
        import warnings

        self.check_nan = check_nan
        self.prev = tuple(_ANOMALY)
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                      "enabled for debugging.", stacklevel=2)

    def __enter__(self) -> None:
        _ANOMALY[:] = [True, self.check_nan]

    def __exit__(self, *exc) -> None:
        _ANOMALY[:] = list(self.prev)

# torch.autograd.functional and .forward_ad as attributes (import_module: `from . import x` would ask the
# module's __getattr__, i.e. the server's catalog, first)
import importlib as _importlib  # noqa: E402

for _sub in ("forward_ad", "functional", "function"):
    _importlib.import_module(f"{__name__}.{_sub}")

from gradserve.torch.autograd.function import Function  # noqa: E402
