"""``torch.nn.init``: torch's formulas (gains, fans, bounds computed in Python floats as torch does), the
values drawn on the server by ``uniform_``/``normal_`` from the session's generator, so that a seeded
program gets torch's initial weights bit for bit. ``trunc_normal_`` and ``orthogonal_`` are not here
(they need ``erfinv_`` and QR on the server)."""

from __future__ import annotations

import math

import gradserve.torch as torch


def calculate_gain(nonlinearity, param=None):
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    dims = tensor.dim()
    if dims < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    shape = tensor.shape
    receptive = math.prod(shape[2:]) if dims > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with torch.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def constant_(tensor, val):
    with torch.no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    with torch.no_grad():
        return tensor.zero_()


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0, std, generator)


def eye_(tensor):
    """The identity matrix written into a 2-d ``tensor`` (ones on the diagonal of its top-left square)."""
    if tensor.ndimension() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with torch.no_grad():
        tensor.copy_(torch.eye(*tensor.shape, dtype=tensor.dtype))
    return tensor


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Normal values truncated to ``[a, b]``, drawn as torch draws them (the same numbers for a seed). Where most
    of the mass lies inside (more than 0.3), normal draws out of range are drawn again; else uniform proposals in
    ``[a, b]`` are accepted against the normal density, those rejected proposed again. Each round reads whether any
    is left (a sync)."""
    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if mean < a - 2 * std or mean > b + 2 * std:
        import warnings

        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may "
                      "be incorrect.", stacklevel=2)
    with torch.no_grad():
        if cdf((b - mean) / std) - cdf((a - mean) / std) > 0.3:
            lo, hi = tensor.new_tensor(a).item(), tensor.new_tensor(b).item()  # (the bounds in the tensor's dtype)
            drawn = tensor.normal_(mean, std, generator=generator)
            outside = (drawn < lo) | (drawn > hi)
            while outside.any():
                drawn = torch.where(outside, torch.empty_like(drawn).normal_(mean, std, generator=generator), drawn)
                outside = (drawn < lo) | (drawn > hi)
            if drawn is not tensor:
                tensor.copy_(drawn)
            return tensor
        peak = max(a, min(mean, b))
        log_peak = -0.5 * ((peak - mean) / std) ** 2
        proposal, accept = torch.empty_like(tensor), torch.empty_like(tensor)

        def log_density_excess(x):  # (written into x: log of the density relative to its peak)
            return x.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)

        tensor.uniform_(a, b, generator=generator)
        proposal.copy_(tensor)
        rejected = accept.uniform_(generator=generator).log_().gt(log_density_excess(proposal))
        if rejected.any():
            result = tensor
            while True:
                proposal.uniform_(a, b, generator=generator)
                result = torch.where(rejected, proposal, result)
                excess = log_density_excess(proposal)
                rejected = torch.where(rejected, accept.uniform_(generator=generator).log_().gt(excess), rejected)
                if not rejected.any():
                    break
            tensor.copy_(result)
        return tensor
