"""float16/bfloat16 ``scaled_dot_product_attention`` through torch's fused CPU flash route: the engine reproduces
the kernel's blocked float32 arithmetic (online softmax, torch's fast exp on whole vectors of 16 scores, the
probabilities rounded to the type, gradients accumulated in it), so the output and the gradients are torch's
bit for bit (but for the few values ``LOOSE`` allows); the committed fixture holds torch's bits."""

from __future__ import annotations

import json

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.ops.attention import _fexp
from gradserve_server.engine.tensor import Tensor

from .attention_half_cases import CASES, FIXTURE, LOOSE, NP, digest, inputs, options, run_torch

RECORDED = json.loads(FIXTURE.read_text())["cases"]
#: torch's default comparison tolerances of the types (rtol; atol scaled by the largest gradient element)
TOL = {"float16": 1e-3, "bfloat16": 1.6e-2}


def run_engine(name: str, dtype: str) -> dict:
    x = inputs(name, dtype)
    q, k, v = (Tensor(x[n].copy(), requires_grad=True) for n in ("query", "key", "value"))
    kw = options(name)
    if "attn_mask" in x:
        kw["attn_mask"] = Tensor(x["attn_mask"].copy())
    out = E.OPS["scaled_dot_product_attention"].fn(q, k, v, **kw)
    grads = E.grad(out, [q, k, v], Tensor(x["grad"].copy()))
    return {"grad_fn": out.grad_fn.name, "out": out.data, **{n: g.data for n, g in zip(("dq", "dk", "dv"), grads)}}


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    g, w = got.astype(np.float64), want.astype(np.float64)
    return bool(np.allclose(g, w, rtol=TOL[dtype], atol=TOL[dtype] * np.abs(w).max()))


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("name", list(CASES))
def test_half_attention_matches_torchs_recorded_bits(name, dtype):
    got, want = run_engine(name, dtype), RECORDED[f"{name}[{dtype}]"]
    assert got["grad_fn"] == want["grad_fn"] == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert all(got[k].dtype == NP[dtype] for k in ("out", "dq", "dk", "dv"))
    if (name, dtype) not in LOOSE:
        assert [digest(got[k]) for k in ("out", "dq", "dk", "dv")] == [want[k] for k in ("out", "dq", "dk", "dv")]


@pytest.mark.parametrize("dtype", list(NP))
@pytest.mark.parametrize("name", list(CASES))
def test_half_attention_against_torch_itself(name, dtype):
    torch = pytest.importorskip("torch")
    got, want = run_engine(name, dtype), run_torch(torch, name, dtype)
    assert got["grad_fn"] == want["grad_fn"]
    for k in ("out", "dq", "dk", "dv"):
        assert got[k].dtype == NP[dtype]
        if (name, dtype) in LOOSE:
            assert _close(got[k], want[k], dtype) and np.mean(got[k] == want[k]) > 0.99, k
        else:
            assert np.array_equal(got[k], want[k]), k


def test_the_fast_exp_is_within_a_float16_ulp_of_exp_and_saturates_as_torchs():
    x = np.linspace(-87, 0, 200001, dtype=np.float32)
    rel = np.abs(_fexp(x).astype(np.float64) / np.exp(x.astype(np.float64)) - 1)
    assert rel.max() < 2.0**-11 and rel.max() > 2.0**-24  # (an approximation: not libm's exp)
    assert _fexp(np.array([-100.0, 100.0], np.float32)).tolist() == [0.0, np.inf]
