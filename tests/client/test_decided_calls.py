"""``call_op`` decides a call from its arguments' metadata once per kind of call (``_tensor._DECIDED``): the facts
it knows of results and in-place targets, and torch's refusals, are the same with the decisions kept as without."""

from __future__ import annotations

import pytest

from gradserve.torch import _tensor


def _program(torch) -> list:
    """A few iterations of a training step with the edge cases a kept decision must not blur: the same op on handles
    whose flags differ, an op on one handle twice (x.add_(x)), refusals (an in-place op on a leaf that requires grad,
    shapes that do not broadcast); what the client knows of every result, and the errors, in order."""
    F = torch.nn.functional
    w = torch.tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    x, y = torch.ones(3, 2), torch.zeros(3, 2)
    seen = []

    def note(t):
        seen.append({k: v for k, v in t._view.items() if k != "node"} | {"node": "node" in t._view})
        return t

    for step in range(3):
        h = note(F.linear(x, w, b))
        loss = note(F.mse_loss(note(h.relu()), y))
        loss.backward()
        with torch.no_grad():
            for p in (w, b):
                note(p.add_(p.grad, alpha=-0.1 * (step + 1)))  # (a float of another value: the same decision)
                note(p.grad.add_(p.grad))  # one handle twice
        for call in (lambda: w.add_(1.0), lambda: x + torch.ones(4), lambda: torch.where(x, x, x)):
            try:
                call()
                seen.append("no error")
            except Exception as e:  # noqa: BLE001 - the error is what is compared
                seen.append((type(e).__name__, str(e)))
        note(torch.ones(2, 2).add_(1.0))  # the same op on a handle that does not require grad
        note(x * step)
    return seen


def test_kept_decisions_give_the_facts_and_errors_deciding_each_call_gives(ctx, monkeypatch):
    import gradserve.torch as torch

    _tensor._DECIDED.clear()
    with_kept = _program(torch)
    assert _tensor._DECIDED  # (the program's calls were kept)
    monkeypatch.setattr(_tensor, "_decision_key", lambda *args: None)
    monkeypatch.setattr(_tensor, "_quick_call", lambda *args: _tensor._UNDECIDED)  # (its own reading of the key)
    each_time = _program(torch)
    assert with_kept == each_time
    assert with_kept.count("no error") == 0 and len(with_kept) == 36


@pytest.mark.parametrize("flags", [(True, True), (False, True), (True, False)])
def test_a_kept_decision_is_not_reused_for_a_handle_of_other_flags(ctx, flags):
    import gradserve.torch as torch

    requires_grad, grad_mode = flags
    torch.ones(2).add_(1.0)  # decided for a tensor that does not require grad, in grad mode
    t = torch.ones(2, requires_grad=requires_grad)
    with torch.set_grad_enabled(grad_mode):
        if requires_grad and grad_mode:
            with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
                t.add_(1.0)
        else:
            assert t.add_(1.0).requires_grad is requires_grad


def test_the_short_way_reads_the_key_the_general_way_keeps(ctx, monkeypatch):
    """``_quick_call`` reads a call's decision key in its own pass: for the calls it takes, the key
    ``_decision_key`` makes (else a decision kept by one would not be found by the other, or another's be found)."""
    import gradserve.torch as torch

    read = []
    real = _tensor._DECIDED

    class Spy(dict):
        def get(self, key, default=None):
            read.append(key)
            return real.get(key, default)

    w = torch.tensor([[0.5, -0.2], [0.1, 0.3], [0.2, 0.1]], requires_grad=True)
    x, p = torch.ones(3, 2), torch.nn.Parameter(torch.ones(2))
    calls = [("mul", (w, x)), ("mul", (x, x)), ("add", (x, 2.0)), ("add", (x, p)), ("mul", (x, True)),
             ("add_", (x, x)), ("pow", (w, 2)), ("div", (x, float("nan")))]
    for op, args in calls:
        _tensor.call_op(op, args, {})  # (decided by the general way)
    monkeypatch.setattr(_tensor, "_DECIDED", Spy())
    for grad_mode in (True, False):
        with torch.set_grad_enabled(grad_mode):
            for op, args in calls:
                read.clear()
                want = _tensor._decision_key(op, False, grad_mode, args, {})  # (before: add_ changes x)
                _tensor.call_op(op, args, {})
                assert read and read[0] == want, op


def test_a_loop_whose_metadata_changes_at_some_iteration_is_decided_anew(ctx):
    """A loop's calls are taken the short way once decided; at the iteration where a dtype, a shape,
    requires_grad or the grad mode changes, the call is decided again: the facts and refusals are torch's."""
    torch = pytest.importorskip("torch")
    import gradserve.torch as gtorch

    def run(lib) -> list:
        seen = []
        for k in range(6):
            dtype = lib.float64 if k >= 2 else lib.float32
            n = 3 if k >= 3 else 2
            a = lib.ones(n, dtype=dtype, requires_grad=k >= 4)
            b = lib.ones(n) * 2
            with lib.set_grad_enabled(k != 5):
                c = a * b
                d = (c + a).exp()
                seen.append((str(c.dtype), tuple(c.shape), c.requires_grad, c.is_leaf, str(d.dtype),
                             d.requires_grad, d.grad_fn is None))
                try:
                    a.add_(1.0)
                    seen.append(("add_", a.requires_grad, str(a.dtype)))
                except RuntimeError as e:
                    seen.append(("refused", str(e)))
        return seen

    assert run(gtorch) == run(torch)
