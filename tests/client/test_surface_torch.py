"""The client's devices, legacy spellings, data utilities and torch.func next to live torch (skipped without
torch): the same calls give the same reprs, dtypes, values and error messages."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import gradserve.torch as gtorch

torch = pytest.importorskip("torch")
import torch.utils.data as tdata  # noqa: E402

import gradserve.torch.utils.data as gdata  # noqa: E402


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - compared
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("spec", [("cpu",), ("cuda:1",), ("cpu", 0), ("cuda", 2), ("gpu",), ("cuda", -1),
                                  ("cuda:x",), ("meta",)])
def test_device_specs_print_and_fail_as_torch_s(spec):
    ours = _outcome(lambda: (repr(gtorch.device(*spec)), str(gtorch.device(*spec))))
    theirs = _outcome(lambda: (repr(torch.device(*spec)), str(torch.device(*spec))))
    assert ours == theirs


@pytest.mark.parametrize("make", [
    lambda t: t.Tensor([1, 2]), lambda t: t.Tensor(2, 3).shape, lambda t: t.LongTensor([[1], [2]]),
    lambda t: t.DoubleTensor([0.5]), lambda t: t.BoolTensor([True, False]), lambda t: t.Tensor().shape,
    lambda t: t.zeros(2).type(), lambda t: t.tensor([1]).type(), lambda t: t.tensor([True]).type(),
    lambda t: t.zeros(1, dtype=t.float64).type(), lambda t: t.zeros(2).type(t.int64),
    lambda t: t.zeros(2).type("torch.DoubleTensor"), lambda t: t.FloatTensor(t.ones(2, dtype=t.float64)),
    lambda t: isinstance(t.zeros(1), t.FloatTensor), lambda t: isinstance(t.zeros(1), t.LongTensor),
    lambda t: t.autograd.Variable(t.ones(2), requires_grad=True),
    lambda t: t.tensor([[1.0, 2.0], [3.0, 4.0]]).sum(axis=0, keepdims=True),
    lambda t: t.ones(2).cuda(), lambda t: t.zeros(2, device="cuda"), lambda t: repr(t.set_grad_enabled(True)),
    lambda t: t.cuda.is_available(), lambda t: t.ones(2).to("cpu", t.float64),
])
def test_legacy_spellings_and_devices_as_torch(ctx, make):
    assert _outcome(lambda: repr(make(gtorch))) == _outcome(lambda: repr(make(torch)))


_BATCHES = [
    lambda t, np=np: [1, 2, 3], lambda t: [1.5, 2.5], lambda t: [True, False], lambda t: ["a", "b"],
    lambda t: [(1, 2.0), (3, 4.0)], lambda t: [{"a": 1, "b": [1.0, 2.0]}, {"a": 2, "b": [3.0, 4.0]}],
    lambda t: [np.zeros(2, dtype=np.float32), np.ones(2, dtype=np.float32)],
    lambda t: [np.float64(1.0), np.float64(2.0)], lambda t: [np.int64(3), np.int64(4)],
    lambda t: [t.zeros(2), t.ones(2)], lambda t: [t.tensor(1), t.tensor(2)], lambda t: [[1, 2], [3]],
    lambda t: [collections.namedtuple("P", "x y")(1, 2.0)] * 2, lambda t: [object()],
]


def _plain(value):
    if isinstance(value, (gtorch.Tensor, torch.Tensor)):
        return ("tensor", str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v) for v in value])
    return value


@pytest.mark.parametrize("batch", _BATCHES)
def test_default_collate_as_torch_s(ctx, batch):
    ours = _outcome(lambda: _plain(gdata.default_collate(batch(gtorch))))
    theirs = _outcome(lambda: _plain(tdata.default_collate(batch(torch))))
    if ours[0] == "TypeError":  # (the object's address differs)
        assert theirs[0] == "TypeError" and ours[1].split(";")[0] == theirs[1].split(";")[0]
    else:
        assert ours == theirs


@pytest.mark.parametrize(("batch_size", "drop_last"), [(1, False), (3, False), (3, True), (10, False), (None, False)])
def test_dataloader_batches_as_torch_s(ctx, batch_size, drop_last):
    x = np.arange(14, dtype=np.float32).reshape(7, 2)

    def batches(t, data):
        ds = data.TensorDataset(t.from_numpy(x), t.arange(7))
        loader = data.DataLoader(data.Subset(ds, [6, 1, 2, 0, 5, 4, 3]), batch_size=batch_size, drop_last=drop_last)
        return len(loader), [_plain(b) for b in loader]

    assert batches(gtorch, gdata) == batches(torch, tdata)


@pytest.mark.parametrize("lengths", [[0.3, 0.3, 0.4], [0.5, 0.5], [3, 7], [0.25, 0.75], [1.0]])
def test_random_split_sizes_as_torch_s(ctx, lengths):
    assert [len(s) for s in gdata.random_split(gdata.TensorDataset(gtorch.arange(10)), lengths)] == \
        [len(s) for s in tdata.random_split(tdata.TensorDataset(torch.arange(10)), lengths)]


def _as(t, a):
    return t.tensor(a)


def test_torch_func_values_as_torch_s(ctx):
    rng = np.random.default_rng(0)
    a, b, v = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    m = rng.standard_normal((4, 3)).astype(np.float32)

    def run(t):
        f = t.func

        def fn(x, y):
            return (x.sin() * y).sum() + (x * x * y).sum()

        out = {
            "grad": f.grad(fn, argnums=(0, 1))(_as(t, a), _as(t, b)),
            "gradgrad": f.grad(f.grad(lambda x: (x ** 3).sum() if x.dim() else x ** 3))(_as(t, np.float32(1.5))),
            "jacrev": f.jacrev(lambda x: x.tanh() * 2)(_as(t, a)),
            "jacfwd": f.jacfwd(lambda x, y: x * y.exp(), argnums=1)(_as(t, a), _as(t, b)),
            "hessian": f.hessian(lambda x: (x.exp() * x).sum())(_as(t, a)),
            "jvp": f.jvp(lambda x: x.sin(), (_as(t, a),), (_as(t, v),)),
            "vjp": f.vjp(lambda x: x.cos() * 3, _as(t, a))[1](_as(t, v)),
            "vmap": f.vmap(lambda row, w: (row * w).sum(), in_dims=(0, None))(_as(t, m), _as(t, b)),
            "per_sample": f.vmap(f.grad(lambda w, r: (r * w).sum().tanh()), in_dims=(None, 0))(_as(t, b), _as(t, m)),
        }
        return {k: [x.tolist() for x in (v if isinstance(v, tuple) else (v,))] for k, v in out.items()}

    ours, theirs = run(gtorch), run(torch)
    for key in theirs:
        np.testing.assert_allclose(np.array(ours[key], dtype=object).tolist(), theirs[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)


@pytest.mark.parametrize("call", [
    lambda t: t.func.grad(lambda x: x * 2)(t.ones(2)),
    lambda t: t.func.grad(lambda x: x.sum(), argnums=1)(t.ones(2)),
    lambda t: t.func.grad(lambda x: x.sum())(t.tensor([1, 2])),
    lambda t: t.func.vmap(lambda a, b: a + b)(t.ones(2, 3), t.ones(3, 3)),
    lambda t: t.func.vmap(lambda x: x)(t.ones(())),
    lambda t: t.func.jvp(lambda x: x, t.ones(1), (t.ones(1),)),
])
def test_torch_func_errors_as_torch_s(ctx, call):
    assert _outcome(lambda: call(gtorch)) == _outcome(lambda: call(torch))
