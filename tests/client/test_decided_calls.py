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
