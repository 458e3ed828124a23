# ruff: noqa: E501  (a table of code strings: one case per entry reads better than wrapped strings)
"""float16 and bfloat16 cases with torch 2.13: creation, conversion, printing-relevant values, arithmetic,
unary math, reductions, matmul/linear, softmax, losses, backward (gradients in the tensor's dtype) and what
torch's CPU kernels refuse. Each is torch code that binds ``r`` (or raises), run once per dtype with ``H``
bound to it; torch's outcome is recorded in ``tests/fixtures/half_cases.json`` (re-record with
``python -m tests.engine.test_half_torch --record``, needs torch). Values compare bit for bit, except the
cases of ``INEXACT`` (at most that many units in the last place; docs/explanation/deviations.md)."""

from __future__ import annotations

DATA = "a = torch.tensor([[0.1, -1.7, 2.3, 0.55], [3.1, 0.2, -0.45, 1.9], [-2.6, 0.8, 1.15, -0.3]], dtype=H)\n"
DATA_B = "b = torch.tensor([[1.3, 0.4, -0.7, 2.2], [-0.15, 1.05, 0.6, -1.4], [0.95, -2.1, 0.35, 1.6]], dtype=H)\n"
POS = "p = torch.tensor([[0.3, 1.7, 2.9, 0.05], [4.2, 0.6, 1.1, 7.5], [0.01, 3.3, 0.9, 12.0]], dtype=H)\n"
W = "w = torch.tensor([[0.5, -0.25, 1.5, 0.75], [-1.2, 0.3, 0.45, -0.6]], dtype=H)\nbias = torch.tensor([0.1, -0.2], dtype=H)\n"
GRAD = "a = torch.tensor([[0.1, -1.7, 2.3, 0.55], [3.1, 0.2, -0.45, 1.9], [-2.6, 0.8, 1.15, -0.3]], dtype=H, requires_grad=True)\n"
AB = DATA + DATA_B

CASES: dict[str, str] = {
    # ----- creation and conversion ------------------------------------------------------------------------
    "tensor": "r = torch.tensor([0.1, 1.0, -2.5, 65504.0, 1e-8], dtype=H)",
    "tensor_overflow_is_inf": "r = torch.tensor([1e6, -1e6], dtype=H)",
    "tensor_int_data": "r = torch.tensor([1, 2, 3], dtype=H)",
    "tensor_double_rounding": "r = torch.tensor([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40], dtype=H)",
    "zeros": "r = torch.zeros(2, 3, dtype=H)",
    "ones_like": DATA + "r = torch.ones_like(a)",
    "full": "r = torch.full((2,), 0.1, dtype=H)",
    "from_float32": "r = torch.tensor([0.1, 1/3, 1e-5, 70000.0]).to(H)",
    "from_float64": "r = torch.tensor([1 + 2**-11 + 2**-40, 1/3], dtype=torch.float64).to(H)",
    "to_float32": DATA + "r = a.float()",
    "to_double": DATA + "r = a.double()",
    "to_long": DATA + "r = a.long()",
    "half_method": "r = torch.tensor([0.1, 2.5]).half()",
    "bfloat16_method": "r = torch.tensor([0.1, 2.5]).bfloat16()",
    "half_to_bfloat16": "r = torch.tensor([0.1, 2.5, 300.0], dtype=torch.float16).to(torch.bfloat16)",
    "item": DATA + "r = a[0, 0].item()",
    "tolist": DATA + "r = a[0].tolist()",
    "requires_grad": "r = torch.tensor([1.5], dtype=H, requires_grad=True)",
    # ----- promotion ---------------------------------------------------------------------------------------
    "half_with_bfloat16": "r = torch.tensor([1.5], dtype=torch.float16) + torch.tensor([1.5], dtype=torch.bfloat16)",
    "half_with_float32": DATA + "r = a + torch.tensor([0.1, 0.2, 0.3, 0.4])",
    "half_with_0d_float32": DATA + "r = a + torch.tensor(0.1)",
    "half_with_0d_float64": DATA + "r = a * torch.tensor(0.1, dtype=torch.float64)",
    "long_with_half": DATA + "r = torch.tensor([1, 2, 3, 4]) + a",
    "long_with_0d_half": "r = torch.tensor([1, 2, 3]) * torch.tensor(0.3, dtype=H)",
    "bool_with_half": DATA + "r = a * torch.tensor([True, False, True, False])",
    "int_tensor_with_float_number": "r = torch.tensor([1, 2], dtype=torch.int8) * 0.1",
    # ----- arithmetic ---------------------------------------------------------------------------------------
    "add": AB + "r = a + b",
    "sub": AB + "r = a - b",
    "mul": AB + "r = a * b",
    "div": AB + "r = a / b",
    "add_number": DATA + "r = a + 0.1",
    "sub_number": DATA + "r = a - 0.3",
    "rsub_number": DATA + "r = 0.3 - a",
    "mul_number": DATA + "r = a * 0.1",
    "div_number": DATA + "r = a / 3.0",
    "rdiv_number": DATA + "r = 3.0 / a",
    "pow_number": POS + "r = p ** 1.7",
    "pow_tensor": POS + DATA + "r = p ** a",
    "add_alpha": AB + "r = torch.add(a, b, alpha=2)",
    "neg": DATA + "r = -a",
    "abs": DATA + "r = a.abs()",
    "maximum": AB + "r = torch.maximum(a, b)",
    "where": AB + "r = torch.where(a > b, a, b)",
    "clamp": DATA + "r = a.clamp(-0.5, 0.5)",
    "lerp": AB + "r = torch.lerp(a, b, 0.3)",
    # ----- unary math --------------------------------------------------------------------------------------
    **{f"unary_{f}": DATA + f"r = torch.{f}(a)" for f in ("exp", "tanh", "sigmoid", "sin", "cos", "atan", "erf", "expm1", "floor", "round", "sign", "square")},
    **{f"unary_{f}": POS + f"r = torch.{f}(p)" for f in ("log", "log1p", "log2", "sqrt", "reciprocal")},
    "relu": DATA + "r = F.relu(a)",
    "gelu": DATA + "r = F.gelu(a)",
    "gelu_tanh": DATA + "r = F.gelu(a, approximate='tanh')",
    "leaky_relu": DATA + "r = F.leaky_relu(a, 0.1)",
    "hardtanh": DATA + "r = F.hardtanh(a)",
    "softplus": DATA + "r = F.softplus(a)",
    "elu": DATA + "r = F.elu(a)",
    # ----- reductions --------------------------------------------------------------------------------------
    "sum": DATA + "r = a.sum()",
    "sum_dim": DATA + "r = a.sum(1)",
    "sum_to_float32": DATA + "r = a.sum(dtype=torch.float32)",
    "mean": DATA + "r = a.mean()",
    "mean_dim": DATA + "r = a.mean(0, keepdim=True)",
    "var": DATA + "r = a.var()",
    "var_dim": DATA + "r = a.var(1)",
    "prod": POS + "r = p.prod(1)",
    "amax": DATA + "r = a.amax(1)",
    "max_dim": DATA + "r = a.max(1)",
    "argmax": DATA + "r = a.argmax()",
    "cumsum": DATA + "r = a.cumsum(1)",
    "logsumexp": DATA + "r = torch.logsumexp(a, 1)",
    "norm": DATA + "r = a.norm()",
    # ----- matmul, linear, softmax, losses -----------------------------------------------------------------
    "matmul": DATA + W + "r = a @ w.t()",
    "mm_bfloat16_product": "x = torch.arange(64, dtype=H).reshape(8, 8) / 7\nr = x @ x",
    "linear": DATA + W + "r = F.linear(a, w, bias)",
    "linear_no_bias": DATA + W + "r = F.linear(a, w)",
    "softmax": DATA + "r = F.softmax(a, 1)",
    "mse_loss": AB + "r = F.mse_loss(a, b)",
    "l1_loss": AB + "r = F.l1_loss(a, b)",
    "cross_entropy": DATA + "r = F.cross_entropy(a, torch.tensor([1, 0, 3]))",
    "nll_loss": DATA + "r = F.nll_loss(a, torch.tensor([1, 0, 3]))",
    "bce_with_logits": AB + "r = F.binary_cross_entropy_with_logits(a, torch.sigmoid(b))",
    "layer_norm": DATA + "r = F.layer_norm(a, (4,))",
    # ----- backward: gradients in the tensor's dtype --------------------------------------------------------
    "grad_mul_sum": GRAD + DATA_B + "(a * b).sum().backward()\nr = a.grad",
    "grad_exp_mean": GRAD + "a.exp().mean().backward()\nr = a.grad",
    "grad_matmul": GRAD + W + "(a @ w.t()).sum().backward()\nr = a.grad",
    "grad_linear": GRAD + W + "F.linear(a, w, bias).pow(2).sum().backward()\nr = a.grad",
    "grad_softmax": GRAD + DATA_B + "(F.softmax(a, 1) * b).sum().backward()\nr = a.grad",
    "grad_tanh": GRAD + "torch.tanh(a).sum().backward()\nr = a.grad",
    "grad_sigmoid_mean": GRAD + "torch.sigmoid(a).mean().backward()\nr = a.grad",
    "grad_relu": GRAD + "F.relu(a).sum().backward()\nr = a.grad",
    "grad_sum_dim": GRAD + "a.sum(1).sum().backward()\nr = a.grad",
    "grad_cross_entropy": GRAD + "F.cross_entropy(a, torch.tensor([1, 0, 3])).backward()\nr = a.grad",
    "grad_mse": GRAD + DATA_B + "F.mse_loss(a, b).backward()\nr = a.grad",
    "grad_to_float32": GRAD + "(a.float() * 3).sum().backward()\nr = a.grad",
    "grad_fn_name": GRAD + "r = (a * 2).exp()",
    # ----- refusals -----------------------------------------------------------------------------------------
    "refuse_inverse": "r = torch.inverse(torch.eye(3, dtype=H))",
    "refuse_det": "r = torch.linalg.det(torch.eye(3, dtype=H))",
    "refuse_cholesky": "r = torch.linalg.cholesky(torch.eye(3, dtype=H))",
    "refuse_svd": "r = torch.linalg.svd(torch.eye(3, dtype=H))",
    "refuse_slogdet": "r = torch.linalg.slogdet(torch.eye(3, dtype=H))",
    "refuse_quantile": DATA + "r = torch.quantile(a, 0.5)",
    "refuse_matrix_norm_nuc": "r = torch.linalg.matrix_norm(torch.eye(3, dtype=H), 'nuc')",
    "matrix_norm_fro": "r = torch.linalg.matrix_norm(torch.eye(3, dtype=H))",
    "refuse_mm_mixed": DATA + "r = torch.mm(a, torch.ones(4, 2))",
    "refuse_grad_assign": GRAD + "a.grad = torch.zeros(3, 4)",
    "refuse_alpha_overflow": AB + "r = torch.add(a, b, alpha=1e300)",
}

#: cases whose values differ from torch's in at most this many units in the last place (torch computes them in
#: one float32 kernel, the engine in several steps, each rounded; docs/explanation/deviations.md)
INEXACT: dict[str, int] = {
    "layer_norm": 3, "logsumexp": 1, "nll_loss": 1, "cross_entropy": 1,
    "grad_cross_entropy": 4, "grad_mse": 1, "grad_sigmoid_mean": 1,
}
