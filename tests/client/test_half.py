"""float16 and bfloat16 through gradserve.torch against a real server: every case of
``tests/engine/half_cases.py`` run as client code gives torch's recorded outcome (``tests/fixtures/half_cases.json``,
bit for bit but for the documented ``INEXACT`` cases), and the client's dtype objects, conversions, values and
reprs (bfloat16 is held as its bits, numpy having no such type)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn.functional as F
from tests.engine.half_cases import CASES, INEXACT
from tests.engine.test_half_torch import FIXTURE, HALF, distance, run_case

RECORDED = json.loads(FIXTURE.read_text())["cases"]


def test_every_half_case_through_the_client_gives_torchs_outcome(ctx):
    wrong = {}
    for name, code in CASES.items():
        for dtype in HALF:
            got = run_case(code + "\ntorch.sync()", dtype, torch, F)  # (lazy: an error comes at the sync)
            want = RECORDED[f"{name}[{dtype}]"]
            if distance(got, want) > INEXACT.get(name, 0):
                wrong[f"{name}[{dtype}]"] = (got, want)
    assert not wrong, "\n".join(f"{k}\n  client: {g}\n  torch:  {w}" for k, (g, w) in wrong.items())


def test_client_half_dtype_objects_are_torchs():
    assert repr(torch.float16) == "torch.float16" and repr(torch.bfloat16) == "torch.bfloat16"
    assert torch.half is torch.float16
    assert torch.float16.is_floating_point and torch.bfloat16.is_floating_point
    assert torch.float16.itemsize == 2 and torch.bfloat16.itemsize == 2


def test_values_and_reprs_are_torchs(ctx):
    x = torch.tensor([0.1, 1.5, -2.25], dtype=torch.float16, requires_grad=True)
    b = torch.tensor([0.1, 1.5, -2.25]).bfloat16()
    assert repr(x) == "tensor([ 0.1000,  1.5000, -2.2500], dtype=torch.float16, requires_grad=True)"
    assert repr(b) == "tensor([ 0.1001,  1.5000, -2.2500], dtype=torch.bfloat16)"
    assert x.tolist() == [0.0999755859375, 1.5, -2.25] and b.tolist() == [0.10009765625, 1.5, -2.25]
    assert b[0].item() == 0.10009765625 and x.dtype is torch.float16 and b.dtype is torch.bfloat16
    (x * 3).sum().backward()
    assert x.grad.dtype is torch.float16 and repr(x.grad) == "tensor([3., 3., 3.], dtype=torch.float16)"
    assert repr(b + x) == "tensor([ 0.2001,  3.0000, -4.5000], grad_fn=<AddBackward0>)"  # float32
    assert x.type() == "torch.HalfTensor" and b.type() == "torch.BFloat16Tensor"
    assert x.detach().type(torch.bfloat16).dtype is torch.bfloat16


def test_numpy_of_float16_works_and_of_bfloat16_raises_torchs_type_error(ctx):
    a = np.array([0.5, -1.25], np.float16)
    t = torch.tensor(a)
    assert t.dtype is torch.float16 and t.numpy().dtype == np.float16 and np.array_equal(t.numpy(), a)
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        t.bfloat16().numpy()
    assert t.bfloat16().float().numpy().tolist() == [0.5, -1.25]


def test_client_half_reprs_match_live_torch(ctx):
    real = pytest.importorskip("torch")
    for code in ("x = T.tensor([0.1, 1.0, -2.5, 65504.0], dtype=T.float16)",
                 "x = T.tensor([1e-5, 3.0, 1e4], dtype=T.bfloat16)", "x = T.tensor(3.3, dtype=T.half)",
                 "x = T.arange(2000, dtype=T.float32).to(T.bfloat16)",
                 "x = T.tensor([float('inf'), float('nan'), 1.0], dtype=T.float16)",
                 "x = T.zeros(2, 0, dtype=T.bfloat16)"):
        mine, theirs = {"T": torch}, {"T": real}
        exec(code, mine)
        exec(code, theirs)
        assert repr(mine["x"]) == repr(theirs["x"]), code


def test_seeded_half_draws_through_the_client_are_torchs_numbers(ctx):
    """randn, normal_, rand and uniform_ of float16/bfloat16 at sizes around torch's block kernel: the values of
    the committed fixture of torch's draws (tests/fixtures/torch_random_half.json), bfloat16 read as float32."""
    import ml_dtypes

    from tests.engine.random_cases import HALF_FIXTURE, digest

    rows = {(r["seed"], r["case"]): r["r"] for r in json.loads(HALF_FIXTURE.read_text())["cases"]}
    draws = {"randn": lambda n, dt: torch.randn(n, dtype=dt), "rand": lambda n, dt: torch.rand(n, dtype=dt),
             "normal_": lambda n, dt: torch.empty(n, dtype=dt).normal_(-2.7, 11.3),
             "uniform_": lambda n, dt: torch.zeros(n, dtype=dt).uniform_(-0.3, 0.7)}
    bad = []
    for dtype, held in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        for name, draw in draws.items():
            for n in (1, 15, 16, 17, 33, 100):
                torch.manual_seed(0)
                t = draw(n, getattr(torch, dtype))
                if digest(np.array(t.tolist(), np.float32).astype(held)) != rows[(0, f"{name}[{n},{dtype}]")]:
                    bad.append(f"{name}[{n},{dtype}]")
    assert not bad


def test_half_attention_through_the_client_gives_torchs_recorded_bits(ctx):
    """scaled_dot_product_attention of 4-d float16/bfloat16 inputs (torch's flash route) and its gradients through
    the client: the bits of tests/fixtures/torch_attention_half.json."""
    from tests.engine.attention_half_cases import FIXTURE as ATTENTION
    from tests.engine.attention_half_cases import NP, digest, inputs, options

    recorded = json.loads(ATTENTION.read_text())["cases"]
    bad = []
    for name in ("small", "gqa", "keys_16"):
        for dtype in NP:
            x, dt = inputs(name, dtype), getattr(torch, dtype)
            q, k, v, g = (torch.tensor(x[n].astype(np.float32), dtype=dt) for n in ("query", "key", "value", "grad"))
            for t in (q, k, v):
                t.requires_grad_()
            out = F.scaled_dot_product_attention(q, k, v, **options(name))
            assert out.grad_fn.name() == "ScaledDotProductFlashAttentionForCpuBackward0"
            out.backward(g)
            got = [digest(np.array(t.tolist(), np.float32).astype(NP[dtype])) for t in (out, q.grad, k.grad, v.grad)]
            if got != [recorded[f"{name}[{dtype}]"][key] for key in ("out", "dq", "dk", "dv")]:
                bad.append(f"{name}[{dtype}]")
    assert not bad
