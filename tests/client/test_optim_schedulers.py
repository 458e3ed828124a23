"""gradserve.torch.optim against torch.optim on a real server: every optimizer's parameters after a few steps with
given gradients equal torch's to float32 rounding (torch's single-tensor formulas, op for op), their state_dicts have
torch's keys, and every scheduler sets torch's learning rates (and momentum for OneCycleLR) epoch by epoch,
including the order warning. Without torch only the torch-free checks run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradserve.torch as torch

OPTIMIZERS = [
    ("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.5, "maximize": True}),
    ("Adam", {"lr": 0.01}), ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01}), ("AdamW", {"lr": 0.01, "betas": (0.8, 0.9), "amsgrad": True}),
    ("RMSprop", {"lr": 0.01}), ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.1}),
    ("Adagrad", {"lr": 0.1}), ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.1}),
]


def _train(mod, name: str, options: dict, steps: int = 5):
    """Parameters stepped with the same given gradients (a float32 weight and bias), so that only the update's
    arithmetic is compared."""
    rng = np.random.default_rng(7)
    w0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    params = [mod.nn.Parameter(mod.tensor(w0.tolist())), mod.nn.Parameter(mod.tensor(b0.tolist()))]
    opt = getattr(mod.optim, name)(params, **options)
    for _ in range(steps):
        for p in params:
            p.grad = mod.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32).tolist())
        opt.step()
    return [np.array(p.detach().tolist(), dtype=np.float32) for p in params], opt.state_dict()


@pytest.mark.parametrize("name, options", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)])
def test_optimizer_steps_are_torch_s(ctx, name, options):
    """torch's formulas op for op; torch's vectorized CPU kernels fuse some multiply-adds (add with alpha, lerp,
    addcmul) on the leading elements only, so a float32 value may differ from torch's in its last bit."""
    real = pytest.importorskip("torch")
    got, got_state = _train(torch, name, options)
    ref, ref_state = _train(real, name, options)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-7)
    assert got_state["param_groups"] == ref_state["param_groups"]
    assert {k: sorted(v) for k, v in got_state["state"].items()} == {
        k: sorted(v) for k, v in ref_state["state"].items()}


def test_a_seeded_model_trains_as_torch_s(ctx):
    """A seeded MLP and Adam, end to end: torch's values to float32 rounding (the matmuls' summation order is
    numpy's, not MKL's, so the last bit may differ)."""
    real = pytest.importorskip("torch")
    outs = []
    for mod in (torch, real):
        mod.manual_seed(1)
        model = mod.nn.Sequential(mod.nn.Linear(3, 4), mod.nn.Tanh(), mod.nn.Linear(4, 1))
        opt = mod.optim.Adam(model.parameters(), lr=0.01)
        x, y = mod.rand(5, 3), mod.rand(5, 1)
        for _ in range(4):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        outs.append([np.array(p.detach().tolist()) for p in model.parameters()])
    for g, r in zip(*outs):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


SCHEDULERS = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}), ("MultiStepLR", {"milestones": [2, 5, 5], "gamma": 0.1}),
    ("ExponentialLR", {"gamma": 0.9}), ("CosineAnnealingLR", {"T_max": 4, "eta_min": 0.001}),
    ("LambdaLR", {"lr_lambda": lambda epoch: 0.95 ** epoch}),
    ("OneCycleLR", {"max_lr": 0.5, "total_steps": 12}),
    ("OneCycleLR", {"max_lr": [0.5], "epochs": 3, "steps_per_epoch": 4, "three_phase": True,
                    "anneal_strategy": "linear"}),
]


def _schedule(mod, name: str, options: dict, optimizer: str = "SGD"):
    p = mod.nn.Parameter(mod.ones(2))
    opt = getattr(mod.optim, optimizer)([p], lr=0.1, **({"momentum": 0.9} if optimizer == "SGD" else {}))
    sched = getattr(mod.optim.lr_scheduler, name)(opt, **options)
    seen = []
    for _ in range(11):
        opt.step()
        sched.step()
        group = opt.param_groups[0]
        seen.append((sched.get_last_lr()[0], group.get("momentum"), group.get("betas")))
    return seen


@pytest.mark.parametrize("name, options", SCHEDULERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SCHEDULERS)])
def test_scheduler_sets_torch_s_learning_rates(ctx, name, options):
    real = pytest.importorskip("torch")
    for optimizer in ("SGD", "Adam"):
        assert _schedule(torch, name, options, optimizer) == _schedule(real, name, options, optimizer)


def test_reduce_lr_on_plateau_follows_the_metric(ctx):
    real = pytest.importorskip("torch")
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85, 0.85, 0.85]
    runs = []
    for mod in (torch, real):
        p = mod.nn.Parameter(mod.ones(2))
        opt = mod.optim.SGD([p], lr=0.1)
        sched = mod.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1)
        lrs = []
        for m in metrics:
            sched.step(mod.tensor(m))
            lrs.append(opt.param_groups[0]["lr"])
        runs.append(lrs)
    assert runs[0] == runs[1] and runs[0][-1] < 0.1


def test_scheduler_before_optimizer_step_warns_as_torch(ctx):
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched.step()
    assert any("Detected call of `lr_scheduler.step()` before `optimizer.step()`" in str(w.message) for w in caught)
    assert sched.get_last_lr() == [pytest.approx(0.01)] and sched.state_dict()["last_epoch"] == 1
