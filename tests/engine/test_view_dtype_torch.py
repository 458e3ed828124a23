"""``Tensor.view(dtype)`` against torch 2.13 (``view_dtype_cases.py``): the bits reinterpreted, the result's shape,
strides and dtype, torch's refusals word for word, the result's autograd facts (never requires grad, no grad_fn,
not an autograd view) and writes through it seen by its source with one version counter. torch's outcomes are in
``tests/fixtures/view_dtype.json``, checked without torch; with torch installed they are recomputed live.
Re-record with ``python -m tests.engine.test_view_dtype_torch --record``."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from gradserve_server.engine.torch_compat import torch as etorch
from gradserve_server.engine.torch_compat import unwrap

from .torch_cases import not_torchs, record, recorded_cases
from .view_dtype_cases import case_code, cases

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "view_dtype.json"
CASES = {key: (kind, name, src, dst) for key, kind, name, src, dst in cases()}


def torch_bytes(r, torch) -> str:
    """``r``'s bytes in row-major order, as hex, read through torch's (or the client's) own ops."""
    r = r.detach()
    if r.dtype == torch.bool:  # (torch's copy of a bool writes 0 or 1: read the bytes before copying)
        r = r.view(torch.uint8)
    return bytes(r.contiguous().reshape(-1).view(torch.uint8).tolist()).hex()


def _torch_layout(r) -> dict:
    return {"bytes": torch_bytes(r, _torch()), "stride": list(r.stride()) if r.numel() else None}


def _engine_layout(r) -> dict:
    a = unwrap(r).data
    return {"bytes": np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes().hex(),
            "stride": [s // a.itemsize for s in a.strides] if a.size else None}


def _torch():
    import torch
    return torch


def run_case(key: str, torch_mod, layout, suffix: str = "") -> dict:
    """The outcome of case ``key`` run by ``torch_mod``; ``layout(r)``: its bytes and strides as that backend knows
    them (the client: its bytes only); ``suffix``: code run after the case's (the client's sync)."""
    kind, _, src, dst = CASES[key]
    ns = {"torch": torch_mod, "S": getattr(torch_mod, src), "T": getattr(torch_mod, dst)}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(case_code(kind, CASES[key][1], src) + suffix, ns)  # noqa: S102 - the case table's torch code
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return {"error": {"type": getattr(exc, "exception", type(exc).__name__), "message": str(exc)}}
    r = ns["r"]
    out = {"dtype": str(r.dtype).removeprefix("torch."), "shape": list(r.shape), **layout(r),
           "requires_grad": r.requires_grad, "is_leaf": r.is_leaf,
           "grad_fn": None if r.grad_fn is None else type(r.grad_fn).__name__,
           "is_view": getattr(r, "_base", None) is not None,  # (the client has no _base)
           "version": r._version}
    if "v" in ns:
        out["view_version"] = ns["v"]._version
    return out


@pytest.fixture(scope="module")
def recorded() -> dict:
    return recorded_cases(FIXTURE)


def test_every_case_is_recorded(recorded):
    assert sorted(recorded) == sorted(CASES)


def test_engine_matches_recorded_torch(recorded):
    wrong = {}
    for key in CASES:
        got, want = run_case(key, etorch, _engine_layout), recorded[key]
        if got != want:
            wrong[key] = (got, want)
    assert not wrong, "\n".join(f"{k}\n  engine: {g}\n  torch:  {w}" for k, (g, w) in list(wrong.items())[:20]) + \
        f"\n({len(wrong)} cases differ)"


def test_fixture_covers_every_refusal_and_reinterprets_bits(recorded):
    # the fixture must be able to fail the engine: refusals of each of torch's rules, and values that a conversion
    # would not give (float16 1.5 read as int16 is 15872, not 1)
    messages = {v["error"]["message"].split(" to view ")[0] for v in recorded.values() if "error" in v}
    assert {"self.dim() cannot be 0", "self.stride(-1) must be 1", "self.size(-1) must be divisible by 2",
            "self.storage_offset() must be divisible by 2", "self.stride(0) must be divisible by 2"} <= messages
    half = recorded["layout:contiguous[float16->int16]"]
    assert np.frombuffer(bytes.fromhex(half["bytes"]), np.int16)[0] == 15872


def test_recorded_outcomes_are_what_torch_does(recorded):
    wrong = not_torchs(CASES, lambda k, t: run_case(k, t, _torch_layout), recorded)
    assert not wrong, wrong[:20]


# ----- what the case table does not show: torch 2.13's facts, checked live when torch is installed ----------------

SAVED_RESULT_CHANGED = ("one of the variables needed for gradient computation has been modified by an inplace "
                        "operation: [torch.FloatTensor [4]], which is output 0 of Exp, is at version 1; expected "
                        "version 0 instead. Hint: enable anomaly detection to find the operation that failed to "
                        "compute its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")


def _saved_result_changed_through_a_dtype_view(torch_mod) -> str:
    x = torch_mod.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    e = x.exp()
    e.view(torch_mod.int32).add_(1)  # the version counter is e's: exp's saved result is stale
    try:
        e.sum().backward()
    except Exception as exc:  # noqa: BLE001 - torch's RuntimeError, the engine's VersionMismatchError
        return str(exc)
    return ""


def _view_of_a_view_after_a_dtype_write(torch_mod) -> tuple:
    x = torch_mod.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = x * 1
    s = y[1:]
    s.view(torch_mod.int32).zero_()  # s's base changed: its history is regenerated, gradients still flow
    s.sum().backward()
    return type(s.grad_fn).__name__, x.grad.tolist(), y._version


def _tangent_of_a_dtype_view(torch_mod):
    fw = torch_mod.autograd.forward_ad
    with fw.dual_level():
        p = fw.make_dual(torch_mod.tensor([1.0, 2.0]), torch_mod.tensor([3.0, 4.0]))
        return [fw.unpack_dual(p.view(t)).tangent for t in (torch_mod.float32, torch_mod.float16, torch_mod.int32)]


def _shape_views(torch_mod) -> tuple:
    x = torch_mod.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    a, b = x.view(4), x.view(size=(1, 4))
    return type(a.grad_fn).__name__, list(b.shape), a._base is x, b.requires_grad


@pytest.mark.parametrize("check,want", [
    (_saved_result_changed_through_a_dtype_view, SAVED_RESULT_CHANGED),
    (_view_of_a_view_after_a_dtype_write, ("AsStridedBackward0", [0.0, 1.0, 1.0, 1.0], 1)),
    (_tangent_of_a_dtype_view, [None, None, None]),
    (_shape_views, ("ViewBackward0", [1, 4], True, True)),
])
def test_dtype_views_share_the_version_counter_and_carry_no_autograd_as_in_torch(check, want):
    assert check(etorch) == want
    torch = pytest.importorskip("torch")
    assert check(torch) == want


if __name__ == "__main__" and "--record" in sys.argv:
    record(FIXTURE, CASES, lambda k, t: run_case(k, t, _torch_layout))
