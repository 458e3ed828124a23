"""``gradserve.torch.optim``: ``SGD`` and ``Adam`` with torch's update formulas (torch/optim/sgd.py and
adam.py, single-tensor form), as in-place ops recorded under ``no_grad``: a step costs no request of its
own. A parameter whose ``.grad`` is None is skipped, as torch skips it (the gradients of leaves come back
with the request that ran the backward, so this costs no request either)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from gradserve.torch._grad_mode import no_grad
from gradserve.torch._tensor import Tensor, call_op


class Optimizer:
    #: the group options torch's optimizer has and this client's does not use, with torch's defaults: written into
    #: state_dict()'s param groups so that torch's load_state_dict finds every key it writes itself
    _torch_group_options: dict = {}

    def __init__(self, params: Iterable, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.state: dict[Tensor, dict] = {}

    @staticmethod
    def zero_grad_of(params: list[Tensor], set_to_none: bool = True) -> None:
        """One ``zero_grad`` action for all of them (torch: each ``p.grad = None``, or zeroed in place)."""
        if not params:
            return
        ctx = params[0]._ctx
        ctx.record({"op": "zero_grad", "args": [[p._ref(ctx) for p in params]], "kwargs": {"set_to_none": set_to_none}})
        if set_to_none:
            for p in params:
                p._known_grad = (ctx.grad_epoch, None)
        else:
            ctx.grad_epoch += 1  # gradients zeroed in place

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.zero_grad_of([p for g in self.param_groups for p in g["params"]], set_to_none)

    def state_dict(self) -> dict:
        """``Optimizer.state_dict()``: ``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``
        with parameters numbered across the groups, as torch's (torch's own keys and value types: see
        ``_torch_state``)."""
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            for p in g["params"]:
                index.setdefault(id(p), len(index))
            packed = {k: v for k, v in g.items() if k != "params"}
            for k, v in self._torch_group_options.items():
                packed.setdefault(k, v)
            packed["params"] = [index[id(p)] for p in g["params"]]
            groups.append(packed)
        state = {index[id(p)]: self._torch_state(s) for p, s in self.state.items() if s and id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """``Optimizer.load_state_dict``: the groups' options and each parameter's state (tensors cloned, cast
        to the parameter's dtype), with torch's checks on the number and sizes of the groups."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        params = {i: p for s, g in zip(groups, self.param_groups) for i, p in zip(s["params"], g["params"])}
        state: dict = {}
        with no_grad():
            for i, saved in state_dict["state"].items():
                if i in params:
                    state[params[i]] = self._client_state(params[i], saved)
        self.state = state
        self.param_groups = [{**s, "params": g["params"]} for s, g in zip(groups, self.param_groups)]

    def _torch_state(self, state: dict) -> dict:
        """One parameter's state as torch keeps it."""
        return dict(state)

    def _client_state(self, p: Tensor, saved: dict) -> dict:
        """One parameter's state as loaded: tensors cloned (torch deep-copies) and cast to ``p``'s dtype."""
        out = {}
        for k, v in saved.items():
            if isinstance(v, Tensor):
                v = _op("clone", v)
                if v.is_floating_point() and v.dtype != p.dtype:
                    v = v.to(p.dtype)
            out[k] = v
        return out

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from gradserve.torch._grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is not None:
                        self._update(p, g, group, self.state.setdefault(p, {}))
        return loss

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError


def _op(name: str, *args, **kwargs):
    return call_op(name, args, kwargs)


class SGD(Optimizer):
    """``torch.optim.SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
    maximize=False)``."""

    _torch_group_options = {"foreach": None, "differentiable": False, "fused": None}

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def _update(self, p, grad, group, state):
        d_p = grad if not group["maximize"] else _op("neg", grad)
        if group["weight_decay"]:
            d_p = _op("add", d_p, p, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = _op("detach", _op("clone", d_p))
            else:
                _op("add_", _op("mul_", buf, momentum), d_p, alpha=1 - group["dampening"])
            d_p = _op("add", d_p, buf, alpha=momentum) if group["nesterov"] else buf
        _op("add_", p, d_p, alpha=-group["lr"])


class Adam(Optimizer):
    """``torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
    maximize=False)``."""

    _torch_group_options = {"foreach": None, "capturable": False, "differentiable": False, "fused": None,
                            "decoupled_weight_decay": False}

    def _torch_state(self, state: dict) -> dict:
        """torch keeps ``step`` as a float32 scalar tensor."""
        out = dict(state)
        out["step"] = call_op("tensor", (float(state["step"]),), {})
        return out

    def _client_state(self, p: Tensor, saved: dict) -> dict:
        out = super()._client_state(p, saved)
        step = out.get("step", 0)
        out["step"] = int(step.item()) if isinstance(step, Tensor) else int(step)
        return out

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})

    def _update(self, p, grad, group, state):
        beta1, beta2 = group["betas"]
        if group["maximize"]:
            grad = _op("neg", grad)
        if group["weight_decay"]:
            grad = _op("add", grad, p, alpha=group["weight_decay"])
        if not state:
            state["step"] = 0
            state["exp_avg"] = _op("zeros_like", p)
            state["exp_avg_sq"] = _op("zeros_like", p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = _op("zeros_like", p)
        state["step"] += 1
        step = state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        # exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        state["exp_avg"] = exp_avg = _op("lerp", exp_avg, grad, 1 - beta1)
        _op("add_", _op("mul_", exp_avg_sq, beta2), _op("mul", grad, grad), alpha=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
        step_size = group["lr"] / bias_correction1
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = _op("maximum", state["max_exp_avg_sq"], exp_avg_sq)
            second = state["max_exp_avg_sq"]
        else:
            second = exp_avg_sq
        denom = _op("add_", _op("div", _op("sqrt", second), bias_correction2_sqrt), group["eps"])
        # param.addcdiv_(exp_avg, denom, value=-step_size)
        _op("add_", p, _op("div", exp_avg, denom), alpha=-step_size)


__all__ = ["Optimizer", "SGD", "Adam"]
