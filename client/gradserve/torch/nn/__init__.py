"""``gradserve.torch.nn``: a small ``torch.nn``: ``Module`` (parameter and submodule registration),
``Parameter``, ``Linear`` (torch's initial values, ``nn.init``), ``Dropout``, ``Sequential``, ``ReLU``, ``Tanh``,
``Sigmoid``, ``MSELoss`` and ``CrossEntropyLoss``. Layers call ``nn.functional``: their ops are recorded like any other.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator

import gradserve.torch as torch
from gradserve.torch import _context, _device
from gradserve.torch._tensor import Tensor
from gradserve.torch.nn import functional as F
from gradserve.torch.nn import init


class Parameter(Tensor):
    """``nn.Parameter(data, requires_grad=True)``: a leaf (a detached alias of ``data``) that a Module
    registers; prints as ``Parameter containing:``."""

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        ctx = data._ctx if data is not None else _context.current()
        if data is None:
            data = torch.tensor([])
        p = cls._new(ctx, data._storage)
        ctx.record({"op": "detach", "args": [data._ref(ctx)], "out": p._name}, (p,))
        if requires_grad:
            ctx.record({"op": "requires_grad_", "args": [p._name, True]})
        p._know(is_leaf=True, requires_grad=requires_grad, grad_fn=None, retains_grad=False)
        p._shape, p._dtype, p._known_grad = data._shape, data._dtype, (ctx.grad_epoch, None)
        return p

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    @classmethod
    def _copy_of(cls, values: Tensor, requires_grad: bool) -> Parameter:
        return cls(values, requires_grad)


class _IncompatibleKeys(collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns (torch's repr when nothing is missing or unexpected)."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _quoted(keys: list[str]) -> str:
    return ", ".join(f'"{k}"' for k in keys)


class RemovableHandle:
    """What a ``register_*_hook`` returns (torch.utils.hooks.RemovableHandle): ``remove()`` takes the hook out; a
    ``with`` block removes it at its end."""

    _next_id = [0]

    def __init__(self, table: dict):
        self._table = table
        self.id = RemovableHandle._next_id[0]
        RemovableHandle._next_id[0] += 1

    def remove(self) -> None:
        self._table.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _call_with_hooks(module, hooks: dict, args: tuple, kwargs: dict):
    """torch's Module call with hooks: the pre-hooks (in order, each seeing the previous one's arguments), forward,
    then the forward hooks (each seeing the previous one's output)."""
    for hook, flags in list(hooks["pre"].values()):
        if flags["with_kwargs"]:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but "
                                       f"got {result}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    try:
        output = module.forward(*args, **kwargs)
    except Exception:
        for hook, flags in list(hooks["post"].values()):
            if flags["always_call"]:
                try:
                    hook(module, args, kwargs, None) if flags["with_kwargs"] else hook(module, args, None)
                except Exception:  # noqa: BLE001, S110 - torch raises forward's exception, not the hook's
                    pass
        raise
    for hook, flags in list(hooks["post"].values()):
        result = hook(module, args, kwargs, output) if flags["with_kwargs"] else hook(module, args, output)
        if result is not None:
            output = result
    return output


class Module:
    """``torch.nn.Module``: attributes that are Parameters or Modules are registered in assignment order."""

    _version = 1  # torch's per-class state-dict version (kept in state_dict()._metadata)

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        if name in self._buffers and not isinstance(value, (Parameter, Module)):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__module__}.{type(value).__name__}' as buffer "
                                f"'{name}' (torch.Tensor or None expected)")
            self._buffers[name] = value
            object.__setattr__(self, name, value)
            return
        if name in self._parameters and value is not None and not isinstance(value, Parameter):
            raise TypeError(f"cannot assign '{type(value).__module__}.{type(value).__name__}' as parameter "
                            f"'{name}' (torch.nn.Parameter or None expected)")
        if isinstance(value, Parameter):
            self._modules.pop(name, None)
            self._buffers.pop(name, None)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._parameters.pop(name, None)
            self._buffers.pop(name, None)
            self._modules[name] = value
        elif name in self._parameters:  # None: the parameter slot stays, empty (torch)
            self._parameters[name] = None
        elif name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__module__}.{type(value).__name__}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            self._modules[name] = None
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent_buffers_set.discard(name)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if "." in name:
            raise KeyError("parameter name can't contain \".\"")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__module__}.{type(param).__name__}' object to parameter "
                            f"'{name}' (torch.nn.Parameter or None required)")
        self._parameters[name] = param
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """``Module.register_buffer``: state that is not a parameter (BatchNorm's running statistics), in
        ``buffers()`` and, when persistent, in the state dict."""
        if "." in name:
            raise KeyError("buffer name can't contain \".\"")
        if name == "":
            raise KeyError("buffer name can't be empty string \"\"")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__module__}.{type(tensor).__name__}' object to buffer "
                            f"'{name}' (torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__module__}.{type(module).__name__} is not a Module subclass")
        if "." in name:
            raise KeyError(f"module name can't contain \".\", got: {name}")
        self._modules[name] = module
        object.__setattr__(self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        mod = self
        for item in target.split(".") if target else ():
            if item not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        for name, module in self.named_modules(prefix=prefix) if recurse else [(prefix, self)]:
            for bname, b in module._buffers.items():
                if b is None or (remove_duplicate and id(b) in seen):
                    continue
                seen.add(id(b))
                yield (f"{name}.{bname}" if name else bname), b

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def apply(self, fn) -> Module:
        """``Module.apply(fn)``: fn on every submodule (children first), then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        hooks = self.__dict__.get("_hooks")
        if not hooks:
            return self.forward(*args, **kwargs)
        return _call_with_hooks(self, hooks, args, kwargs)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (``with_kwargs``: ``hook(module, args, kwargs)``) before each forward; what it
        returns, unless None, replaces the arguments (a non-tuple is the one argument; with kwargs, an
        ``(args, kwargs)`` pair)."""
        return self._add_hook("pre", hook, prepend, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` (``with_kwargs``: ``hook(module, args, kwargs, output)``) after each
        forward; what it returns, unless None, replaces the output; ``always_call``: called when forward raises
        too."""
        return self._add_hook("post", hook, prepend, with_kwargs=with_kwargs, always_call=always_call)

    def _add_hook(self, kind: str, hook, prepend: bool, **flags) -> RemovableHandle:
        hooks = self.__dict__.get("_hooks")
        if hooks is None:
            hooks = {"pre": {}, "post": {}}
            object.__setattr__(self, "_hooks", hooks)
        handle = RemovableHandle(hooks[kind])
        table = hooks[kind]
        table[handle.id] = (hook, flags)
        if prepend:
            table_items = list(table.items())
            table.clear()
            table.update([table_items[-1], *table_items[:-1]])
        return handle

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for name, module in self.named_modules(prefix=prefix) if recurse else [(prefix, self)]:
            for pname, p in module._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{name}.{pname}" if name else pname), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """``Module.state_dict()``: an OrderedDict of parameter name -> detached tensor (the Parameter itself with
        ``keep_vars``), with torch's ``_metadata`` (each module's version), so that torch.save writes torch's."""
        if destination is None:
            destination = collections.OrderedDict()
            destination._metadata = collections.OrderedDict()
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = {"version": self._version}
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=f"{prefix}{name}.", keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> _IncompatibleKeys:
        """``Module.load_state_dict(state_dict, strict=True)``: each parameter takes the value of its key (copied
        in place under no_grad; replaced by it with ``assign``); torch's errors for missing and unexpected keys
        (when ``strict``) and for shape mismatches, raised before anything is copied."""
        if not isinstance(state_dict, collections.abc.Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors, copies = [], [], [], []
        for prefix, module in self.named_modules(remove_duplicate=False):
            prefix = f"{prefix}." if prefix else ""
            persistent = {n: b for n, b in module._buffers.items() if n not in module._non_persistent_buffers_set}
            for name, param in (*module._parameters.items(), *persistent.items()):
                key = prefix + name
                if param is None:
                    continue
                if key not in state_dict:
                    missing.append(key)
                    continue
                value = state_dict[key]
                if not isinstance(value, Tensor):
                    errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or Tensor-like '
                                  f"object from checkpoint but received {type(value)}")
                elif value.shape != param.shape:
                    errors.append(f"size mismatch for {key}: copying a param with shape {value.shape} from "
                                  f"checkpoint, the shape in current model is {param.shape}.")
                else:
                    copies.append((module, name, param, value))
            for key in state_dict:
                if key.startswith(prefix):
                    first = key[len(prefix):].split(".", 1)[0]
                    if first not in module._modules and first not in module._parameters and first not in persistent:
                        unexpected.append(key)
        if strict:
            if unexpected:
                errors.insert(0, f"Unexpected key(s) in state_dict: {_quoted(unexpected)}. ")
            if missing:
                errors.insert(0, f"Missing key(s) in state_dict: {_quoted(missing)}. ")
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                    "\n\t".join(errors)))
        with torch.no_grad():
            for module, name, param, value in copies:
                if assign and name in module._buffers:
                    setattr(module, name, value)
                elif assign:
                    setattr(module, name, Parameter(value, param.requires_grad))
                else:
                    param.copy_(value)
        return _IncompatibleKeys(missing, unexpected)

    def to(self, *args, **kwargs) -> Module:
        """``module.to(device)``, ``module.to(dtype)``, ``module.to(device, dtype)``, ``module.to(tensor)``: devices
        are checked (cpu only); a floating dtype converts the floating parameters (each becomes a new Parameter:
        an optimizer made before holds the old ones, unlike torch where the Parameter object stays)."""
        target, device = kwargs.get("dtype"), kwargs.get("device")
        for a in args:
            if isinstance(a, Tensor):
                target = a.dtype
            elif isinstance(a, torch.dtype):
                target = a
            elif not isinstance(a, bool):  # (non_blocking)
                device = a
        if device is not None:
            _device.check(device)
        if target is None:
            return self
        if not target.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={target}")
        for _, module in self.named_modules():
            for name, p in list(module._parameters.items()):
                if p is not None and p.is_floating_point() and p.dtype != target:
                    with torch.no_grad():
                        setattr(module, name, Parameter(p.to(target), p.requires_grad))
        return self

    def cpu(self) -> Module:
        return self

    def cuda(self, device=None) -> Module:
        raise AssertionError(_device.NO_CUDA)

    def double(self) -> Module:
        return self.to(torch.float64)

    def float(self) -> Module:
        return self.to(torch.float32)

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def zero_grad(self, set_to_none: bool = True) -> None:
        torch.optim.Optimizer.zero_grad_of(list(self.parameters()), set_to_none)

    def train(self, mode: bool = True) -> Module:
        for _, m in self.named_modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        if not lines:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


class Linear(Module):
    """``nn.Linear(in_features, out_features, bias=True, dtype=None)``: torch's default initialisation
    (``reset_parameters``: kaiming_uniform_ with a=sqrt(5), the bias uniform in ±1/sqrt(in_features)), drawn
    from the session's generator: torch's values for torch's seed."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        if device is not None:
            _device.check(device)
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        self.weight = Parameter(torch.zeros(out_features, in_features, dtype=dtype))
        self.bias = Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Dropout(Module):
    """``nn.Dropout(p=0.5, inplace=False)``: ``F.dropout(input, p, self.training, inplace)``, torch's mask."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:
        if self.inplace:
            return F.dropout(input, self.p, self.training, True)
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Sequential(Module):
    """``nn.Sequential(*modules)`` or ``nn.Sequential(OrderedDict)``: indexing, slicing, len, iteration, append."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], collections.OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return type(self)(collections.OrderedDict(items[idx]))
        n = len(items)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return items[idx % n][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, list(self._modules)[idx], module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [list(self._modules)[idx]]
        for k in keys:
            delattr(self, k)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


def _activation(name: str):
    class Activation(Module):
        def forward(self, input: Tensor) -> Tensor:
            return getattr(F, name)(input)

    Activation.__name__ = Activation.__qualname__ = {"tanh": "Tanh", "sigmoid": "Sigmoid"}[name]
    return Activation


Tanh, Sigmoid = _activation("tanh"), _activation("sigmoid")


class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(Module):
    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        self.weight, self.ignore_index = weight, ignore_index
        self.reduction, self.label_smoothing = reduction, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        kwargs = {"ignore_index": self.ignore_index, "reduction": self.reduction}
        if self.weight is not None:
            kwargs["weight"] = self.weight
        if self.label_smoothing:
            kwargs["label_smoothing"] = self.label_smoothing
        return F.cross_entropy(input, target, **kwargs)


from gradserve.torch.nn import modules as _modules  # noqa: E402 - the layers need Module, Parameter and Linear
from gradserve.torch.nn import utils  # noqa: E402

globals().update({name: getattr(_modules, name) for name in _modules.__all__})

__all__ = ["Module", "Parameter", "Linear", "Sequential", "Tanh", "Sigmoid", "MSELoss", "CrossEntropyLoss",
           "functional"]
__all__ += [*_modules.__all__, "utils", "init", "Dropout"]


def __getattr__(name: str):
    """A name torch has here and the client lacks: torch's AttributeError, saying whose module this is."""
    if name.startswith("__"):
        raise AttributeError(name)
    from gradserve.torch._namespace import missing

    raise missing(f"module 'torch.nn' has no attribute '{name}'")
