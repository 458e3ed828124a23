"""The layers of ``torch.nn`` that model code uses, over ``nn.functional`` (so over the server's ops): containers,
convolutions, pooling, normalization, embeddings, recurrent layers and cells, attention, activations and losses.

Each takes torch's constructor arguments, makes its parameters and buffers in torch's order and initialises them
as torch's ``reset_parameters`` does, through ``nn.init`` on the session's generator (so a seeded model starts
from torch's values), and prints as torch prints it (``extra_repr``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import gradserve.torch as torch
from gradserve.torch._tensor import Tensor
from gradserve.torch.nn import Module, Parameter, init
from gradserve.torch.nn import functional as F


def _device_ok(device) -> None:
    """torch's device check of a layer's ``device=`` (CPU only: CUDA asked for raises as torch without a GPU)."""
    if device is not None:
        from gradserve.torch import _device
        _device.check(device)


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (v,) * n


# ----- containers ----------------------------------------------------------------------------------------------


class ModuleList(Module):
    """``nn.ModuleList(modules=None)``: a list of submodules, registered under "0", "1", ..."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx: int) -> str:
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._index(idx), module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._index(idx)]
        for k in keys:
            delattr(self, k)
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def forward(self, *args, **kwargs):
        raise NotImplementedError('Module [ModuleList] is missing the required "forward" function')

    def __repr__(self) -> str:
        """torch's: runs of equal consecutive modules as one line, ``(0-2): 3 x Linear(...)``."""
        reprs = [repr(m) for m in self]
        if not reprs:
            return "ModuleList()"
        runs: list[list] = []
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for start, end, r in runs:
            head = f"({start}): " if start == end else f"({start}-{end}): {end - start + 1} x "
            lines.append((head + r).replace("\n", "\n  "))
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """``nn.ModuleDict(modules=None)``: submodules by name, in insertion order."""

    def __init__(self, modules: Mapping | Iterable | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def pop(self, key: str) -> Module:
        m = self[key]
        del self[key]
        return m

    def update(self, modules) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, m in pairs:
            self[key] = m


class Identity(Module):
    """``nn.Identity(*args, **kwargs)``: returns its input."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


# ----- convolutions ----------------------------------------------------------------------------------------------


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        _device_ok(device)
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             f"padding_mode='{padding_mode}'")
        n = self._n
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _tuple(kernel_size, n), _tuple(stride, n), _tuple(dilation, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.padding_mode = padding_mode
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.weight = Parameter(torch.zeros(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype))
        self.bias = Parameter(torch.zeros(out_channels, dtype=dtype)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        conv = F.conv1d if self._n == 1 else F.conv2d
        if self.padding_mode != "zeros":
            pad = []
            for p in reversed(self.padding):
                pad += [p, p]
            return conv(F.pad(input, pad, mode=self.padding_mode), self.weight, self.bias, self.stride, 0,
                        self.dilation, self.groups)
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        n = self._n
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    _n = 1


class Conv2d(_ConvNd):
    _n = 2


# ----- pooling --------------------------------------------------------------------------------------------------


class _MaxPool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    def forward(self, input: Tensor):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class MaxPool2d(_MaxPool):
    def forward(self, input: Tensor):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = _tuple(kernel_size, 1)
        self.stride = _tuple(stride if stride is not None else kernel_size, 1)
        self.padding = _tuple(padding, 1)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.mode, self.align_corners = size, mode, align_corners
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


# ----- normalization ---------------------------------------------------------------------------------------------


class _BatchNorm(Module):
    _version = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        _device_ok(device)
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self._bias = affine, track_running_stats, bias
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        if affine:
            self.weight = Parameter(torch.ones(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", torch.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()  # (as torch's: in place, so each parameter and buffer starts at version 1)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with torch.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average, as torch's
                factor = 1.0 / float(self.num_batches_tracked)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, bn_training, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self._bias}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        _device_ok(device)
        super().__init__()
        self.normalized_shape = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else \
            (normalized_shape,)
        self.eps, self.elementwise_affine, self._bias = eps, elementwise_affine, bias
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        if elementwise_affine:
            self.weight = Parameter(torch.ones(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self._bias}")


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        _device_ok(device)
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self._bias = bias
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        if affine:
            self.weight = Parameter(torch.ones(num_channels, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(num_channels, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self._bias}"


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device=None, dtype=None):
        _device_ok(device)
        super().__init__()
        if padding_idx is not None:
            if padding_idx > 0 and padding_idx >= num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            if padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("Padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            dtype = dtype if dtype is not None else torch.get_default_dtype()
            self.weight = Parameter(torch.zeros(num_embeddings, embedding_dim, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx=None, max_norm=None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Embedding:
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, _weight=embeddings,
                   _freeze=freeze)


# ----- recurrent layers --------------------------------------------------------------------------------------------


def _lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    gates = F.linear(h, w_hh, b_hh) + F.linear(x, w_ih, b_ih)  # torch's order: the hidden projection first
    i, f, g, o = gates.chunk(4, -1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c = f * c + i * g
    return o * c.tanh(), c


def _gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    ir, iz, in_ = F.linear(x, w_ih, b_ih).chunk(3, -1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (hr + ir).sigmoid()
    z = (hz + iz).sigmoid()
    n = (in_ + hn * r).tanh()
    return (h - n) * z + n


def _rnn_cell(x, h, w_ih, w_hh, b_ih, b_hh, nonlinearity: str):
    pre = F.linear(h, w_hh, b_hh) + F.linear(x, w_ih, b_ih)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


class _RNNCellBase(Module):
    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        _device_ok(device)
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = self._gates * hidden_size
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.weight_ih = Parameter(torch.zeros(g, input_size, dtype=dtype))
        self.weight_hh = Parameter(torch.zeros(g, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(torch.zeros(g, dtype=dtype))
            self.bias_hh = Parameter(torch.zeros(g, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _hx(self, input: Tensor, hx):
        batched = input.dim() == 2
        if not batched:
            input = input.unsqueeze(0)
        if hx is None:
            hx = torch.zeros(input.shape[0], self.hidden_size, dtype=input.dtype)
        elif not batched:
            hx = hx.unsqueeze(0)
        return input, hx, batched

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s  # (torch's RNN layers, unlike its cells, do not print their nonlinearity)


class RNNCell(_RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        _device_ok(device)
        self.__dict__["nonlinearity"] = nonlinearity
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, h, batched = self._hx(input, hx)
        out = _rnn_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, self.nonlinearity)
        return out if batched else out.squeeze(0)


class LSTMCell(_RNNCellBase):
    _gates = 4

    def forward(self, input: Tensor, hx=None):
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            zeros = torch.zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
            h, c = zeros, zeros
        else:
            h, c = hx if batched else (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        h, c = _lstm_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(_RNNCellBase):
    _gates = 3

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, h, batched = self._hx(input, hx)
        out = _gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else out.squeeze(0)


class _RNNBase(Module):
    _gates = 1
    mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None, nonlinearity: str = "tanh"):
        _device_ok(device)
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if proj_size:
            raise NotImplementedError("gradserve.torch: LSTM's proj_size is not supported")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size, self.nonlinearity = bidirectional, proj_size, nonlinearity
        dirs = 2 if bidirectional else 1
        g = self._gates * hidden_size
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                size_in = input_size if layer == 0 else hidden_size * dirs
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"] + ([f"bias_ih{sfx}", f"bias_hh{sfx}"] if bias else [])
                shapes = [(g, size_in), (g, hidden_size), (g,), (g,)]
                for name, shape in zip(names, shapes):
                    setattr(self, name, Parameter(torch.zeros(*shape, dtype=dtype)))
                self._flat_weights_names += names
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _cell(self, x, state, layer: int, d: int):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        w = [getattr(self, f"weight_ih{sfx}"), getattr(self, f"weight_hh{sfx}"),
             getattr(self, f"bias_ih{sfx}", None) if self.bias else None,
             getattr(self, f"bias_hh{sfx}", None) if self.bias else None]
        if self.mode == "LSTM":
            return _lstm_cell(x, state[0], state[1], *w)
        if self.mode == "GRU":
            return _gru_cell(x, state, *w)
        return _rnn_cell(x, state, *w, "tanh" if self.mode == "RNN_TANH" else "relu")

    def forward(self, input: Tensor, hx=None):
        batched = input.dim() == 3
        if input.dim() not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D instead")
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        seq, batch = x.shape[0], x.shape[1]
        dirs = 2 if self.bidirectional else 1
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = torch.zeros(self.num_layers * dirs, batch, self.hidden_size, dtype=x.dtype)
            hx = (zeros, zeros) if lstm else zeros
        elif not batched:
            hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1)) if lstm else hx.unsqueeze(1)
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                state = (hx[0][k], hx[1][k]) if lstm else hx[k]
                steps = range(seq - 1, -1, -1) if d else range(seq)
                ys = [None] * seq
                for t in steps:
                    state = self._cell(layer_in[t], state, layer, d)
                    ys[t] = state[0] if lstm else state
                outs.append(torch.stack(ys, 0))
                h_n.append(state[0] if lstm else state)
                if lstm:
                    c_n.append(state[1])
            layer_in = outs[0] if dirs == 1 else torch.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        output = layer_in
        h = torch.stack(h_n, 0)
        if batched and self.batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output, h = output.squeeze(1), h.squeeze(1)
        if lstm:
            c = torch.stack(c_n, 0)
            return output, (h, c if batched else c.squeeze(1))
        return output, h

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(_RNNBase):
    def __init__(self, *args, nonlinearity: str = "tanh", **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.__dict__["mode"] = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(*args, nonlinearity=nonlinearity, **kwargs)


class LSTM(_RNNBase):
    _gates = 4
    mode = "LSTM"


class GRU(_RNNBase):
    _gates = 3
    mode = "GRU"


# ----- attention -----------------------------------------------------------------------------------------------------


class MultiheadAttention(Module):
    """``nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True, batch_first=False)``: one packed input
    projection (xavier_uniform_, zero bias) and an output Linear (torch's Linear initialisation, zero bias); with
    ``need_weights`` the attention is written out (and its weights returned, averaged over heads unless asked
    otherwise), without it F.scaled_dot_product_attention runs."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        _device_ok(device)
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads != 0:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or (vdim not in (None, embed_dim)):
            raise NotImplementedError("gradserve.torch: MultiheadAttention supports equal q/k/v sizes without "
                                      "add_bias_kv and add_zero_attn")
        from gradserve.torch.nn import Linear
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.kdim = self.vdim = embed_dim
        self._qkv_same_embed_dim = True
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.in_proj_weight = Parameter(torch.zeros(3 * embed_dim, embed_dim, dtype=dtype))
        self.register_parameter("q_proj_weight", None)
        self.register_parameter("k_proj_weight", None)
        self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(torch.zeros(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        self.out_proj.__class__ = _NonDynamicallyQuantizableLinear
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        batched = query.dim() == 3
        if self.batch_first and batched:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        tgt, bsz, e = query.shape
        src = key.shape[0]
        h, hd = self.num_heads, self.head_dim
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        q = q.reshape(tgt, bsz * h, hd).transpose(0, 1)
        k = k.reshape(src, bsz * h, hd).transpose(0, 1)
        v = v.reshape(src, bsz * h, hd).transpose(0, 1)
        mask = None
        if attn_mask is not None:
            mask = attn_mask if attn_mask.dtype != torch.bool else \
                torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(attn_mask, float("-inf"))
            if mask.dim() == 2:
                mask = mask.unsqueeze(0)
        elif is_causal:
            mask = torch.zeros(tgt, src, dtype=q.dtype).masked_fill(
                torch.ones(tgt, src, dtype=torch.bool).triu(1), float("-inf")).unsqueeze(0)
        if key_padding_mask is not None:
            kpm = key_padding_mask if key_padding_mask.dtype != torch.bool else \
                torch.zeros(key_padding_mask.shape, dtype=q.dtype).masked_fill(key_padding_mask, float("-inf"))
            kpm = kpm.view(bsz, 1, 1, src).expand(-1, h, -1, -1).reshape(bsz * h, 1, src)
            mask = kpm if mask is None else mask + kpm
        p = self.dropout if self.training else 0.0
        if need_weights:
            q_scaled = q * math.sqrt(1.0 / float(hd))
            weights = torch.baddbmm(mask, q_scaled, k.transpose(-2, -1)) if mask is not None else \
                torch.bmm(q_scaled, k.transpose(-2, -1))
            weights = F.softmax(weights, dim=-1)
            if p > 0.0:
                weights = F.dropout(weights, p=p)
            out = torch.bmm(weights, v)
            out = out.transpose(0, 1).contiguous().view(tgt * bsz, e)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).view(tgt, bsz, e)
            weights = weights.view(bsz, h, tgt, src)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not batched:
                out, weights = out.squeeze(1), weights.squeeze(0)
            if self.batch_first and batched:
                out = out.transpose(0, 1)
            return out, weights
        if mask is not None and mask.shape[0] == 1 and mask.dim() == 3:
            mask = mask.unsqueeze(0)
        elif mask is not None:
            mask = mask.view(bsz, h, -1, src)
        q, k, v = q.view(bsz, h, tgt, hd), k.view(bsz, h, src, hd), v.view(bsz, h, src, hd)
        out = F.scaled_dot_product_attention(q, k, v, mask, p, False)
        out = out.permute(2, 0, 1, 3).contiguous().view(bsz * tgt, e)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias).view(tgt, bsz, e)
        if not batched:
            out = out.squeeze(1)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        return out, None


def _nd_linear():
    from gradserve.torch.nn import Linear

    class NonDynamicallyQuantizableLinear(Linear):
        pass

    return NonDynamicallyQuantizableLinear


_NonDynamicallyQuantizableLinear = _nd_linear()


# ----- activations and losses as modules ------------------------------------------------------------------------


_REQUIRED = object()  # (a parameter of a module's __init__ without a default)


def _module(name: str, fn: str, params: tuple = (), defaults: tuple = (), repr_keys: tuple | None = None,
            inplace: bool | str = False):
    """A module whose forward is ``F.<fn>(input, **its arguments)`` and whose repr lists them as torch's does.
    ``inplace``: it takes torch's ``inplace=False`` last, passes it on, and its repr says ``inplace=True`` when set
    (``"unshown"``: torch's repr of it does not). A default of ``_REQUIRED``: the argument must be given."""
    if inplace:
        params, defaults = (*params, "inplace"), (*defaults, False)

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(params):
            least = 1 + sum(d is _REQUIRED for d in defaults)
            takes = f"{least}" if least == len(params) + 1 else f"from {least} to {len(params) + 1}"
            raise TypeError(f"{name}.__init__() takes {takes} positional arguments but {len(args) + 1} were given")
        values = dict(zip(params, defaults))
        values.update(zip(params, args))
        for k, v in kwargs.items():
            if k not in params:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{k}'")
            values[k] = v
        missing = [f"'{k}'" for k, v in values.items() if v is _REQUIRED]
        if missing:
            said = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
            raise TypeError(f"{name}.__init__() missing {len(missing)} required positional "
                            f"argument{'s' if len(missing) > 1 else ''}: {said}")
        for k, v in values.items():
            setattr(self, k, v)

    def forward(self, input: Tensor, *rest) -> Tensor:
        kwargs = {k: getattr(self, k) for k in params}
        return getattr(F, fn)(input, *rest, **kwargs)

    def extra_repr(self) -> str:
        keys = [k for k in (params if repr_keys is None else repr_keys) if k != "inplace"]
        shown = [f"{k}={getattr(self, k)!r}" if isinstance(getattr(self, k), str) else f"{k}={getattr(self, k)}"
                 for k in keys]
        shows = inplace is True and getattr(self, "inplace", False)
        return ", ".join(shown + (["inplace=True"] if shows else []))

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__module__": __name__})


LeakyReLU = _module("LeakyReLU", "leaky_relu", ("negative_slope",), (0.01,), inplace=True)
ELU = _module("ELU", "elu", ("alpha",), (1.0,), inplace=True)
GELU = _module("GELU", "gelu", ("approximate",), ("none",))
SiLU = _module("SiLU", "silu", inplace=True)
Softplus = _module("Softplus", "softplus", ("beta", "threshold"), (1.0, 20.0))
Hardswish = _module("Hardswish", "hardswish", inplace="unshown")
Hardsigmoid = _module("Hardsigmoid", "hardsigmoid", inplace="unshown")
Mish = _module("Mish", "mish", inplace=True)
SELU = _module("SELU", "selu", inplace=True)
CELU = _module("CELU", "celu", ("alpha",), (1.0,), inplace=True)
Threshold = _module("Threshold", "threshold", ("threshold", "value"), (_REQUIRED, _REQUIRED), inplace=True)
Softsign = _module("Softsign", "softsign")
Tanhshrink = _module("Tanhshrink", "tanhshrink")
Hardtanh = _module("Hardtanh", "hardtanh", ("min_val", "max_val"), (-1.0, 1.0), inplace=True)
ReLU = _module("ReLU", "relu", inplace=True)
ReLU6 = _module("ReLU6", "relu6", inplace=True)
LogSigmoid = _module("LogSigmoid", "logsigmoid")
Softmax = _module("Softmax", "softmax", ("dim",), (None,))
LogSoftmax = _module("LogSoftmax", "log_softmax", ("dim",), (None,))
Softmin = _module("Softmin", "softmin", ("dim",), (None,))
GLU = _module("GLU", "glu", ("dim",), (-1,))
CosineSimilarity = _module("CosineSimilarity", "cosine_similarity", ("dim", "eps"), (1, 1e-8), repr_keys=())
PairwiseDistance = _module("PairwiseDistance", "pairwise_distance", ("p", "eps", "keepdim"), (2.0, 1e-6, False),
                           repr_keys=())
L1Loss = _module("L1Loss", "l1_loss", ("reduction",), ("mean",), repr_keys=())
NLLLoss = _module("NLLLoss", "nll_loss", ("weight", "ignore_index", "reduction"), (None, -100, "mean"), repr_keys=())
BCELoss = _module("BCELoss", "binary_cross_entropy", ("weight", "reduction"), (None, "mean"), repr_keys=())
BCEWithLogitsLoss = _module("BCEWithLogitsLoss", "binary_cross_entropy_with_logits",
                            ("weight", "reduction", "pos_weight"), (None, "mean", None), repr_keys=())
SmoothL1Loss = _module("SmoothL1Loss", "smooth_l1_loss", ("reduction", "beta"), ("mean", 1.0), repr_keys=())
HuberLoss = _module("HuberLoss", "huber_loss", ("reduction", "delta"), ("mean", 1.0), repr_keys=())
KLDivLoss = _module("KLDivLoss", "kl_div", ("reduction", "log_target"), ("mean", False), repr_keys=())


class ParameterList(Module):
    """``nn.ParameterList(values=None)``: parameters registered under "0", "1", ..."""

    def __init__(self, values: Iterable | None = None):
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value) -> ParameterList:
        p = value if isinstance(value, Parameter) else Parameter(value)
        self.register_parameter(str(len(self._parameters)), p)
        return self

    def __getitem__(self, idx: int) -> Parameter:
        return self._parameters[str(idx % len(self._parameters))]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())


__all__ = ["ModuleList", "ModuleDict", "Identity", "Flatten", "Unflatten", "Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d",
           "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "Upsample", "BatchNorm1d",
           "BatchNorm2d", "LayerNorm", "GroupNorm", "Embedding", "RNNCell", "LSTMCell", "GRUCell", "RNN", "LSTM",
           "GRU", "MultiheadAttention", "LeakyReLU", "ELU", "GELU", "SiLU", "Softplus", "Hardtanh", "ReLU", "ReLU6",
           "Hardswish", "Hardsigmoid", "Mish", "SELU", "CELU", "Threshold", "Softsign", "Tanhshrink",
           "LogSigmoid", "Softmax", "LogSoftmax", "Softmin", "GLU", "CosineSimilarity", "PairwiseDistance", "L1Loss",
           "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss", "KLDivLoss", "ParameterList"]
