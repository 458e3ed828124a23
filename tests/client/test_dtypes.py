"""The narrow integer dtypes through gradserve.torch against a real server: every case of
``tests/engine/dtype_cases.py`` runs as client code and must give torch's recorded outcome (values, dtype,
shape, or exception type and message; ``tests/fixtures/dtype_cases.json``), and the client's own dtype
objects, numpy conversions and reprs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn.functional as F
from tests.engine.dtype_cases import CASES
from tests.engine.test_conformance_ops import run_code, same
from tests.engine.test_dtypes_torch import FIXTURE

RECORDED = json.loads(FIXTURE.read_text())["cases"]


def test_every_dtype_case_through_the_client_gives_torchs_outcome(ctx):
    wrong = {}
    for name, code in CASES.items():
        got = run_code(code + "\ntorch.sync()", torch, F)  # (the client is lazy: an error comes at the sync)
        if not same(got, RECORDED[name]):
            wrong[name] = (got, RECORDED[name])
    assert not wrong, "\n".join(f"{k}\n  client: {g}\n  torch:  {w}" for k, (g, w) in wrong.items())


def test_client_dtype_objects_are_torchs():
    assert [repr(d) for d in (torch.int32, torch.int16, torch.int8, torch.uint8)] == \
        ["torch.int32", "torch.int16", "torch.int8", "torch.uint8"]
    assert torch.int is torch.int32 and torch.short is torch.int16
    assert not torch.int8.is_floating_point and torch.int16.itemsize == 2 and torch.uint8.itemsize == 1


@pytest.mark.parametrize("dtype", ["int32", "int16", "int8", "uint8"])
def test_numpy_arrays_keep_their_narrow_dtype_both_ways(ctx, dtype):
    a = np.array([[1, 2], [3, 127]], dtype)
    t = torch.tensor(a)
    assert t.dtype is getattr(torch, dtype)
    back = t.numpy()
    assert back.dtype == np.dtype(dtype) and np.array_equal(back, a)
    assert torch.from_numpy(a).dtype is getattr(torch, dtype)


def test_unsupported_numpy_dtype_is_refused_not_cast(ctx):
    with pytest.raises(TypeError, match="uint16"):
        torch.tensor(np.array([1, 2], np.uint16))


def test_reprs_show_the_narrow_dtype_as_torch_prints_it(ctx):
    assert repr(torch.tensor([1, 2], dtype=torch.int32)) == "tensor([1, 2], dtype=torch.int32)"
    assert repr(torch.tensor([[200, 3]], dtype=torch.uint8)) == "tensor([[200,   3]], dtype=torch.uint8)"
    assert repr(torch.tensor(-5, dtype=torch.int8)) == "tensor(-5, dtype=torch.int8)"
    assert repr(torch.zeros(0, dtype=torch.int16)) == "tensor([], dtype=torch.int16)"
    assert str(torch.tensor([100, -100], dtype=torch.int8) * 2) == "tensor([-56,  56], dtype=torch.int8)"


def test_client_reprs_match_live_torch(ctx):
    real = pytest.importorskip("torch")
    for code in ("x = T.tensor([1, 2], dtype=T.int32)", "x = T.tensor([[200, 3]], dtype=T.uint8)",
                 "x = T.tensor(-5, dtype=T.int8)", "x = T.zeros(0, dtype=T.int16)",
                 "x = T.tensor([100, -100], dtype=T.int8) * 2", "x = T.arange(12, dtype=T.int16).reshape(3, 4)"):
        mine, theirs = {"T": torch}, {"T": real}
        exec(code, mine)
        exec(code, theirs)
        assert repr(mine["x"]) == repr(theirs["x"]), code
