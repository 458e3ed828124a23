"""``torch.nn.utils``: gradient clipping and the flat parameter vector, as torch's (torch/nn/utils/clip_grad.py
and convert_parameters.py): the same norms, the same 1e-6 in the clipping coefficient, gradients changed in place."""

from __future__ import annotations

import math

import gradserve.torch as torch
from gradserve.torch._tensor import Tensor


def _params(parameters) -> list[Tensor]:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scales every gradient by ``max_norm / (total_norm + 1e-6)`` when that is below 1; returns the total norm
    (the norm of the per-gradient norms)."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not grads:
        return torch.tensor(0.0)
    with torch.no_grad():
        norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
        total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                               "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                               "norm anyway, set `error_if_nonfinite=False`")
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamps every gradient into [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    with torch.no_grad():
        for p in _params(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """One 1-D tensor of every parameter's values, in order."""
    return torch.cat([p.view(-1) for p in _params(parameters)])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Each parameter's ``.data`` set from its slice of ``vec``."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    pointer = 0
    for p in _params(parameters):
        n = p.numel()
        p.data = vec[pointer:pointer + n].view_as(p).data
        pointer += n


__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]

from gradserve.torch.nn.utils import rnn  # noqa: E402, F401 - torch.nn.utils.rnn as an attribute, as torch has it
