"""The client's layouts (``gradserve.torch._layout``) against torch's strides: chains of views of random tensors,
views that torch refuses, elementwise results of differently laid out operands, layout-preserving copies. Without
torch the scenarios (``scenarios/eager.txt``'s strides) check the same through a server."""

from __future__ import annotations

import random

import pytest

from gradserve.torch import _layout as L

torch = pytest.importorskip("torch")


def _views(rng: random.Random, t, layout: tuple):
    """A random view of ``t`` (torch) and the client's (shape, layout) of it, or None where none applies."""
    shape = tuple(t.shape)
    n = len(shape)
    kind = rng.choice(["t", "transpose", "permute", "unsqueeze", "squeeze", "narrow", "select", "expand", "slice",
                       "diagonal", "movedim"])
    args: dict = {}
    if kind == "t" and n <= 2:
        return t.t(), L.VIEWS["t"](shape, layout, args.get, None)
    if kind == "transpose" and n >= 2:
        args = {"dim0": rng.randrange(-n, n), "dim1": rng.randrange(-n, n)}
        return t.transpose(args["dim0"], args["dim1"]), L.VIEWS["transpose"](shape, layout, args.get, None)
    if kind == "permute" and n >= 1:
        args = {"dims": rng.sample(range(n), n)}
        return t.permute(args["dims"]), L.VIEWS["permute"](shape, layout, args.get, None)
    if kind == "movedim" and n >= 2:
        args = {"source": rng.randrange(n), "destination": rng.randrange(n)}
        return t.movedim(args["source"], args["destination"]), L.VIEWS["movedim"](shape, layout, args.get, None)
    if kind == "unsqueeze":
        args = {"dim": rng.randrange(-n - 1, n + 1)}
        return t.unsqueeze(args["dim"]), L.VIEWS["unsqueeze"](shape, layout, args.get, None)
    if kind == "squeeze":
        args = {"dim": rng.randrange(n)} if n and rng.random() < 0.5 else {}
        got = t.squeeze(args["dim"]) if args else t.squeeze()
        return got, L.VIEWS["squeeze"](shape, layout, args.get, None)
    if kind == "narrow" and n and shape[0]:
        d = rng.randrange(n)
        start = rng.randrange(shape[d]) if shape[d] else 0
        args = {"dim": d, "start": start, "length": rng.randrange(shape[d] - start + 1)}
        return t.narrow(d, args["start"], args["length"]), L.VIEWS["narrow"](shape, layout, args.get, None)
    if kind == "select" and n and all(shape):
        d = rng.randrange(n)
        args = {"dim": d, "index": rng.randrange(-shape[d], shape[d])}
        return t.select(d, args["index"]), L.VIEWS["select"](shape, layout, args.get, None)
    if kind == "expand":
        size = [rng.choice([n_, 3]) if n_ == 1 else rng.choice([n_, -1]) for n_ in shape]
        size = [2] * rng.randrange(2) + size
        args = {"sizes": size}
        return t.expand(size), L.VIEWS["expand"](shape, layout, args.get, None)
    if kind == "slice" and n:
        key = tuple(rng.choice([slice(None), slice(1, None, 2), 0, None, slice(0, 2)]) if shape[d] > 1
                    else slice(None) for d in range(n))
        args = {"index": key}
        return t[key], L.VIEWS["getitem"](shape, layout, args.get, None)
    if kind == "diagonal" and n >= 2:
        args = {"offset": rng.randrange(-2, 3), "dim1": 0, "dim2": n - 1}
        return t.diagonal(args["offset"], 0, n - 1), L.VIEWS["diagonal"](shape, layout, args.get, None)
    return None


@pytest.mark.parametrize("seed", range(40))
def test_chains_of_views_have_torchs_strides_and_views_fail_where_torchs_do(seed):
    rng = random.Random(seed)
    shape = tuple(rng.choice([1, 2, 3, 4]) for _ in range(rng.randrange(1, 5)))
    t = torch.zeros(shape)
    got = (shape, (L.contiguous(shape), 0))
    for _ in range(6):
        step = _views(rng, t, got[1])
        if step is None:
            continue
        t, got = step
        assert got is not None
        assert got[0] == tuple(t.shape)
        assert got[1] == (t.stride(), t.storage_offset()), f"{got[1]} != {t.stride()}"
        assert L.is_contiguous(got[0], got[1][0]) == t.is_contiguous()
        pick = rng.random()
        target = [t.numel()] if pick < 0.4 else list(t.shape) if pick < 0.6 else [-1, *t.shape[-1:]] if t.dim() \
            else [1]  # (the same shape too: a view's strides are computed anew, a size-1 dimension's included)
        if target and target[0] == -1 and t.numel() == 0:
            continue
        try:
            want = t.view(target)
        except RuntimeError as e:
            assert L.VIEW_ERROR in str(e)
            with pytest.raises(Exception, match="view size is not compatible"):
                L.VIEWS["view"](got[0], got[1], {}.get, tuple(t.reshape(target).shape))
            reshaped = L.VIEWS["reshape"](got[0], got[1], {}.get, tuple(t.reshape(target).shape))
            assert reshaped[1][0] == t.reshape(target).stride()
        else:
            viewed = L.VIEWS["view"](got[0], got[1], {}.get, tuple(want.shape))
            assert viewed[1] == (want.stride(), want.storage_offset())
            reshaped = L.VIEWS["reshape"](got[0], got[1], {}.get, tuple(want.shape))
            assert reshaped[1] == (t.reshape(target).stride(), t.reshape(target).storage_offset())
        assert L.preserved(got[0], got[1][0]) == t.clone().stride()


@pytest.mark.parametrize("seed", range(30))
def test_elementwise_results_are_laid_out_as_torchs(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 4)
    shape = tuple(rng.choice([2, 3, 4]) for _ in range(n))
    operands = []
    for _ in range(rng.randrange(1, 4)):
        t = torch.zeros(shape)
        if rng.random() < 0.5:
            perm = rng.sample(range(n), n)
            t = torch.zeros([shape[p] for p in perm]).permute([perm.index(d) for d in range(n)])
        if rng.random() < 0.3:  # broadcast: a size-1 or a missing dimension
            d = rng.randrange(n)
            t = t.narrow(d, 0, 1) if rng.random() < 0.5 else t[(0,) * rng.randrange(1, n + 1)] if n > 1 else t
        operands.append(t)
    want = operands[0]
    for o in operands[1:]:
        want = want + o
    if len(operands) == 1:
        want = operands[0] * 2
    got = L.elementwise(tuple(want.shape), [(tuple(o.shape), o.stride()) for o in operands[:2]]) \
        if len(operands) <= 2 else None
    if got is not None:
        assert got == want.stride(), [(tuple(o.shape), o.stride()) for o in operands]


@pytest.mark.parametrize("seed", range(30))
def test_elementwise_results_with_a_python_number_are_laid_out_as_torchs(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 4)
    shape = [rng.choice([1, 1, 2, 3]) for _ in range(n)]
    perm = rng.sample(range(n), n)
    t = torch.zeros([shape[p] for p in perm]).permute([perm.index(d) for d in range(n)])
    # (a number is an operand of its own: inputs of one shape no longer keep their strides as they are)
    assert L.elementwise(tuple(t.shape), [(tuple(t.shape), t.stride())], True) == (t * 2).stride(), t.stride()
    assert L.elementwise(tuple(t.shape), [(tuple(t.shape), t.stride())]) == (t + torch.zeros_like(t)).stride()
