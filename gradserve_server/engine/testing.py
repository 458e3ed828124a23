"""``gradcheck`` and ``gradgradcheck``: analytical against numerical derivatives in float64.

Mirrors ``torch.autograd.gradcheck`` (slow mode): the analytical Jacobian is built row by row with one
vector-Jacobian product per output element (``engine.grad`` with a one-hot ``grad_outputs``), the numerical
one column by column with central differences ``(f(x + eps) - f(x - eps)) / (2 eps)``; they must agree
within ``atol + rtol * |numerical|``. ``gradgradcheck`` applies the same check to the function
``(inputs, v) -> grad(fn(inputs), inputs, v, create_graph=True)``, i.e. it differentiates the
first-order VJP (with respect to the inputs and to the upstream vector ``v``) through the graph that
``create_graph=True`` recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .autograd import grad
from .grad_mode import enable_grad
from .tensor import Tensor


def _is_diff_input(t) -> bool:
    return isinstance(t, Tensor) and t.requires_grad and t.data.dtype == np.float64


def _outputs(value) -> tuple:
    if isinstance(value, Tensor):
        return (value,)
    if isinstance(value, (tuple, list)):
        return tuple(value)
    raise TypeError(f"gradcheck: fn must return a Tensor or a sequence of Tensors, got {type(value).__name__}")


def _check_inputs(inputs: Sequence) -> list[int]:
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    for i in diff:
        if inputs[i].data.dtype != np.float64:
            raise AssertionError(f"gradcheck: input {i} requires grad but is {inputs[i].dtype}; use float64 inputs")
    if not diff:
        raise AssertionError("gradcheck: no input requires grad")
    return diff


def _evaluate(fn: Callable, inputs: Sequence, diff: list[int], i: int | None = None, k: int | None = None,
              delta: float = 0.0) -> list[np.ndarray]:
    """fn's outputs (as float64 arrays) with element k of input i moved by delta. Fresh leaves that require
    grad, with grad mode on: gradgradcheck's function differentiates inside."""
    args = list(inputs)
    for j in diff:
        data = inputs[j].data.copy()
        if j == i:
            data.reshape(-1)[k] += delta
        args[j] = Tensor(data, requires_grad=True)
    with enable_grad():
        outs = _outputs(fn(*args))
    return [np.asarray(o.data, dtype=np.float64) if isinstance(o, Tensor) else None for o in outs]


def _numerical(fn, inputs, diff, eps) -> list[list[np.ndarray]]:
    """jac[o][d] of shape (numel(output o), numel(input diff[d]))."""
    base = _evaluate(fn, inputs, diff)
    jac = [[np.zeros((0 if b is None else b.size, inputs[i].data.size)) for i in diff] for b in base]
    for d, i in enumerate(diff):
        for k in range(inputs[i].data.size):
            plus = _evaluate(fn, inputs, diff, i, k, eps)
            minus = _evaluate(fn, inputs, diff, i, k, -eps)
            for o, (a, b) in enumerate(zip(plus, minus)):
                if a is not None:
                    jac[o][d][:, k] = ((a - b) / (2 * eps)).reshape(-1)
    return jac


def _analytical(fn, inputs, diff) -> list[list[np.ndarray]]:
    outs = _outputs(fn(*inputs))
    targets = [inputs[i] for i in diff]
    jac = []
    for out in outs:
        if not isinstance(out, Tensor):
            jac.append([np.zeros((0, inputs[i].data.size)) for i in diff])
            continue
        rows = [np.zeros((out.data.size, inputs[i].data.size)) for i in diff]
        if out.requires_grad and out.data.dtype.kind in "fV":
            for r in range(out.data.size):
                onehot = np.zeros(out.data.size, dtype=out.data.dtype)
                onehot[r] = 1
                gs = grad(out, targets, Tensor(onehot.reshape(out.data.shape)), retain_graph=True,
                          allow_unused=True)
                for d, g in enumerate(gs):
                    if g is None:
                        continue
                    t = targets[d]
                    if g.data.shape != t.data.shape or g.data.dtype != t.data.dtype:
                        raise AssertionError(
                            f"gradcheck: gradient for input {diff[d]} has {g.dtype}{list(g.data.shape)}, "
                            f"expected {t.dtype}{list(t.data.shape)}")
                    rows[d][r, :] = g.data.reshape(-1)
        jac.append(rows)
    return jac


def _compare(analytical, numerical, diff, atol, rtol, what: str) -> None:
    for o, (arows, nrows) in enumerate(zip(analytical, numerical)):
        for d, (a, n) in enumerate(zip(arows, nrows)):
            if a.shape != n.shape:
                raise AssertionError(f"{what}: Jacobian shapes differ for output {o}, input {diff[d]}: "
                                     f"{a.shape} vs {n.shape}")
            err = np.abs(a - n)
            bad = ~(err <= atol + rtol * np.abs(n))
            if bad.any():
                idx = np.unravel_index(np.argmax(np.where(bad, err, -1.0)), a.shape)
                raise AssertionError(
                    f"{what}: Jacobian mismatch for output {o} with respect to input {diff[d]}: max error "
                    f"{np.max(np.where(np.isnan(err), np.inf, err)):.3g} (output element {idx[0]}, input element "
                    f"{idx[1]}: analytical {a[idx]!r}, numerical {n[idx]!r}; atol={atol}, rtol={rtol})\n"
                    f"analytical:\n{a}\nnumerical:\n{n}")


def gradcheck(fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """Check fn's gradients against central finite differences. ``inputs``: float64 tensors that require
    grad (differentiated), other tensors and values (passed through). True, or an AssertionError naming
    the output, the input index and the largest error."""
    inputs = tuple(inputs)
    diff = _check_inputs(inputs)
    _compare(_analytical(fn, inputs, diff), _numerical(fn, inputs, diff, eps), diff, atol, rtol, "gradcheck")
    return True


def gradgradcheck(fn: Callable, inputs: Sequence, grad_outputs: Sequence | None = None, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0) -> bool:
    """Check second derivatives: gradcheck of the first-order VJP ``v -> v . J`` computed with
    ``create_graph=True``, with respect to the inputs and to ``v`` (random unless given)."""
    inputs = tuple(inputs)
    diff = _check_inputs(inputs)
    outs = [o for o in _outputs(fn(*inputs))]
    rng = np.random.default_rng(seed)
    if grad_outputs is None:
        grad_outputs = [Tensor(rng.standard_normal(o.data.shape), requires_grad=True) for o in outs
                        if isinstance(o, Tensor) and o.requires_grad]
    grad_outputs = tuple(grad_outputs)
    n = len(inputs)

    def first_order(*args):
        xs, vs = args[:n], args[n:]
        ys = [o for o in _outputs(fn(*xs)) if isinstance(o, Tensor) and o.requires_grad]
        targets = [xs[i] for i in diff]
        live = [(y, v) for y, v in zip(ys, vs)]
        if not live or not any(t.requires_grad for t in targets):
            return tuple(Tensor(np.zeros(t.data.shape)) for t in targets)
        gs = grad([y for y, _ in live], targets, [v for _, v in live], create_graph=True, allow_unused=True)
        return tuple(Tensor(np.zeros(t.data.shape)) if g is None else g for g, t in zip(gs, targets))

    all_inputs = inputs + grad_outputs
    diff2 = _check_inputs(all_inputs)
    _compare(_analytical(first_order, all_inputs, diff2), _numerical(first_order, all_inputs, diff2, eps), diff2,
             atol, rtol, "gradgradcheck")
    return True
