"""The op table's ``shape`` declarations (``engine.rules.result_shape``, which a client reads to know a result's shape
without asking) against the engine's results: every declared op's samples (tests/engine/samples.py) and the cases
below (ceil mode, ``same`` padding, scales, empty pieces...) give the shape the op gives. Torch-free: the engine is
torch to the letter on shapes (its OpInfo suite), so this is the declaration checked against the implementation."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine import rules
from gradserve_server.engine.registry import OPS
from tests.engine.samples import SAMPLES, _call

DECLARED = sorted({spec.name for spec in OPS.values() if spec.shape})


def _declared_shape(name: str, args: tuple, kwargs: dict):
    spec = OPS[name]
    bound = inspect.signature(spec.fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return rules.result_shape(spec.shape, bound.arguments.get)


def _result_shape(out):
    out = out[0] if isinstance(out, tuple) else out
    return tuple(out.data.shape)


def _t(*shape, dtype=np.float64):
    return E.tensor(np.arange(int(np.prod(shape)) if shape else 1, dtype=dtype).reshape(shape) % 3)


#: calls beyond the samples, where the rules have branches of their own
CASES = [
    ("max_pool2d", (_t(1, 2, 7, 7), 3), {"stride": 2, "ceil_mode": True}),
    ("max_pool2d", (_t(2, 6, 5), 2), {"padding": 1, "dilation": 2}),
    ("max_pool1d", (_t(2, 3, 9), 4), {"stride": 3, "ceil_mode": True, "padding": 2}),
    ("avg_pool2d", (_t(1, 1, 6, 5), (3, 2)), {"stride": (2, 1), "padding": (1, 0), "ceil_mode": True}),
    ("avg_pool1d", (_t(1, 2, 10), 3), {}),
    ("adaptive_avg_pool2d", (_t(2, 3, 7, 5), (None, 2)), {}),
    ("adaptive_avg_pool1d", (_t(3, 8), 3), {}),
    ("conv2d", (_t(1, 2, 6, 7), _t(4, 2, 3, 2)), {"padding": "same"}),
    ("conv2d", (_t(2, 6, 7), _t(3, 2, 3, 3)), {"padding": "valid", "stride": (2, 1)}),
    ("conv2d", (_t(1, 4, 9, 9), _t(6, 2, 3, 3)), {"stride": 2, "padding": (1, 2), "dilation": 2, "groups": 2}),
    ("conv1d", (_t(2, 3, 11), _t(5, 3, 4)), {"stride": 3, "padding": 1}),
    ("cat", ([_t(2, 3), _t(0), _t(4, 3)],), {}),
    ("cat", ([_t(2, 3), _t(2, 1)],), {"dim": -1}),
    ("stack", ([_t(2, 3), _t(2, 3)],), {"dim": -1}),
    ("stack", ([_t(), _t()],), {}),
    ("index_select", (_t(4, 5), 1, E.tensor(np.array([0, 4, 4]))), {}),
    ("index_select", (_t(), 0, E.tensor(np.array([0]))), {}),
    ("pad", (_t(2, 3, 4), (1, 2, -1, 0)), {}),
    ("interpolate", (_t(1, 2, 5, 3),), {"scale_factor": 1.7}),
    ("interpolate", (_t(1, 2, 5),), {"size": 8}),
    ("interpolate", (_t(1, 1, 3, 3),), {"scale_factor": (2.0, 0.5), "mode": "bilinear"}),
    ("one_hot", (E.tensor(np.array([[0, 2], [1, 1]])), 4), {}),
    ("repeat", (_t(2, 3), (2, 1, 3)), {}),
    ("mse_loss", (_t(3, 1), _t(1, 4)), {"reduction": "none"}),
    ("cross_entropy", (_t(3, 5), E.tensor(np.array([0, 4, 1]))), {"reduction": "none"}),
    ("nll_loss", (_t(2, 3, 4), E.tensor(np.zeros((2, 4), dtype=np.int64))), {"reduction": "none"}),
    ("kl_div", (_t(2, 3), _t(2, 3)), {"reduction": "batchmean"}),
    ("embedding", (E.tensor(np.array([[0, 2], [1, 0]])), _t(3, 4)), {}),
    ("linear", (_t(2, 5, 3), _t(4, 3)), {}),
    ("new_zeros", (_t(2), [3, 0, 2]), {}),
    ("new_ones", (_t(2), []), {}),
    ("new_empty", (_t(2), (4,)), {}),
    ("new_full", (_t(2), [2, 2], 1.5), {}),
    ("einsum", ("bhqd,bhkd->bhqk", _t(2, 3, 4, 5), _t(2, 3, 6, 5)), {}),
    ("einsum", ("...ij,jk", _t(2, 1, 3, 4), _t(4, 5)), {}),
    ("einsum", ("Ab,bA->", _t(2, 3), _t(3, 2)), {}),
    ("einsum", ("ba,cb", _t(3, 2), _t(4, 3)), {}),
    ("einsum", ("i j , j k -> k i", _t(2, 3), _t(3, 4)), {}),
    ("einsum", ("ij,ij->ij", _t(1, 3), _t(2, 3)), {}),
    ("einsum", ("...i,...i->...", _t(2, 1, 3), _t(4, 3)), {}),
    ("einsum", ("bij->b", [_t(2, 3, 4)]), {}),
]


@pytest.mark.parametrize("name", DECLARED)
def test_a_declared_shape_is_the_results_on_the_samples(name):
    known = 0
    for sample in SAMPLES.get(name, []):
        declared = _declared_shape(name, sample.args, sample.kwargs)
        if declared is rules.UNKNOWN:
            continue
        known += 1
        assert declared == _result_shape(_call(name, sample.args, sample.kwargs)), sample
    assert known or name not in SAMPLES, "no sample of the op reaches its declared rule"


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_declared_shape_is_the_results(name, args, kwargs):
    declared = _declared_shape(name, args, kwargs)
    assert declared is not rules.UNKNOWN
    assert declared == _result_shape(_call(name, args, kwargs))


def test_every_op_with_a_declared_shape_is_exercised():
    covered = {name for name, _, _ in CASES} | {n for n in DECLARED if SAMPLES.get(n)}
    assert set(DECLARED) <= covered, set(DECLARED) - covered
