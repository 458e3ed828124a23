"""``gradserve.torch.optim``: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop`` and ``Adagrad`` with torch's update formulas
(torch/optim/*.py, single-tensor form), as in-place ops recorded under ``no_grad``: a step costs no request of its
own. A parameter whose ``.grad`` is None is skipped, as torch skips it (the gradients of leaves come back
with the request that ran the backward, so this costs no request either)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from gradserve.torch._dtypes import default_float
from gradserve.torch._grad_mode import no_grad
from gradserve.torch._tensor import Tensor, advance_grad_epoch, call_op, capture_inplace, handle_key, replay_inplace


class Optimizer:
    #: the group options torch's optimizer has and this client's does not use, with torch's defaults: written into
    #: state_dict()'s param groups so that torch's load_state_dict finds every key it writes itself
    _torch_group_options: dict = {}
    #: ``_update`` records ops only (no Python state of its own): a step like the last one (``_step_key``) records
    #: its ops again without working them out (``replay_inplace``)
    _pure_update = False
    _last_step: tuple | None = None

    def __init__(self, params: Iterable, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = defaults
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.state: dict[Tensor, dict] = {}
        #: state tensors made with the optimizer (``_make_state``), which ``state`` takes at a parameter's first step
        self._made: dict[Tensor, dict] = {}

    def _make_state(self, *keys_of, fill: float | None = None) -> None:
        """Make each parameter's zero state tensors now (``keys_of(group)``: their keys), sent with the next request,
        rather than at its first step, where torch makes them (``zeros_like``: the same zeros, so the same bits;
        ``fill``: ``full_like`` of it, SGD's -0.0 buffer): then a loop's first step sends the ops of every later
        step, and the server replays the loop one iteration sooner. ``state`` (and ``state_dict()``) still gets
        them at the first step, as torch's."""
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    self._made[p] = {k: self._zeros(p, None, fill) for keys in keys_of for k in keys(group)}

    def _zeros(self, p: Tensor, key: str | None, fill: float | None = None) -> Tensor:
        """The state tensor ``key`` of ``p``'s first step: the one made with the optimizer, else zeros (``fill``s)
        now (``key`` None: made now)."""
        made = None if key is None else self._made.get(p)
        t = None if made is None else made.pop(key, None)
        if t is not None:
            return t
        return _op("zeros_like", p) if fill is None else _op("full_like", p, fill)

    @staticmethod
    def zero_grad_of(params: list[Tensor], set_to_none: bool = True) -> None:
        """One ``zero_grad`` action for all of them (torch: each ``p.grad = None``, or zeroed in place)."""
        if not params:
            return
        ctx = params[0]._ctx
        op = {"op": "zero_grad", "args": [[p._ref(ctx) for p in params]], "kwargs": {"set_to_none": set_to_none}}
        if set_to_none:
            for p in params:
                p._known_grad = (ctx.grad_epoch, None)
            for p in params:  # (a handle of a gradient it drops, still held: a name of its own)
                ctx.materialize(f"{p._name}.grad")
        ctx.record(op)
        if not set_to_none:
            advance_grad_epoch(ctx, in_place=True, detached=True)  # zeroed in place

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
        self._made.clear()  # (a parameter without loaded state makes its zeros at its first step)
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
        self._opt_called = True  # lr_scheduler's check that optimizer.step() ran before scheduler.step()
        loss = None
        if closure is not None:
            from gradserve.torch._grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        with no_grad():
            work = [(p, p.grad, group) for group in self.param_groups for p in group["params"]]
            if not self._pure_update or not work:
                self._steps(work)
                return loss
            key = self._step_key(work)
            last = self._last_step
            if key is not None and last is not None and last[0] == key:
                replay_inplace(work[0][0]._ctx, last[1], self._step_handles(work))
                return loss
            self._last_step = None
            handles = self._step_handles(work)  # (before the step: state it makes is not read by a replay)
            captured = capture_inplace(lambda: self._steps(work))
            if key is not None and captured is not None:
                position = {id(t): i for i, t in enumerate(handles)}
                if all(id(t) in position for _, target, _, others in captured for t in (target, *others)):
                    self._last_step = (key, [(op, position[id(target)], decided, [position[id(t)] for t in others])
                                             for op, target, decided, others in captured])
        return loss

    def _step_handles(self, work: list) -> list:
        """The handles a step reads, in ``_step_key``'s order: each parameter, its gradient, its state's tensors."""
        out = []
        for p, g, _ in work:
            out += [p, g, *[v for v in (self.state.get(p) or {}).values() if isinstance(v, Tensor)]]
        return out

    def _steps(self, work: list) -> None:
        for p, g, group in work:
            if g is not None:
                self._update(p, g, group, self.state.setdefault(p, {}))

    def _step_key(self, work: list) -> tuple | None:
        """What ``_update`` reads, for each parameter: its handle, its gradient's and its state's (names and the
        metadata ``call_op`` decides from), and the group's options; None when a step cannot be replayed."""
        seen: dict[int, int] = {}
        parts: list = [default_float()]
        for p, g, group in work:
            if p._error is not None or g is not None and g._error is not None:
                return None
            # (None: a tensor whose metadata call_op decides by asking: worked out each time)
            p_key = handle_key(p, seen)
            g_key = None if g is None else handle_key(g, seen)
            if p_key is None or g is not None and g_key is None:
                return None
            state = self.state.get(p)
            held: tuple | list = ()
            if state:
                held = []
                for k, v in state.items():
                    if isinstance(v, Tensor):
                        v_key = handle_key(v, seen)
                        if v_key is None:
                            return None
                        held.append((k, v_key, v._name))
                    else:
                        held.append((k, v))
                held = tuple(held)
            parts.append((p_key, p._name, None if g is None else (g_key, g._name), held, id(group)))
        parts.append(tuple([tuple([(k, v) for k, v in group.items() if k != "params"])
                            for group in self.param_groups]))
        return tuple(parts)

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError


def _op(name: str, *args, **kwargs):
    return call_op(name, args, kwargs)


class SGD(Optimizer):
    """``torch.optim.SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
    maximize=False)``."""

    _torch_group_options = {"foreach": None, "differentiable": False, "fused": None}
    _pure_update = True

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})
        self._make_state(lambda g: ("momentum_buffer",) if _steady_first_step(g["momentum"]) else (), fill=-0.0)

    def _update(self, p, grad, group, state):
        d_p = grad if not group["maximize"] else _op("neg", grad)
        if group["weight_decay"]:
            d_p = _op("add", d_p, p, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum:
            buf = state.get("momentum_buffer")
            damping = 1 - group["dampening"]
            if buf is None and _steady_first_step(momentum):
                # torch's first step clones d_p into the buffer. Here the buffer is -0.0s made with the optimizer
                # and the first step runs every later step's ops: -0.0 * momentum is -0.0, the additive identity
                # (-0.0 + x is x bit for bit: zeros of either sign, infinities, quiet NaNs), and alpha is 1 (of
                # 1 - dampening's type: the first step has no dampening), so the buffer is d_p's bits and the
                # loop's second request is already its steady list (the server replays it from the third)
                buf = state["momentum_buffer"] = self._zeros(p, "momentum_buffer", -0.0)
                damping = 1.0 if isinstance(damping, float) else 1
            if buf is None:
                buf = state["momentum_buffer"] = _op("detach", _op("clone", d_p))
            else:
                _op("add_", _op("mul_", buf, momentum), d_p, alpha=damping)
            d_p = _op("add", d_p, buf, alpha=momentum) if group["nesterov"] else buf
        _op("add_", p, d_p, alpha=-group["lr"])


class Adam(Optimizer):
    """``torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
    maximize=False, decoupled_weight_decay=False)``: torch's single-tensor update, op for op (lerp_, addcmul_,
    addcdiv_), so the parameters are torch's bit for bit."""

    _torch_group_options = {"foreach": None, "capturable": False, "differentiable": False, "fused": None,
                            "decoupled_weight_decay": False}

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False, fused=None,
                 decoupled_weight_decay: bool = False):
        _check(lr >= 0.0, f"Invalid learning rate: {lr}")
        _check(eps >= 0.0, f"Invalid epsilon value: {eps}")
        _check(0.0 <= betas[0] < 1.0, f"Invalid beta parameter at index 0: {betas[0]}")
        _check(0.0 <= betas[1] < 1.0, f"Invalid beta parameter at index 1: {betas[1]}")
        _check(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize,
                                  "decoupled_weight_decay": decoupled_weight_decay})
        self._make_state(lambda g: ("exp_avg", "exp_avg_sq"), lambda g: ("max_exp_avg_sq",) if g["amsgrad"] else ())

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

    def _update(self, p, grad, group, state):
        beta1, beta2 = group["betas"]
        if group["maximize"]:
            grad = _op("neg", grad)
        if not state:
            state["step"] = 0
            state["exp_avg"] = self._zeros(p, "exp_avg")
            state["exp_avg_sq"] = self._zeros(p, "exp_avg_sq")
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = self._zeros(p, "max_exp_avg_sq")
            self._made.pop(p, None)
        state["step"] += 1
        step = float(state["step"])  # torch's step is a float32 tensor read back as a float
        if group["weight_decay"]:
            if group.get("decoupled_weight_decay"):
                _op("mul_", p, 1 - group["lr"] * group["weight_decay"])
            else:
                grad = _op("add", grad, p, alpha=group["weight_decay"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        _op("lerp_", exp_avg, grad, 1 - beta1)
        _op("addcmul_", _op("mul_", exp_avg_sq, beta2), grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = group["lr"] / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        if group["amsgrad"]:
            # torch: maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq), the state's tensor written in place
            second = state["max_exp_avg_sq"]
            _op("copy_", second, _op("maximum", second, exp_avg_sq))
        else:
            second = exp_avg_sq
        denom = _op("add_", _op("div", _op("sqrt", second), bias_correction2_sqrt), group["eps"])
        _op("addcdiv_", p, exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """``torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
    maximize=False)``: Adam with decoupled weight decay (``p.mul_(1 - lr * weight_decay)`` first), as torch's."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False, foreach=None,
                 capturable: bool = False, differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)


class RMSprop(Optimizer):
    """``torch.optim.RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
    capturable=False, foreach=None, maximize=False)``: torch's single-tensor update."""

    _torch_group_options = {"capturable": False, "foreach": None, "differentiable": False}

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        _check(lr >= 0.0, f"Invalid learning rate: {lr}")
        _check(eps >= 0.0, f"Invalid epsilon value: {eps}")
        _check(momentum >= 0.0, f"Invalid momentum value: {momentum}")
        _check(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        _check(alpha >= 0.0, f"Invalid alpha value: {alpha}")
        super().__init__(params, {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                                  "weight_decay": weight_decay, "maximize": maximize})
        self._make_state(lambda g: ("square_avg",), lambda g: ("momentum_buffer",) if g["momentum"] > 0 else (),
                         lambda g: ("grad_avg",) if g["centered"] else ())

    _torch_state = Adam._torch_state
    _client_state = Adam._client_state

    def _update(self, p, grad, group, state):
        if group["maximize"]:
            grad = _op("neg", grad)
        if not state:
            state["step"] = 0
            state["square_avg"] = self._zeros(p, "square_avg")
            if group["momentum"] > 0:
                state["momentum_buffer"] = self._zeros(p, "momentum_buffer")
            if group["centered"]:
                state["grad_avg"] = self._zeros(p, "grad_avg")
            self._made.pop(p, None)
        state["step"] += 1
        if group["weight_decay"]:
            grad = _op("add", grad, p, alpha=group["weight_decay"])
        alpha = group["alpha"]
        square_avg = state["square_avg"]
        _op("addcmul_", _op("mul_", square_avg, alpha), grad, grad, value=1 - alpha)
        if group["centered"]:
            grad_avg = state["grad_avg"]
            _op("lerp_", grad_avg, grad, 1 - alpha)
            avg = _op("sqrt_", _op("addcmul", square_avg, grad_avg, grad_avg, value=-1))
        else:
            avg = _op("sqrt", square_avg)
        avg = _op("add_", avg, group["eps"])
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            _op("addcdiv_", _op("mul_", buf, group["momentum"]), grad, avg)
            _op("add_", p, buf, alpha=-group["lr"])
        else:
            _op("addcdiv_", p, grad, avg, value=-group["lr"])


class Adagrad(Optimizer):
    """``torch.optim.Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
    foreach=None, *, maximize=False)``: torch's single-tensor update; its state (step, sum) is made at
    construction, as torch's."""

    _torch_group_options = {"foreach": None, "differentiable": False, "fused": None}

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        _check(lr >= 0.0, f"Invalid learning rate: {lr}")
        _check(lr_decay >= 0.0, f"Invalid lr_decay value: {lr_decay}")
        _check(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        _check(initial_accumulator_value >= 0.0, f"Invalid initial_accumulator_value value: "
                                                 f"{initial_accumulator_value}")
        _check(eps >= 0.0, f"Invalid epsilon value: {eps}")
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "maximize": maximize})
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p] = {"step": 0, "sum": _op("full_like", p, group["initial_accumulator_value"])}

    _torch_state = Adam._torch_state
    _client_state = Adam._client_state

    def _update(self, p, grad, group, state):
        state["step"] += 1
        step = float(state["step"])
        if group["maximize"]:
            grad = _op("neg", grad)
        if group["weight_decay"]:
            grad = _op("add", grad, p, alpha=group["weight_decay"])
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        _op("addcmul_", state["sum"], grad, grad, value=1)
        std = _op("add_", _op("sqrt", state["sum"]), group["eps"])
        _op("addcdiv_", p, grad, std, value=-clr)


def _steady_first_step(momentum) -> bool:
    """Whether SGD's first step can run the steady step's ops on a buffer of -0.0s (``SGD._update``): a finite
    positive, finite momentum (-0.0 * -m is +0.0, -0.0 * inf is NaN)."""
    return momentum > 0 and math.isfinite(momentum)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


from gradserve.torch.optim import lr_scheduler  # noqa: E402 - the submodule, as torch.optim.lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]


def __getattr__(name: str):
    """A name torch has here and the client lacks: torch's AttributeError, saying whose module this is."""
    if name.startswith("__"):
        raise AttributeError(name)
    from gradserve.torch._namespace import missing

    raise missing(f"module 'torch.optim' has no attribute '{name}'")
