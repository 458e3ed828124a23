"""Issue 24's ops against real PyTorch (skipped without torch), in the shape of test_new_ops_torch.py: the same
expression on torch and on the engine's torch facade with the same float64 inputs; value, dtype, requires_grad,
the grad_fn names along next_functions and the gradients of ``out.backward(G)`` must agree, second derivatives
where torch has them, and bad calls must fail in both with torch's message."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from gradserve_server.engine.torch_compat import F as EF  # noqa: E402
from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

from .test_new_ops_torch import _namespace, _second_order, compare_with_torch  # noqa: E402

EXPRESSIONS = [
    'torch.quantile(c3, 0.3)',
    'torch.quantile(c3, 0.3, 1)',
    'torch.quantile(c3, 0.3, 1, True)',
    'torch.quantile(c3, torch.tensor([0.2, 0.7], dtype=torch.float64))',
    'torch.quantile(c3, torch.tensor([0.2, 0.7], dtype=torch.float64), 2, True)',
    'torch.quantile(c3, torch.tensor([0.2, 0.7], dtype=torch.float64), 0)',
    'torch.quantile(c3, 0.5, -1)',
    'torch.quantile(c3, 0.3, 1, interpolation="lower")',
    'torch.quantile(c3, 0.3, 1, interpolation="higher")',
    'torch.quantile(c3, 0.3, 1, interpolation="nearest")',
    'torch.quantile(c3, 0.3, 1, interpolation="midpoint")',
    "torch.quantile(torch.tensor([[1., float('nan'), 3], [2, 4, 6]], dtype=torch.float64, requires_grad=True), 0.4, 1)",
    "torch.nanquantile(torch.tensor([[1., float('nan'), 3], [2, 4, 6]], dtype=torch.float64, "
    "requires_grad=True), 0.4, 1)",
    "torch.nanquantile(torch.tensor([[float('nan')] * 3, [2, 4, 6]], dtype=torch.float64), torch.tensor([0.1, "
    "0.9], dtype=torch.float64), 1)",
    'c3.quantile(0.25)',
    'torch.median(a)',
    'a.median()',
    'torch.median(a, 1)[0]',
    'torch.median(a, 0, keepdim=True)[1]',
    'torch.median(torch.tensor([[1., 1, 1, 2], [3, 3, 0, 3], [5, 2, 2, 2]], dtype=torch.float64, '
    'requires_grad=True), 1)[0]',
    'torch.median(torch.tensor([[1., 1, 1, 2], [3, 3, 0, 3], [5, 2, 2, 2]], dtype=torch.float64), 1)[1]',
    "torch.median(torch.tensor([[1., float('nan'), 1, 2]], dtype=torch.float64), 1)[1]",
    "torch.median(torch.tensor([4., float('nan'), 3]))",
    'torch.median(torch.tensor([]))',
    'torch.median(cls)',
    'torch.median(torch.tensor(3., dtype=torch.float64, requires_grad=True), 0)[0]',
    "torch.nanmedian(torch.tensor([[1., float('nan'), 1, 2], [float('nan')] * 4], dtype=torch.float64), 1)[1]",
    "torch.nanmedian(torch.tensor([[1., float('nan'), 1, 2], [float('nan')] * 4], dtype=torch.float64, "
    "requires_grad=True), 1)[0]",
    "torch.nanmedian(torch.tensor([1., float('nan'), 3, 2], dtype=torch.float64, requires_grad=True))",
    'torch.median(torch.tensor([2., 2, 1, 2], dtype=torch.float64, requires_grad=True))',
    "F.interpolate(x2, size=(3, 7))",
    "F.interpolate(x2, scale_factor=1.5)",
    "F.interpolate(x2, scale_factor=(2, 0.5))",
    'F.interpolate(x2, size=(4, 9), mode="nearest-exact")',
    'F.interpolate(x1, size=11, mode="linear")',
    'F.interpolate(x1, size=5, mode="linear", align_corners=True)',
    'F.interpolate(x1, scale_factor=2.5, mode="linear")',
    'F.interpolate(x2, size=(3, 7), mode="bilinear")',
    'F.interpolate(x2, size=(9, 4), mode="bilinear", align_corners=True)',
    'F.interpolate(x2, scale_factor=2, mode="bilinear")',
    'F.interpolate(x2, size=(3, 7), mode="bicubic")',
    'F.interpolate(x2, size=(8, 11), mode="bicubic", align_corners=True)',
    'F.interpolate(x2, size=(3, 7), mode="area")',
    'F.interpolate(x1, size=3, mode="area")',
    "F.interpolate(x1, size=3)",
    "F.interpolate(x2, scale_factor=1.7, recompute_scale_factor=True)",
    "F.interpolate(x1, scale_factor=1.3)",
    # 5-d inputs (3 spatial dims): nearest, nearest-exact and area
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(2, 5, 7))",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), scale_factor=1.5)",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), scale_factor=(1.3, 0.5, 2), mode='nearest-exact', "
    "recompute_scale_factor=True)",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(4, 3, 3), mode='nearest-exact')",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(2, 1, 3), mode='area')",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(5, 3, 7), mode='area')",
    "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=1, mode='area')",
    # a clone of an expanded tensor is contiguous (torch's preserve_format), so a view of it works
    "a.repeat_interleave(2, dim=0)", "c3.repeat_interleave(2, dim=0).view(-1)",
    "c3.unsqueeze(2).expand(2, 3, 2, 4).clone().view(-1)",
    "torch.movedim(c3, 0, 2)",
    "c3.movedim((0, 1), (2, 0))",
    "torch.moveaxis(c3, -1, 0)",
    "c3.movedim(1, 1)",
    # a 0-d input: torch's movedim returns self.alias() (AliasBackward0) once the dims are checked
    "torch.movedim(torch.tensor(2., dtype=torch.float64, requires_grad=True), 0, 0)",
    "torch.tensor(2., dtype=torch.float64, requires_grad=True).movedim([], [])",
    "torch.tensor(2., dtype=torch.float64, requires_grad=True).moveaxis(-1, 0)",
    "v.movedim([], [])",
    "torch.broadcast_to(v4, (3, 4))",
    "torch.broadcast_to(a, (2, 3, 4))",
    "torch.tile(a, (2,))",
    "torch.tile(a, (2, 1, 2))",
    "a.tile((1, 3))",
    "c3.unflatten(2, (2, 2))",
    "c3.unflatten(-1, (-1, 2))",
    "torch.unflatten(a, 0, (1, 3))",
    "torch.tensor_split(c3, 3, dim=2)[1]",
    "torch.tensor_split(c3, [1, 3], dim=2)[1]",
    "torch.tensor_split(a, 2)[0]",
    "c3.tensor_split(torch.tensor([1, 3]), 2)[2]",
    "torch.take_along_dim(a, sidx, dim=0)",
    "torch.take_along_dim(c3, torch.tensor([[[0], [1], [3]]]), dim=2)",
    "torch.take_along_dim(a, iidx)",
    "a.repeat_interleave(2, dim=1)",
    "a.repeat_interleave(2)",
    "a.repeat_interleave(torch.tensor([1, 2, 0]), dim=0)",
    "a.repeat_interleave(torch.tensor([1, 2, 0, 3]), dim=1)",
    "torch.repeat_interleave(v, torch.tensor([2, 0, 1]))",
    "torch.repeat_interleave(torch.tensor([1, 2, 3]))",
    "a.repeat_interleave(torch.tensor(2), dim=1)",
    "a.new_zeros(2, 3)",
    "a.new_zeros((2,))",
    "a.new_ones(3)",
    "cls.new_ones(3)",
    "a.new_full((2,), 3)",
    "a.new_tensor([1, 2])",
    "a.new_zeros(2, requires_grad=True)",
    "a.all()",
    "(a > 0).all(1)",
    "torch.all(a > 0, dim=(0, 1))",
    "(a > 0).any(0, True)",
    "torch.any(cls)",
    "a.count_nonzero()",
    "(a > 0).count_nonzero(0)",
    "torch.isinf(a / 0)",
    "torch.isinf(cls)",
    "torch.isposinf(a / 0)",
    "torch.isneginf(a / 0)",
    "torch.isclose(a, b)",
    "torch.isclose(a, a + 1e-9)",
    "torch.isclose(a, b, rtol=1.0, atol=0.5)",
    "torch.isclose(a / 0, b / 0)",
    "torch.isclose(a / 0 * 0, a / 0 * 0, equal_nan=True)",
    "torch.isclose(cls, cls)",
    "torch.isclose(a, v4)",
    "torch.nonzero(a > 0)",
    "(a > 0).nonzero(as_tuple=True)[1]",
    "torch.tensor(3.).nonzero()",
    "torch.argsort(a)",
    "torch.argsort(a, dim=0, descending=True)",
    "a.argsort(stable=True)",
    "torch.unique(cls)",
    "torch.unique(torch.tensor([3, 1, 2, 1, 3]), return_inverse=True, return_counts=True)[1]",
    "torch.unique(torch.tensor([3, 1, 2, 1, 3]), return_counts=True)[1]",
    "torch.unique(torch.tensor([[1, 2], [1, 2], [0, 1]]), dim=0)",
    "torch.unique(torch.tensor([[1, 2], [1, 2], [0, 1]]), dim=0, return_inverse=True)[1]",
    "torch.unique(torch.tensor([3., float('nan'), float('nan'), 1]))",
    "torch.addcmul(a, b, p)",
    "torch.addcmul(a, b, p, value=0.5)",
    "a.addcmul(v4, b, value=-2)",
    "torch.addcmul(v4, a, b)",
    "torch.addcdiv(a, b, p)",
    "torch.addcdiv(a, b, p, value=0.5)",
    "torch.addcdiv(v4, a, p)",
    "torch.addcmul(cls, cls, cls)",
    "torch.remainder(a, 0.7)",
    "torch.remainder(a, p)",
    "a.remainder(-0.3)",
    "torch.remainder(cls, 2)",
    "a % 0.7",
    "torch.nan_to_num(a / 0)",
    "torch.nan_to_num(a * (a / 0), nan=1.5, posinf=2.0)",
    "torch.nan_to_num(cls)",
    "torch.erfinv(a * 0.4)",
    "torch.erfinv(torch.tensor([-1., 1, 2, 0.5, 0]))",
    "torch.erfinv(cls)",
    "torch.erfinv(a * 0.2).float()",
    "torch.baddbmm(m3, m3, m3)",
    "torch.baddbmm(m3, m3, m3, beta=0.5, alpha=2)",
    "torch.baddbmm(v, m3, m3)",
    "torch.baddbmm(m3[0, 0], c3[:, :, :3], m3, alpha=-1)",
    "m3.baddbmm(m3, m3, beta=0)",
    "F.batch_norm(c3, None, None, training=True)",
    "F.batch_norm(c3, None, None, w4[:3], b4[:3], training=True)",
    "F.batch_norm(x2, None, None, b1[:3], v, training=True, eps=1e-3)",
    "F.batch_norm(c3, torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), v, v, training=False)",
    "F.batch_norm(c3, v.detach(), p[0, :3].detach(), training=False)",
    "(lambda rm, rv: (F.batch_norm(c3, rm, rv, training=True, momentum=0.3), rm + rv)[1])"
    "(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))",
    "F.batch_norm(a, None, None, training=True)",
    # an empty input: torch returns its clone (times weight[0], plus bias[0]), checking and updating nothing
    "F.batch_norm(torch.zeros(0, dtype=torch.float64, requires_grad=True), torch.zeros(0, dtype=torch.float64), "
    "torch.ones(0, dtype=torch.float64), training=True)",
    "F.batch_norm(torch.zeros(0, dtype=torch.float64, requires_grad=True), None, None)",
    # (summed: the comparison's cotangent of an empty output loses its shape)
    "F.batch_norm(torch.zeros(0, 3, dtype=torch.float64, requires_grad=True), None, None, v, v, training=True).sum()",
    "F.batch_norm(torch.zeros(0, 3, 2, dtype=torch.float64, requires_grad=True), torch.zeros(2, dtype=torch.float64), "
    "None, v).sum()",
    "F.batch_norm(torch.zeros(2, 0, dtype=torch.float64, requires_grad=True), None, None, training=True)",
    "(lambda rm: (F.batch_norm(torch.zeros(0, 3, dtype=torch.float64), rm, rm.clone(), training=True), rm)[1])"
    "(torch.ones(3, dtype=torch.float64))",
    "F.group_norm(c3, 1)",
    "F.group_norm(c3, 3, v, v)",
    "F.group_norm(x2, 3, b1[:3], v, eps=1e-3)",
    "F.group_norm(torch.stack([c3, c3 * 2]).reshape(4, 6, 2), 2)",
    "F.max_pool2d(x2, 2)",
    "F.max_pool2d(x2, 3, stride=2, padding=1)",
    "F.max_pool2d(x2, (2, 3), stride=1, dilation=(2, 1))",
    "F.max_pool2d(x2, 2, ceil_mode=True)",
    "F.max_pool2d(x2[0], 2)",
    "F.max_pool2d(x2, 2, return_indices=True)[1]",
    "F.max_pool2d(torch.tensor([[[[1., float('nan')], [3, 3]]]]), 2, return_indices=True)[1]",
    "F.max_pool2d(torch.tensor([[[[3., 1], [3, 3]]]]), 2, return_indices=True)[1]",
    "F.max_pool2d(cls.reshape(1, 1, 3).repeat(1, 2, 1), (1, 2))",
    "F.avg_pool2d(x2, 2)",
    "F.avg_pool2d(x2, 3, stride=2, padding=1)",
    "F.avg_pool2d(x2, 3, stride=2, padding=1, count_include_pad=False)",
    "F.avg_pool2d(x2, 2, ceil_mode=True)",
    "F.avg_pool2d(x2, 2, ceil_mode=True, count_include_pad=False)",
    "F.avg_pool2d(x2, (2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True)",
    "F.avg_pool2d(x2, 2, divisor_override=3)",
    "F.avg_pool2d(x2[0], 2)",
    "F.adaptive_avg_pool2d(x2, (2, 3))",
    "F.adaptive_avg_pool2d(x2, (4, None))",
    "F.adaptive_avg_pool2d(x2, 1)",
    "F.adaptive_avg_pool2d(x2, (1, 1))",
    "F.adaptive_avg_pool2d(x2[0], 4)",
    "F.adaptive_avg_pool2d(x2, (7, 8))",
    "F.max_pool1d(x1, 3)",
    "F.max_pool1d(x1, 3, 2, 1)",
    "F.max_pool1d(x1[0], 2, ceil_mode=True)",
    "F.max_pool1d(x1, 2, return_indices=True)[1]",
    "F.avg_pool1d(x1, 3)",
    "F.avg_pool1d(x1, 3, 2, 1, count_include_pad=False)",
    "F.adaptive_avg_pool1d(x1, 3)",
    "F.adaptive_avg_pool1d(x1, 1)",
    "F.scaled_dot_product_attention(c3[:, :2], c3, c3)",
    "F.scaled_dot_product_attention(c3, c3, d3[:, :3], is_causal=True)",
    "F.scaled_dot_product_attention(c3, c3, c3, scale=0.3)",
    "F.scaled_dot_product_attention(c3, c3, c3, "
    "attn_mask=torch.tensor([[True, False, True], [True, True, False], [False, False, True]]))",
    "F.scaled_dot_product_attention(c3, c3, c3, attn_mask=m)",
    "F.scaled_dot_product_attention(a, b, b)",
    "F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:, :, :, :4], x2[:, :, :, :4])",
    "F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:, :, :, :4], x2[:, :, :, :4], is_causal=True)",
    "F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:, :, :, :4], x2[:, :, :, :4], "
    "attn_mask=torch.ones(3, 6, dtype=torch.bool).tril())",
    "F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:, :, :, :4], x2[:, :, :, 1:])",
    "F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:1, :, :, :4], x2[:1, :, :, :4])",
    "F.scaled_dot_product_attention(x2[:, :2, :3, :4], x2[:, :1, :, :4], x2[:, :1, :, :4], enable_gqa=True)",
    "torch._safe_softmax(torch.tensor([[-float('inf'), -float('inf')], [1., 2]], dtype=torch.float64), -1)",
]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_issue24_op_matches_torch(expr):
    compare_with_torch(expr)


SECOND_ORDER = [
    ("b", "torch.addcmul(a, b, b, value=0.5)"), ("p", "torch.addcdiv(a, b, p)"), ("a", "torch.erfinv(a * 0.4)"),
    ("p", "torch.remainder(a, p)"), ("m3", "torch.baddbmm(m3, m3, m3, beta=0.5, alpha=2)"),
    ("c3", "F.batch_norm(c3, None, None, v, v, training=True)"),
    ("v", "F.batch_norm(c3, None, None, v, v, training=True) ** 2"),
    ("c3", "F.batch_norm(c3, v.detach(), p[0, :3].detach(), v, v, training=False) ** 2"),
    ("c3", "F.group_norm(c3, 3, v, v)"), ("v", "F.group_norm(c3, 3, v, v) ** 2"),
    ("x2", "F.max_pool2d(x2, 3, stride=2, padding=1) ** 2"), ("x2", "F.avg_pool2d(x2, 3, 2, 1, ceil_mode=True) ** 2"),
    ("x2", "F.adaptive_avg_pool2d(x2, (2, 3)) ** 2"), ("x1", "F.max_pool1d(x1, 3) ** 2"),
    ("c3", "F.scaled_dot_product_attention(c3, c3, c3)"),
    ("c3", "F.scaled_dot_product_attention(c3, c3, c3, is_causal=True)"),
    ("x2", "F.interpolate(x2, size=(3, 7), mode='bicubic') ** 2"),
    ("x1", "F.interpolate(x1, size=9, mode='linear') ** 2"),
    ("x2", "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(3, 2, 4), mode='area') ** 2"),
    ("x2", "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(4, 3, 3), mode='nearest') ** 2"),
    ("x2", "F.interpolate(x2.reshape(2, 3, 2, 3, 5), size=(1, 4, 7), mode='nearest-exact') ** 2"),
    ("a", "a.repeat_interleave(2, dim=1) ** 2"), ("a", "torch.take_along_dim(a, sidx, dim=0) ** 2"),
]


@pytest.mark.parametrize("leaf, expr", SECOND_ORDER)
def test_issue24_second_derivatives_match_torch(leaf, expr):
    ref = _second_order(_namespace(torch, TF, 1), leaf, expr)
    got = _second_order(_namespace(etorch, EF, 1), leaf, expr)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-8, atol=1e-9)
    if ref[1] is None:
        assert got[1] is None or not np.any(got[1])
    else:
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-7, atol=1e-8)


ERRORS = [
    'torch.quantile(cls, 0.5)',
    'torch.quantile(c3, 1.5)',
    'torch.quantile(c3, torch.tensor([[0.5]], dtype=torch.float64))',
    'torch.quantile(c3, torch.tensor([0.5]))',
    'torch.quantile(c3, torch.tensor([0.5, 2.0], dtype=torch.float64))',
    'torch.quantile(c3, 0.5, interpolation="foo")',
    'torch.quantile(torch.tensor([], dtype=torch.float64), 0.5)',
    'torch.median(torch.zeros(2, 0), 1)',
    "F.interpolate(x2, size=3, scale_factor=2)",
    "F.interpolate(x2)",
    "F.interpolate(x2, size=3, align_corners=True)",
    'F.interpolate(x2, size=3, mode="linear")',
    'F.interpolate(x1, size=3, mode="bilinear")',
    "F.interpolate(x2, size=(2, 3, 4))",
    'F.interpolate(x2, size=3, mode="foo")',
    "F.interpolate(a, size=3)",
    "F.interpolate(torch.ones(1, 1, 2, 2, 2), size=(0, 1, 1))",
    "F.interpolate(torch.ones(1, 1, 2, 2), size=(0, 1), mode='bilinear')",
    "F.interpolate(torch.ones(1, 1, 2), size=0, mode='linear')",
    "F.interpolate(torch.ones(1, 1, 2, 2, 2), size=(-1, 2, 2), mode='area')",
    "F.interpolate(torch.ones(1, 1, 2, 2, 2, dtype=torch.long), size=3)",
    "F.interpolate(torch.ones(1, 1, 2, 2, 2, dtype=torch.long), size=3, mode='area')",
    "F.interpolate(torch.ones(1, 1, 2, 2, 2), size=3, mode='bilinear')",
    "c3.movedim((0, 1), (1,))",
    "c3.movedim((0, 0), (1, 2))",
    "c3.movedim((0, 1), (2, 2))",
    "c3.movedim(3, 0)",
    "torch.movedim(torch.tensor(2.), 1, 0)",
    "torch.movedim(torch.tensor(2.), [0, 0], [0, 0])",
    "a.tile((-1,))",
    "c3.unflatten(1, ())",
    "c3.unflatten(2, (3, 2))",
    "torch.tensor_split(c3, 0)",
    "torch.tensor_split(torch.tensor(1.), 2)",
    "torch.tensor_split(c3, torch.tensor([1.]))",
    "torch.tensor_split(c3, torch.tensor([[1]]))",
    "torch.take_along_dim(c3, torch.zeros(3, dtype=torch.long), dim=0)",
    "torch.take_along_dim(c3, torch.zeros(2, 3, 4), dim=0)",
    "torch.take_along_dim(c3, torch.zeros(5, 3, 1, dtype=torch.long), dim=2)",
    "c3.repeat_interleave(-1, dim=0)",
    "c3.repeat_interleave(torch.tensor([1, 2]), dim=1)",
    "c3.repeat_interleave(torch.tensor([[1, 2]]), dim=1)",
    "c3.repeat_interleave(torch.tensor([1., 2, 3]), dim=1)",
    "c3.repeat_interleave(torch.tensor([1, -2, 3]), dim=1)",
    "c3.repeat_interleave(2, dim=1, output_size=5)",
    "torch.broadcast_to(c3, (3, 4))",
    "torch.broadcast_to(c3, (2, 5, 4))",
    "torch.isclose(a, a.float())",
    "torch.isclose(cls, a)",
    "torch.isclose(a, a, rtol=-1)",
    "torch.isclose(a, c)",
    "a.all(2)",
    "torch.addcdiv(a, cls, cls)",
    "torch.addcmul(torch.tensor([True]), torch.tensor([True]), torch.tensor([True]))",
    "torch.remainder(cls, 0)",
    "torch.remainder(torch.tensor([True]), torch.tensor([True]))",
    "torch.addcmul(a, c, b)",
    "torch.baddbmm(m3, m3[0], m3)",
    "torch.baddbmm(m3, m3, m3[0])",
    "torch.baddbmm(m3, m3, m3[:1])",
    "torch.baddbmm(m3, m3.float(), m3)",
    "torch.baddbmm(v4, m3, m3)",
    "torch.baddbmm(m3.float(), m3.float(), m3)",
    "torch.baddbmm(m3, m3, m3.int())",
    "torch.baddbmm(m3.int(), m3, m3)",
    "torch.baddbmm(m3.to(torch.int16), m3.float(), m3.float())",
    "F.batch_norm(c3, None, None, training=False)",
    "F.batch_norm(torch.randn(1, 3, dtype=torch.float64), None, None, training=True)",
    "F.batch_norm(v, None, None, training=True)",
    "F.batch_norm(torch.zeros(2, 0, dtype=torch.float64), None, None, torch.ones(0, dtype=torch.float64))",
    "F.batch_norm(c3, torch.zeros(2, dtype=torch.float64), torch.ones(3, dtype=torch.float64), training=True)",
    "F.batch_norm(c3, None, None, torch.ones(2, dtype=torch.float64), training=True)",
    "F.batch_norm(cls.reshape(1, 3).repeat(2, 1), None, None, training=True)",
    "F.batch_norm(c3, torch.zeros(3), torch.ones(3, dtype=torch.float64), training=True)",
    "F.batch_norm(c3, torch.zeros(3, dtype=torch.float64, requires_grad=True), torch.ones(3, dtype=torch.float64))",
    "F.batch_norm(c3.detach(), torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64, "
    "requires_grad=True), training=True)",
    "F.group_norm(c3, 2)",
    "F.group_norm(c3, 3, torch.ones(2, dtype=torch.float64))",
    "F.group_norm(v, 1)",
    "F.group_norm(cls.reshape(1, 3), 1)",
    "F.max_pool2d(x2, 2, padding=2)",
    "F.max_pool2d(torch.randn(1, 3, 1, 1), 2)",
    "F.max_pool2d(torch.randn(3, 5), 2)",
    "F.max_pool2d(x2, (2, 2, 2))",
    "F.max_pool2d(x2, 2, stride=0)",
    "F.avg_pool2d(x2, 2, padding=2)",
    "F.avg_pool2d(x2, 2, divisor_override=0)",
    "F.adaptive_avg_pool2d(x2, (2, 3, 4))",
    "F.adaptive_avg_pool2d(torch.randn(3, 5), 2)",
    "F.adaptive_avg_pool2d(cls.reshape(1, 1, 3), 2)",
    "F.max_pool1d(x2, 3)",
    "F.adaptive_avg_pool1d(x2, 3)",
    "F.scaled_dot_product_attention(c3, c3.float(), c3)",
    "F.scaled_dot_product_attention(c3, c3, c3, attn_mask=m, is_causal=True)",
    "torch.unique(a).sum().backward()",
    "torch.remainder(5, p).sum().backward()",
    # the fused attention kernel: first order only, no forward mode
    "torch.autograd.grad(torch.autograd.grad(F.scaled_dot_product_attention(x2[:, :, :3, :4], x2[:, :, :, :4], "
    "x2[:, :, :, :4]).sum(), x2, create_graph=True)[0].sum(), x2)",
]


def _error(mod, functional, expr):
    try:
        eval(expr, _namespace(mod, functional, 0))  # noqa: S307 - fixed expressions from the table above
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return type(e).__name__.replace("Torch", ""), str(e).split("\n")[0]
    return None


@pytest.mark.parametrize("expr", ERRORS)
def test_issue24_bad_calls_fail_as_torch(expr):
    ref = _error(torch, TF, expr)
    got = _error(etorch, EF, expr)
    assert ref is not None and got is not None, (ref, got)
    assert got[1] == ref[1]


def test_median_indices_among_ties_and_nans_are_torch_s():
    """The index a median along a dim reports, on rows full of ties and NaNs (torch's CPU kernel: the k-th of a
    stable order; the first NaN for median; std::nth_element's choice for an all-NaN row of nanmedian)."""
    rng = np.random.default_rng(3)
    for _ in range(60):
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 40)))
        v = rng.integers(0, 4, shape).astype(float)
        v[rng.random(shape) < rng.choice([0.0, 0.1, 0.9])] = np.nan
        for name in ("median", "nanmedian"):
            ref = getattr(torch, name)(torch.tensor(v), 1)
            got = getattr(etorch, name)(etorch.tensor(v.tolist(), dtype=etorch.float64), 1)
            assert got.indices.tolist() == ref.indices.tolist(), (name, v.tolist())
            np.testing.assert_array_equal(got.values.tolist(), ref.values.tolist())
