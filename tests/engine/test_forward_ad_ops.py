"""Every differentiable op's forward (JVP) formula on its sample inputs (tests/engine/samples.py), float64:

* against central finite differences along the tangent: ``J v ~ (f(x + eps v) - f(x - eps v)) / 2 eps``;
* against the VJP: ``<J v, u> == <v, J^T u>`` for random ``v`` and ``u``;
* forward-over-reverse: the JVP of ``x -> grad(f(x), x, u, create_graph=True)`` against finite differences
  of that gradient (this reaches the backward-of-backward primitives, TanhBackwardBackward0 ...).

A differentiable primitive without a forward formula fails ``test_every_primitive_has_a_forward_formula``
unless it is in ``registry.NO_JVP`` (torch has no formula either: its NotImplementedError is raised).
"""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine.autograd import grad
from gradserve_server.engine.forward_ad import dual_level, make_dual, unpack_dual
from gradserve_server.engine.grad_mode import enable_grad
from gradserve_server.engine.registry import JVPS, NO_JVP, PRIMS
from gradserve_server.engine.tensor import Tensor

from .samples import SAMPLES, as_function

# Samples whose forward check is skipped, with the reason ("<op>[<i>]"; "::fwd_over_rev" suffix for the
# forward-over-reverse check). Keep empty unless a sample cannot be checked this way.
_FUSED = "torch's fused CPU attention kernel has no forward-mode formula: the engine raises torch's NotImplementedError"
SKIP: dict[str, str] = {f"normal[{i}]": "torch.normal's derivative is zero by definition (its JVP too), not "
                                        "the finite difference" for i in range(3)}
SKIP.update({"scaled_dot_product_attention[2]": _FUSED, "scaled_dot_product_attention[3]": _FUSED})

_REACHED: set[str] = set()


def _cases(kind: str):
    out = []
    for name in sorted(SAMPLES):
        for i, sample in enumerate(SAMPLES[name]):
            if "no gradient" in sample.note:
                continue
            if kind == "fwd_over_rev" and not sample.gradgrad:
                continue
            key = f"{name}[{i}]" + (f"::{kind}" if kind != "jvp" else "")
            marks = [pytest.mark.skip(reason=SKIP[key])] if key in SKIP else []
            out.append(pytest.param(name, sample, id=key, marks=marks))
    return out


def _diff(inputs):
    return [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]


def _fresh(inputs, diff, shift=None, eps=0.0):
    args = list(inputs)
    for k, i in enumerate(diff):
        d = inputs[i].data.copy()
        if shift is not None:
            d = d + eps * shift[k]
        args[i] = Tensor(d, requires_grad=True)
    return args


def _outs(value):
    vals = value if isinstance(value, tuple) else (value,)
    return [o if isinstance(o, Tensor) and o.data.dtype.kind == "f" else None for o in vals]


@pytest.fixture(autouse=True, scope="module")
def _count_jvp_calls():
    """Note which forward formulas the samples run (for test_samples_reach_every_forward_formula)."""
    def counting(name, fn):
        def wrapper(ctx, *tangents):
            _REACHED.add(name)
            return fn(ctx, *tangents)
        return wrapper

    with pytest.MonkeyPatch.context() as mp:
        for name, fn in list(JVPS.items()):
            mp.setitem(JVPS, name, counting(name, fn))
        yield


def _jvp(fn, inputs, diff, tangents):
    """(primal outputs, their tangents) of fn at inputs along tangents."""
    args = _fresh(inputs, diff)
    with enable_grad(), dual_level():
        for k, i in enumerate(diff):
            args[i] = make_dual(args[i], Tensor(tangents[k]))
        outs = _outs(fn(*args))
        res = [None if o is None else unpack_dual(o) for o in outs]
    return ([None if r is None else r.primal.data for r in res],
            [None if r is None or r.tangent is None else r.tangent for r in res])


def _fd(fn, inputs, diff, tangents, eps):
    plus = _outs(fn(*_fresh(inputs, diff, tangents, eps)))
    minus = _outs(fn(*_fresh(inputs, diff, tangents, -eps)))
    return [None if p is None else (p.data.astype(np.float64) - m.data.astype(np.float64)) / (2 * eps)
            for p, m in zip(plus, minus)]


def _tangents(inputs, diff, rng):
    return [rng.standard_normal(inputs[i].data.shape) for i in diff]


def _tol(sample):
    t = dict(eps=1e-6, atol=1e-5, rtol=1e-3)
    t.update(sample.tol)
    return t


@pytest.mark.parametrize("op_name, sample", _cases("jvp"))
def test_jvp_matches_finite_differences_and_the_vjp(op_name, sample):
    inputs, fn = as_function(op_name, sample)
    diff = _diff(inputs)
    rng = np.random.default_rng(7)
    v = _tangents(inputs, diff, rng)
    tol = _tol(sample)
    primal, jv = _jvp(fn, inputs, diff, v)
    ref = _outs(fn(*_fresh(inputs, diff)))
    fd = _fd(fn, inputs, diff, v, tol["eps"])
    for k, (p, t, r, n) in enumerate(zip(primal, jv, ref, fd)):
        if r is None:
            assert t is None, f"output {k} is not floating point but got a tangent"
            continue
        np.testing.assert_array_equal(p, r.data)  # forward AD leaves the values alone
        assert t is not None, f"output {k} has no tangent"
        assert t.data.shape == r.data.shape, (t.data.shape, r.data.shape)
        np.testing.assert_allclose(t.data, n, atol=tol["atol"], rtol=tol["rtol"], err_msg=f"output {k} vs FD")
    # <J v, u> == <v, J^T u>
    args = _fresh(inputs, diff)
    outs = [o for o in _outs(fn(*args))]
    live = [(k, o) for k, o in enumerate(outs) if o is not None and o.requires_grad]
    if not live:
        return
    us = [rng.standard_normal(o.data.shape) for _, o in live]
    gs = grad([o for _, o in live], [args[i] for i in diff], [Tensor(u.astype(o.data.dtype)) for u, (_, o) in
                                                             zip(us, live)], allow_unused=True)
    lhs = sum(float(np.sum(jv[k].data * u)) for u, (k, _) in zip(us, live))
    rhs = sum(float(np.sum(vk * g.data)) for vk, g in zip(v, gs) if g is not None)
    assert lhs == pytest.approx(rhs, rel=1e-6 if not sample.tol else 1e-3, abs=1e-8 if not sample.tol else 1e-4)


@pytest.mark.parametrize("op_name, sample", _cases("fwd_over_rev"))
def test_forward_over_reverse(op_name, sample):
    """The JVP of (x, u) -> grad(f(x), x, u, create_graph=True), along tangents of both x and u."""
    inputs, fn = as_function(op_name, sample)
    diff0 = _diff(inputs)
    rng = np.random.default_rng(11)
    probe = _outs(fn(*_fresh(inputs, diff0)))
    live = [k for k, o in enumerate(probe) if o is not None and o.requires_grad]
    if not live:
        pytest.skip("no differentiable output")
    n = len(inputs)
    inputs = list(inputs) + [Tensor(rng.standard_normal(probe[k].data.shape), requires_grad=True) for k in live]
    diff = _diff(inputs)

    def g(*args):
        outs = _outs(fn(*args[:n]))
        xs = [args[i] for i in diff0]
        gs = grad([outs[k] for k in live], xs, list(args[n:]), create_graph=True, allow_unused=True,
                  materialize_grads=True)
        return tuple(gs)

    v = _tangents(inputs, diff, rng)
    tol = _tol(sample)
    _, jv = _jvp(g, inputs, diff, v)
    fd = _fd(g, inputs, diff, v, tol["eps"])
    for k, (t, n) in enumerate(zip(jv, fd)):
        got = np.zeros_like(n) if t is None else t.data
        np.testing.assert_allclose(got, n, atol=tol["atol"], rtol=tol["rtol"], err_msg=f"gradient {k}")


def test_every_primitive_has_a_forward_formula():
    missing = sorted(set(PRIMS) - set(JVPS) - set(NO_JVP))
    assert missing == [], f"add @jvp formulas (or registry.no_jvp with torch's reason) for {missing}"
    assert not set(JVPS) & set(NO_JVP)


# primitives no sample reaches through record(): the in-place-on-a-view nodes carry tangents through
# ops.inplace.inplace_update instead, Identity is unpack_dual's own primal, and a fused double-backward node
# gets the tangent of its formula's ops (autograd._fused); FillBackward0/1 are fill_'s names in sessions saved
# before torch 2.x's numbering (only loaded, never recorded)
NOT_RECORDED = {"CopySlices", "AsStridedBackward0", "Identity", "FusedBackward", "FillBackward0", "FillBackward1"}


def test_samples_reach_every_forward_formula(whole_module):
    """Runs last in this module (pytest keeps definition order): the JVP tests above fill _REACHED."""
    if not _REACHED:
        pytest.skip("run with the JVP tests of this module")
    unreached = sorted(set(JVPS) - _REACHED - NOT_RECORDED)
    assert unreached == [], f"no sample reaches the forward formulas of {unreached}"
