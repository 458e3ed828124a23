"""Matrix products: values against numpy, graphs and saved slots against the torch oracle's catalog,
torch's error messages, and float64 gradient checks (first and second order)."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from gradserve_server.engine import backward, grad, no_grad
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.grad_mode import Limits, limits
from gradserve_server.engine.node import SavedTensor
from gradserve_server.engine.ops import linalg as L
from gradserve_server.engine.ops import nn as N
from gradserve_server.engine.tensor import Tensor, tensor
from gradserve_server.engine.testing import gradcheck, gradgradcheck
from tests.engine.oracle import CATALOG_PATH as CATALOG  # noqa: E402

# ----- catalog helpers (also used by test_nn.py) --------------------------------------------------------

def prelude() -> dict:
    """The catalog's prelude tensors, built with the engine."""
    def t(v):
        return tensor(v, requires_grad=True)

    C = (np.arange(24, dtype=np.float32) / np.float32(10)).reshape(2, 3, 4)
    D = (np.arange(16, dtype=np.float32) / np.float32(10)).reshape(2, 4, 2)
    return dict(x=t([1.0, -2.0, 3.0]), y=t([0.5, 1.5, -1.0]), p=t([0.5, 2.0, 1.5]), s=t(2.0),
                A=t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
                B=t([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 2.0], [1.0, 1.0, 0.0, 1.0]]),
                W=t([[0.1, 0.2, 0.3], [-0.4, 0.5, -0.6]]), b=t([0.1, -0.2]), C=t(C), D=t(D),
                c=tensor([1.0, 2.0, 3.0]), cls=tensor([0, 2]), tgt=tensor([1.0, 0.0, 1.0]))


def namespace() -> dict:
    torch = types.SimpleNamespace(matmul=L.matmul, outer=L.outer, addmm=L.addmm, mm=L.mm)
    return {"torch": torch, "F": N, **prelude()}


def catalog_case(expr: str) -> dict:
    for e in json.loads(CATALOG.read_text())["grad_fn"]:
        if e["expr"] == expr:
            return e
    raise KeyError(expr)


def _engine_graph(t: Tensor, names: dict) -> list:
    inv = {id(v): k for k, v in names.items() if isinstance(v, Tensor)}
    out = []

    def walk(node, depth):
        if node is None:
            out.append((depth, None))
            return
        saved = {}
        for k, v in node.saved.items():
            if isinstance(v, SavedTensor):
                saved[k] = ("tensor", list(v.shape), inv.get(id(v.tensor)))
            else:
                saved[k] = list(v) if isinstance(v, tuple) else v
        var = inv.get(id(node.variable)) if node.name == "AccumulateGrad" else None
        out.append((depth, node.name, var, saved))
        for child, _ in node.next_functions:
            walk(child, depth + 1)

    walk(t.grad_fn, 0)
    return out


def _catalog_graph(entry: dict) -> list:
    nodes = entry["graph"]["nodes"]
    out = []

    def walk(nid, depth):
        if nid is None:
            out.append((depth, None))
            return
        n = nodes[nid]
        saved = {}
        for k, v in n.get("saved", {}).items():
            if isinstance(v, dict) and v.get("kind") == "tensor":
                saved[k[len("_saved_"):]] = ("tensor", v["shape"], v.get("is"))
            else:
                saved[k[len("_saved_"):]] = v
        out.append((depth, n["name"], n.get("variable"), saved))
        for edge in n["next_functions"]:
            walk(edge[0] if edge else None, depth + 1)

    walk(entry["graph"]["root"], 0)
    return out


def check_against_catalog(expr: str, value_rtol: float = 1e-5):
    """Evaluate ``expr`` with engine ops: graph (names, edges, saved slots, which prelude tensor a saved
    slot is), value and gradients for the catalog's upstream G must match torch's."""
    entry = catalog_case(expr)
    ns = namespace()
    out = eval(expr, ns)  # noqa: S307  (catalog expressions only)
    assert _engine_graph(out, ns) == _catalog_graph(entry)
    np.testing.assert_allclose(out.data, np.asarray(entry["result"]["value"], np.float32), rtol=value_rtol,
                               atol=1e-6)
    G = tensor(np.asarray(entry["upstream_G"], dtype=out.data.dtype))
    backward(out, G)
    for name, g in entry["grads"].items():
        np.testing.assert_allclose(ns[name].grad.data, np.asarray(g, np.float32), rtol=1e-5, atol=1e-6)
    return out


def f64(*shape, seed=0, low=-1.0, high=1.0) -> Tensor:
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    return Tensor(rng.uniform(low, high, shape), requires_grad=True)


def raises(message: str, exception: str = "RuntimeError"):
    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, typ, exc, tb):
            assert exc is not None, f"expected {exception}: {message}"
            assert isinstance(exc, EngineError), exc
            assert exc.message == message
            assert exc.exception == exception
            return True

    return _Ctx()


# ----- graphs as in the oracle catalog -------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["A @ B", "torch.matmul(A, B)", "A.mm(B)", "x @ y", "x.dot(y)", "A @ x",
                                  "x @ B", "C @ D", "C @ B.t()", "torch.outer(x, y)",
                                  "torch.addmm(b.unsqueeze(1), A, B)"])
def test_matmul_family_graph_value_and_grads_match_torch(expr):
    check_against_catalog(expr)


def test_mm_saves_self_only_when_mat2_requires_grad():
    A = f64(2, 3)
    c = Tensor(np.ones((3, 4)))
    out = L.mm(A, c)
    assert out.grad_fn.saved["self"] is None
    assert out.grad_fn.saved["mat2"].tensor is c
    assert out.grad_fn.next_functions[1] == (None, 0)


def test_matmul_1d_2d_result_is_at_version_1_like_torchs_inplace_squeeze():
    out = L.matmul(f64(3), f64(3, 4))
    assert out.version == 1
    assert out.grad_fn.name == "SqueezeBackward4"


# ----- values --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("s1,s2", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                   ((2, 2, 3), (2, 3, 4)), ((2, 2, 3), (3, 4)), ((3,), (2, 3, 4)),
                                   ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)), ((2, 3, 4), (4,))])
def test_matmul_values_and_shapes_match_numpy(s1, s2):
    a, b = f64(*s1), f64(*s2, seed=1)
    out = L.matmul(a, b)
    np.testing.assert_allclose(out.data, np.matmul(a.data, b.data), rtol=1e-12)
    assert out.shape == np.matmul(a.data, b.data).shape


def test_matmul_folds_batch_into_mm_for_3d_at_2d():
    out = L.matmul(f64(2, 3, 4), f64(4, 5))
    assert out.grad_fn.name == "UnsafeViewBackward0"
    assert out.grad_fn.next_functions[0][0].name == "MmBackward0"


def test_matmul_3d_at_3d_goes_through_bmm():
    out = L.matmul(f64(2, 3, 4), f64(2, 4, 5))
    assert out.grad_fn.name == "UnsafeViewBackward0"
    assert out.grad_fn.next_functions[0][0].name == "BmmBackward0"


def test_addmm_beta_alpha_and_broadcast_input():
    inp, m1, m2 = f64(4), f64(2, 3, seed=1), f64(3, 4, seed=2)
    out = L.addmm(inp, m1, m2, beta=0.5, alpha=2)
    np.testing.assert_allclose(out.data, 0.5 * inp.data + 2 * (m1.data @ m2.data), rtol=1e-12)
    zero_beta = L.addmm(Tensor(np.full(4, np.nan)), m1, m2, beta=0)
    np.testing.assert_allclose(zero_beta.data, m1.data @ m2.data)


def test_integer_matmul_keeps_int64():
    out = L.matmul(tensor([[1, 2], [3, 4]]), tensor([[1], [1]]))
    assert out.dtype == "int64" and out.data.tolist() == [[3], [7]]


def test_rmatmul_is_matmul_with_operands_swapped():
    a, b = f64(3, 2), f64(2, 3, seed=3)
    np.testing.assert_allclose(L.rmatmul(a, b).data, b.data @ a.data)


def test_matmul_checks_the_element_limit_before_allocating():
    with limits(Limits(max_elements_per_tensor=10)):
        with pytest.raises(EngineError) as e:
            L.matmul(Tensor(np.ones((4, 1))), Tensor(np.ones((1, 4))))
    assert e.value.code == "limit_exceeded"


# ----- errors --------------------------------------------------------------------------------------------

def _ones(*s):
    return Tensor(np.ones(s, np.float32))


@pytest.mark.parametrize("fn,message", [
    (lambda: L.matmul(_ones(2, 3), _ones(2, 3)), "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"),
    (lambda: L.mm(_ones(2, 3), _ones(2, 3)), "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)"),
    (lambda: L.matmul(_ones(3), _ones(2, 3)), "mat1 and mat2 shapes cannot be multiplied (1x3 and 2x3)"),
    (lambda: L.matmul(_ones(3), _ones(2)),
     "inconsistent tensor size, expected tensor [3] and src [2] to have the same number of elements, but got 3 "
     "and 2 elements respectively"),
    (lambda: L.matmul(_ones(2, 3), _ones(2)), "size mismatch, got input (2), mat (2x3), vec (2)"),
    (lambda: L.matmul(_ones(2, 2, 3), _ones(2, 2, 3)),
     "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 2]."),
    (lambda: L.matmul(_ones(2, 2, 3), _ones(3, 3, 2)),
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
    (lambda: L.matmul(_ones(), _ones(3)), "both arguments to matmul need to be at least 1D, but they are 0D and 1D"),
    (lambda: L.mm(_ones(2, 3), _ones(3)), "mat2 must be a matrix"),
    (lambda: L.matmul(_ones(2, 2, 3), _ones(2, 3)), "mat1 and mat2 shapes cannot be multiplied (4x3 and 2x3)"),
    (lambda: L.bmm(_ones(2, 3), _ones(2, 3, 3)), "batch1 must be a 3D tensor"),
    (lambda: L.mv(_ones(2, 3), _ones(3, 1)), "vector + matrix @ vector expected, got 1, 2, 2"),
    (lambda: L.dot(_ones(2, 3), _ones(3)), "1D tensors expected, but got 2D and 1D tensors"),
    (lambda: L.outer(_ones(2, 3), _ones(3)), "outer: Expected 1-D argument self, but got 2-D"),
    (lambda: L.addmm(_ones(3), _ones(2, 3), _ones(3, 4)),
     "The expanded size of the tensor (4) must match the existing size (3) at non-singleton dimension 1.  "
     "Target sizes: [2, 4].  Tensor sizes: [3]"),
    (lambda: L.addmm(_ones(4), _ones(3), _ones(3, 4)), "mat1 must be a matrix, got 1-D tensor"),
    (lambda: L.mm(_ones(2, 3), Tensor(np.ones((3, 2)))),
     "expected m1 and m2 to have the same dtype, but got: float != double"),
    (lambda: L.dot(_ones(3), Tensor(np.ones(3))),
     "dot : expected both vectors to have same dtype, but found Float and Double"),
])
def test_shape_and_dtype_errors_use_torchs_messages(fn, message):
    with raises(message):
        fn()


# ----- gradients (float64 finite differences) -------------------------------------------------------------

GRAD_CASES = [
    ("mm", L.mm, ((2, 3), (3, 4))),
    ("bmm", L.bmm, ((2, 2, 3), (2, 3, 2))),
    ("mv", L.mv, ((2, 3), (3,))),
    ("dot", L.dot, ((3,), (3,))),
    ("outer", L.outer, ((3,), (2,))),
    ("matmul 1d@2d", L.matmul, ((3,), (3, 2))),
    ("matmul 3d@2d", L.matmul, ((2, 2, 3), (3, 2))),
    ("matmul 1d@3d", L.matmul, ((3,), (2, 3, 2))),
    ("matmul 4d@3d", L.matmul, ((2, 1, 2, 3), (3, 3, 2))),
    ("addmm", lambda a, b, c: L.addmm(a, b, c, beta=0.5, alpha=2.0), ((4,), (2, 3), (3, 4))),
]


@pytest.mark.parametrize("name,fn,shapes", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradcheck(name, fn, shapes):
    inputs = [f64(*s, seed=i) for i, s in enumerate(shapes)]
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("name,fn,shapes", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradgradcheck(name, fn, shapes):
    inputs = [f64(*s, seed=i) for i, s in enumerate(shapes)]
    assert gradgradcheck(fn, inputs)


def test_matmul_under_no_grad_records_nothing():
    with no_grad():
        out = L.matmul(f64(2, 3), f64(3, 2))
    assert out.grad_fn is None and not out.requires_grad


def test_mm_backward_through_create_graph_gives_a_differentiable_gradient():
    a, b = f64(2, 3), f64(3, 2, seed=1)
    (ga,) = grad(L.mm(a, b), [a], Tensor(np.ones((2, 2))), create_graph=True)
    assert ga.requires_grad
    np.testing.assert_allclose(ga.data, np.ones((2, 2)) @ b.data.T)
