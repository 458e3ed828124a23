"""A leaf's gradient fetched after a backward is read by the leaf's name (``_t1.grad``), as a hand-written op list
reads it: nothing is bound for it, so an optimizer's step sends the list a raw loop sends. A handle still held when
that name would stop naming its tensor (``zero_grad`` to None, ``x.grad =``, a backward with create_graph, the leaf
dropped, a traced function, a dual level, a second thread) is bound to a name of its own first. Each program runs
on the client and, when it is installed, on torch: the values and identities read are the same."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gradserve.torch as gtorch


def _sent(ctx, monkeypatch) -> list:
    """The op lists the client sends from now on."""
    sent = []
    real = ctx.client.run_ops

    def spy(session_id, ops, **kwargs):
        sent.append(ops)
        return real(session_id, ops, **kwargs)
    monkeypatch.setattr(ctx.client, "run_ops", spy)
    return sent


def _names_read(ops: list) -> set:
    names = set()

    def walk(v):
        if isinstance(v, str):
            names.add(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
    for op in ops:
        walk(op.get("args"))
        walk(op.get("kwargs"))
    return names


def test_an_sgd_step_reads_the_gradients_by_their_leaves_names(ctx, monkeypatch):
    w = gtorch.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    b = gtorch.tensor([0.1, 0.2], requires_grad=True)
    x = gtorch.tensor([[1.0, 2.0], [3.0, 4.0]])
    opt = gtorch.optim.SGD([w, b], lr=0.1, momentum=0.9)
    sent = _sent(ctx, monkeypatch)
    for _ in range(4):
        opt.zero_grad()
        loss = (x @ w + b).pow(2).mean()
        loss.backward()
        opt.step()
        loss.item()
    steady = sent[-1]
    ops = [op["op"] for op in steady]
    assert "bind" not in ops, ops
    assert {f"{w._name}.grad", f"{b._name}.grad"} <= _names_read(steady)
    dels = [n for op in steady if op["op"] == "del" for n in op["args"]]
    assert not any(n.endswith(".grad") for n in dels), dels


def _kept_across(torch) -> list:
    """Gradient handles kept across everything that replaces or drops the gradient they name."""
    seen = []
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    (w * 3).sum().backward()
    g1 = w.grad
    opt.zero_grad()  # w.grad = None: g1 is still the old tensor
    seen += [w.grad is None, g1.tolist()]
    (w * w).sum().backward()
    g2 = w.grad
    seen += [g2 is not g1, g2.tolist(), g1.tolist()]
    w.grad = torch.tensor([7.0, 8.0])  # replaced
    seen += [g2.tolist(), w.grad.tolist()]
    g3 = w.grad
    w.grad = None
    seen += [g3.tolist(), w.grad is None]
    (w ** 2).sum().backward()
    g4 = w.grad
    (w ** 3).sum().backward(create_graph=True)  # old + new: a new tensor
    seen += [w.grad is not g4, g4.tolist(), w.grad.tolist(), w.grad.requires_grad]
    w.grad = None
    (w * 5).sum().backward()
    g5 = w.grad
    seen += [g5.grad is None, g5.is_leaf, g5.requires_grad]  # (a gradient's own .grad)
    g5.mul_(2)  # in place, through its leaf's name
    seen += [w.grad.tolist(), w.grad is g5]
    with torch.no_grad():
        w -= 0.1 * g5
    seen += [w.tolist()]
    return seen


def _leaf_dropped(torch) -> list:
    def grads():
        a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        c = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
        (a * c).sum().backward()
        return a.grad, c.grad  # a and c are dropped here
    ga, gc = grads()
    out = [ga.tolist(), gc.tolist()]
    ga.add_(1)
    return out + [ga.tolist(), (ga * gc).sum().item()]


def _traced_and_dual(torch) -> list:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    (w * w).sum().backward()
    g = w.grad
    x = torch.tensor([0.5, 0.25])
    jac = torch.autograd.functional.jacobian(lambda v: v * g, x)
    out = [jac.tolist()]
    fw = torch.autograd.forward_ad
    with fw.dual_level():
        dual = fw.make_dual(x, torch.ones(2))
        y = dual * g
        out.append(fw.unpack_dual(y).tangent.tolist())
    out.append(g.tolist())
    return out


@pytest.mark.parametrize("program", [_kept_across, _leaf_dropped, _traced_and_dual])
def test_kept_gradients_are_torch_s(ctx, program):
    torch = pytest.importorskip("torch")
    assert program(gtorch) == program(torch)


def test_the_kept_values_without_torch(ctx):
    """What torch gives for the programs (read off torch 2.13), for a machine without it."""
    assert _leaf_dropped(gtorch) == [[0.5, 0.5, 0.5], [1.0, 2.0, 3.0], [1.5, 1.5, 1.5], 9.0]
    assert _traced_and_dual(gtorch) == [[[2.0, 0.0], [0.0, -4.0]], [2.0, -4.0], [2.0, -4.0]]
    assert _kept_across(gtorch) == [
        True, [3.0, 3.0],
        True, [2.0, 4.0], [3.0, 3.0],
        [2.0, 4.0], [7.0, 8.0],
        [7.0, 8.0], True,
        True, [2.0, 4.0], [5.0, 16.0], True,
        True, True, False,
        [10.0, 10.0], True,
        [0.0, 1.0]]


def test_a_second_thread_binds_the_kept_gradients(ctx):
    w = gtorch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    g = w.grad
    assert g._name == f"{w._name}.grad"
    results = []

    def other():  # (it records into w's session: a recorder of its own)
        results.append((w.detach() * 2).sum().item())
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert results == [6.0]
    assert "." not in g._name  # bound to a name of its own when the second thread began recording
    opt = gtorch.optim.SGD([w], lr=1.0)
    opt.zero_grad()
    (w * 5).sum().backward()
    assert g.tolist() == [3.0, 3.0] and w.grad.tolist() == [5.0, 5.0]


def test_a_bind_the_server_did_not_apply_leaves_the_gradient_readable(ctx):
    """A failed request applies nothing from its failing op on: ``zero_grad`` did not run, so the gradient a kept
    handle names is still its leaf's ``.grad`` (the handle is not an error as a tensor the request made is)."""
    w = gtorch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    g = w.grad
    assert g._name == f"{w._name}.grad"
    opt = gtorch.optim.SGD([w], lr=1.0)
    bad = gtorch.ones(2)[gtorch.tensor([5])]  # (an index only the server can check)
    opt.zero_grad()  # binds g first, then drops w.grad
    with pytest.raises(IndexError):
        gtorch.sync()
    assert g._name == f"{w._name}.grad" and g.tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="never computed"):
        bad.tolist()


def _returns(ctx, monkeypatch) -> list:
    """The ``return`` of each op list request the client sends from now on."""
    asked = []
    real = ctx.client.run_ops

    def spy(session_id, ops, **kwargs):
        asked.append(dict(kwargs.get("returns") or {}))
        return real(session_id, ops, **kwargs)
    monkeypatch.setattr(ctx.client, "run_ops", spy)
    return asked


def test_gradients_come_without_values_until_the_program_reads_one(ctx, monkeypatch):
    """A loop that only steps with its gradients is not sent their values; the first read of one brings every
    gradient held under its leaf's name in that one request, and from then on they come with their values."""
    w = gtorch.tensor([0.5, -1.0], requires_grad=True)
    b = gtorch.tensor(0.1, requires_grad=True)
    x = gtorch.tensor([1.0, 2.0])
    opt = gtorch.optim.SGD([w, b], lr=0.1)
    asked = _returns(ctx, monkeypatch)
    for _ in range(3):
        opt.zero_grad()
        (w * x + b).pow(2).sum().backward()
        opt.step()
    levels = {name: level for r in asked for name, level in r.items() if name.endswith(".grad")}
    assert levels and set(levels.values()) == {"meta"}, asked
    opt.zero_grad()
    (w * x + b).pow(2).sum().backward()
    gw, gb = w.grad, b.grad  # (known: no request)
    before = len(asked)
    values = (gw.tolist(), gb.item())
    stored = ctx.client.tensor(ctx.session_id, f"{w._name}.grad")["data"], \
        ctx.client.tensor(ctx.session_id, f"{b._name}.grad")["data"]
    assert [np.float32(v).tolist() for v in values] == [np.float32(v).tolist() for v in stored]  # (the server's)
    assert len(asked) == before + 1  # one request, for both gradients
    assert b.grad.item() == values[1] and len(asked) == before + 1
    del gw, gb
    opt.zero_grad()
    (w * x + b).pow(2).sum().backward()
    assert {level for name, level in asked[-1].items() if name.endswith(".grad")} == {"auto"}, asked[-1]
    assert w.grad.tolist() and len(asked) == before + 2  # prefetched with its values
