"""The in-place forms declared from their op (``ops/inplace.py``'s ``_inplace_of``: ``sin_``, ``round_``,
``remainder_``, ``cumsum_``, ``tril_``, ``addmm_``, the ``arc*_`` and ``divide_``-style aliases ...) against torch 2.13:
the written values' bits, dtype, ``grad_fn`` name, version counter and the gradient that reaches the leaf, through a
non-leaf and through a view of one, and torch's refusals (a floating result into an integer target, a result of
another shape, a leaf that requires grad). torch's outcomes are in ``tests/fixtures/inplace_forms.json``, recomputed
live when torch is installed; the client runs the same cases against a live server
(``tests/client/test_inplace_forms.py``). Re-record with
``python -m tests.engine.test_inplace_forms_torch --record``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gradserve_server.engine.torch_compat import torch as etorch

from .torch_cases import not_torchs, record, recorded_cases

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "inplace_forms.json"

_DATA = ("w = torch.tensor([[0.31, -0.72, 0.55], [1.4, -0.05, 0.9]], dtype=D, requires_grad=True)\n"
         "o = torch.tensor([[0.8, 1.7, -0.6], [0.25, 2.2, -1.3]], dtype=D)\n"
         "x = w * 1.5\n")
_UNARY = ("sin", "cos", "tan", "asin", "acos", "atan", "arcsin", "arccos", "arctan", "sinh", "cosh", "floor", "ceil",
          "round", "sign", "square", "erf", "erfinv", "expm1", "log1p", "log2", "log10", "reciprocal", "rsqrt",
          "digamma", "lgamma", "nan_to_num", "absolute", "negative", "trunc", "fix", "frac", "exp2", "deg2rad",
          "rad2deg", "sinc", "logit")  # (sgn_: torch's gradient of a real sgn is a zero tensor without storage)
_BINARY = ("atan2", "arctan2", "hypot", "xlogy", "remainder", "divide", "true_divide", "multiply", "subtract")
CASES: dict[str, str] = {}
for _dtype in ("float64", "float32"):
    for _n in _UNARY:
        CASES[f"x.{_n}_()[{_dtype}]"] = f"r = x.{_n}_()"
        CASES[f"x[0].{_n}_()[{_dtype}]"] = f"r = x[0].{_n}_()\nr = x"
    for _n in _BINARY:
        CASES[f"x.{_n}_(o)[{_dtype}]"] = f"r = x.{_n}_(o)"
        CASES[f"x.{_n}_(0.7)[{_dtype}]"] = f"r = x.{_n}_(0.7)"
    for _code in ("r = x.round_(decimals=1)", "r = x.cumsum_(1)", "r = x.cumprod_(0)", "r = x.tril_()",
                  "r = x.triu_(1)", "r = x.nan_to_num_(nan=0.5)", "x %= o\nr = x", "r = x.logit_(eps=0.25)",
                  "r = torch.tensor([3, -4]).trunc_()", "r = torch.tensor([3, -4]).frac_()",
                  "r = torch.tensor([True]).trunc_()",
                  "r = x.addmm_(o.t(), torch.ones(3, 3, dtype=D), beta=0.5, alpha=2)",
                  "r = x.unsqueeze(0).baddbmm_(o.t().unsqueeze(0), torch.ones(1, 3, 3, dtype=D))",
                  # masked_fill_ with a 0-d tensor value (its gradient: MaskedFillBackward1)
                  "v = (w[0, 1] * 2).detach().requires_grad_()\nr = x.masked_fill_(o > 0, v)\nr.sum().backward()"
                  "\nr = v.grad", "r = x.masked_fill_(o > 0, o[1, 1])", "r = x.masked_fill_(o > 0, o[0])",
                  # refusals: torch's, before anything is written
                  "r = w.sin_()", "r = x.tril_(0)[0].cumsum_(1)", "r = x[0].atan2_(o)",
                  "r = torch.tensor([3, -4]).sin_()", "r = torch.tensor([3, -4]).remainder_(1.5)",
                  "r = torch.tensor([3, -4]).floor_()", "r = torch.tensor([[3, -4]]).cumsum_(0)",
                  # the activations torch.nn.functional writes in place (leaky_relu_ and elu_ save their result:
                  # Backward1, which refuses a negative slope when the backward pass reaches it)
                  "r = torch.nn.functional.leaky_relu_(x, 0.2)", "r = torch.nn.functional.leaky_relu_(x[0])\nr = x",
                  "r = torch.nn.functional.elu_(x)", "r = torch.nn.functional.elu_(x, 0.5)",
                  "r = torch.nn.functional.elu_(x[1], 2.0)\nr = x", "r = torch.nn.functional.hardtanh_(x, -0.5, 0.5)",
                  "r = torch.nn.functional.relu_(x)", "r = torch.nn.functional.leaky_relu_(x, -0.5)",
                  "r = torch.nn.functional.elu_(x, -0.5)", "r = torch.nn.functional.leaky_relu_(w)",
                  "r = torch.nn.functional.elu_(torch.tensor([3, -4]))",
                  "r = torch.nn.functional.hardtanh_(torch.tensor([3, -4]))"):
        CASES[f"{_code}[{_dtype}]"] = _code


def _bits(t) -> list:
    a = np.asarray(t.detach().tolist(), dtype=str(t.dtype).removeprefix("torch."))
    return a.view(np.int64 if a.dtype.itemsize == 8 else np.int32).tolist() if a.dtype.kind == "f" else a.tolist()


def run_case(key: str, torch_mod) -> dict:
    dtype = key.rsplit("[", 1)[1].rstrip("]")
    ns = {"torch": torch_mod, "D": getattr(torch_mod, dtype)}
    try:
        exec(_DATA + CASES[key], ns)  # noqa: S102 - the table's torch code
        r = ns["r"]
        out = {"dtype": str(r.dtype).removeprefix("torch."), "bits": _bits(r), "version": r._version,
               "grad_fn": None if r.grad_fn is None else r.grad_fn.name()}
        if r.requires_grad:
            r.sum().backward()
            out["grad"] = _bits(ns["w"].grad)
        return out
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return {"error": {"type": getattr(exc, "exception", type(exc).__name__), "message": str(exc)}}


@pytest.fixture(scope="module")
def recorded() -> dict:
    return recorded_cases(FIXTURE)


def test_every_case_is_recorded(recorded):
    assert sorted(recorded) == sorted(CASES)


def _close(got: dict, want: dict) -> bool:
    """The same outcome, the values within a few ulps (the kernels' own: docs' deviations, "transcendental
    functions"; digamma and lgamma within tens of ulps) and a NaN wherever torch has one (its sign and
    payload are the kernel's)."""
    if got.keys() != want.keys() or any(got[k] != want[k] for k in got if k not in ("bits", "grad")):
        return False
    dtype = np.float64 if got["dtype"] == "float64" else np.float32
    rtol = 1e-13 if dtype is np.float64 else 2e-6
    for k in ("bits", "grad"):
        if k in got:
            kind = np.int64 if dtype is np.float64 else np.int32
            g, w = (np.asarray(v, kind).view(dtype) for v in (got[k], want[k]))
            if not np.allclose(g, w, rtol=rtol, atol=0, equal_nan=True):
                return False
    return True


def check(run, recorded: dict) -> dict:
    wrong = {}
    for k in CASES:
        got, want = run(k), recorded[k]
        if got != want and not (got.get("dtype", "").startswith("float") and _close(got, want)):
            wrong[k] = (got, want)
    return wrong


def test_engine_matches_recorded_torch(recorded):
    wrong = check(lambda k: run_case(k, etorch), recorded)
    assert not wrong, "\n".join(f"{k}\n  engine: {g}\n  torch:  {w}" for k, (g, w) in list(wrong.items())[:20])


def test_fixture_has_the_facts(recorded):
    assert recorded["r = x.cumsum_(1)[float64]"]["grad_fn"] == "CumsumBackward0"
    assert recorded["x[0].sin_()[float64]"]["grad_fn"] == "torch::autograd::CopySlices"
    assert recorded["r = torch.tensor([3, -4]).sin_()[float64]"]["error"]["message"] == (
        "result type Float can't be cast to the desired output type Long")
    assert recorded["r = w.sin_()[float64]"]["error"]["type"] == "RuntimeError"


def test_recorded_outcomes_are_what_torch_does(recorded):
    wrong = not_torchs(CASES, run_case, recorded)
    assert not wrong, wrong[:20]


if __name__ == "__main__" and "--record" in sys.argv:
    record(FIXTURE, CASES, run_case)
