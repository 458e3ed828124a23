"""``gradserve.torch.nn.functional``: the catalog's ``nn`` ops and torch's activation functions.

The activations torch writes in place on request are torch's Python functions here too (``relu(input,
inplace=False)``...): ``inplace=True`` records the op's in-place form (``relu_``, ``leaky_relu_``, ``elu_``,
``hardtanh_``, ``silu_``), whose grad_fn and version counter are torch's; the rest comes from the catalog."""

from __future__ import annotations

from gradserve.torch import _namespace
from gradserve.torch._tensor import call_op

__getattr__, __dir__ = _namespace.install(globals(), "torch.nn.functional")


def _activation(op: str, *args, inplace: bool):
    """``op`` on ``args`` (the input first), in place when ``inplace``, as torch's functional form calls it."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    return call_op(f"{op}_" if inplace else op, args, {})


def relu(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("relu", input, inplace=inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("leaky_relu", input, negative_slope, inplace=inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("elu", input, alpha, inplace=inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("hardtanh", input, min_val, max_val, inplace=inplace)


def relu6(input, inplace: bool = False):
    """torch's relu6: hardtanh between 0 and 6 (its grad_fn is HardtanhBackward0)."""
    __tracebackhide__ = True
    return _activation("hardtanh", input, 0.0, 6.0, inplace=inplace)


def silu(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("silu", input, inplace=inplace)


def hardswish(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("hardswish", input, inplace=inplace)


def hardsigmoid(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("hardsigmoid", input, inplace=inplace)


def mish(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("mish", input, inplace=inplace)


def selu(input, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("selu", input, inplace=inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("celu", input, alpha, inplace=inplace)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    __tracebackhide__ = True
    return _activation("threshold", input, threshold, value, inplace=inplace)


def softsign(input):
    """torch's softsign: ``input / (input.abs() + 1)`` (its grad_fn is DivBackward0)."""
    __tracebackhide__ = True
    return input / (input.abs() + 1)


def tanhshrink(input):
    """torch's tanhshrink: ``input - input.tanh()`` (its grad_fn is SubBackward0)."""
    __tracebackhide__ = True
    return input - input.tanh()


for _fn in (relu, leaky_relu, elu, hardtanh, relu6, silu, hardswish, hardsigmoid, mish, selu, celu, threshold,
            softsign, tanhshrink):
    _fn.__module__ = "torch.nn.functional"  # (as torch's own, and the catalog's functions here)
del _fn
