"""Issue 27's leftover over HTTP: integers beyond 64 bits in op arguments (see tests/engine/test_int_range.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.app.conftest import assert_problem, ok, run, tensor


def test_integers_beyond_64_bits_are_torch_s_errors_over_http(client, session):
    """Issue 27: an integer argument torch cannot unpack is a 422 problem with torch's class and message, per
    parameter kind (a Scalar, an int, an element of an int list), nothing applied; a uint64 Scalar passes."""
    big = 2 ** 70
    cases = [
        ({"op": "mul", "args": ["x", big]}, "OverflowError", "int too big to convert"),
        ({"op": "mul", "args": ["x", -2 ** 64]}, "OverflowError", "can't convert negative int to unsigned"),
        ({"op": "full", "args": [[2], big]}, "OverflowError", "int too big to convert"),
        ({"op": "sum", "args": ["x", big]}, "ValueError", "Overflow when unpacking long long"),
        ({"op": "zeros", "args": [big]}, "TypeError",
         "zeros(): argument 'size' failed to unpack the object at pos 1 with error \"Overflow when unpacking long "
         "long\""),
        ({"op": "sum", "args": ["x", [0, -2 ** 64]]}, "TypeError",
         "sum(): argument 'dim' failed to unpack the object at pos 2 with error \"Overflow when unpacking long "
         "long\""),
    ]
    ok(run(client, session, [tensor("x", [1.0, 2.0])]))
    for op, exception, message in cases:
        raw = json.dumps({"ops": [{**op, "out": "y"}]})
        response = client.post(f"/v1/sessions/{session}/ops", content=raw,
                               headers={"content-type": "application/json"})
        body = assert_problem(response, 422, detail=message)
        assert body["exception"] == exception and body["op_index"] == 0, body
    # (a uint64 Scalar passes: see test_uint64_scalars_compute_where_torch_computes)
    body = ok(run(client, session, [tensor("c", [1.0, 2.0], requires_grad=False),
                                    {"op": "mul", "args": ["c", 2 ** 64 - 1], "out": "u"}]))
    assert body["tensors"]["u"]["data"] == pytest.approx([2.0 ** 64, 2.0 ** 65])
    assert "y" not in ok(client.get(f"/v1/sessions/{session}/tensors"))["tensors"]


# ----- Scalars of 2**63 .. 2**64 - 1 (torch's uint64 Scalar) ---------------------------------------------------
U63, U64 = 2 ** 63, 2 ** 64 - 1
NO_INT64 = ("RuntimeError", "value cannot be converted to type int64_t without overflow")
F = "float"      # x = tensor([1., 2.], requires_grad=True): the number is converted to float, the graph recorded
I = "int"        # i = tensor([1, 2]) (int64)
I8 = "int8"      # tensor([1, 2], dtype=int8)
B = "bool"       # tensor([True, False]): a uint64 result would be needed, a promotion torch refuses
PROMOTION = ("RuntimeError", "Promotion for uint16, uint32, uint64 types is not supported, attempted to promote "
                             "Bool and UInt64")

#: (torch expression, op (the tensor is "x"; "m" is x > 1), tensor, value, torch 2.13's outcome: (dtype, data,
#: grad_fn) or (exception, message)), read off torch 2.13
UINT64_CASES = [
    ("x * U63", {"op": "mul", "args": ["x", U63]}, F, U63, ("float32", [9.223372036854776e18, 1.8446744073709552e19],
                                                            "MulBackward0")),
    ("U64 * x", {"op": "mul", "args": [U64, "x"]}, F, U64, ("float32", [1.8446744073709552e19, 3.6893488147419103e19],
                                                            "MulBackward0")),
    ("x + U64", {"op": "add", "args": ["x", U64]}, F, U64, ("float32", [1.8446744073709552e19] * 2, "AddBackward0")),
    ("U63 + x", {"op": "add", "args": [U63, "x"]}, F, U63, ("float32", [9.223372036854776e18] * 2, "AddBackward0")),
    ("x - U63", {"op": "sub", "args": ["x", U63]}, F, U63, ("float32", [-9.223372036854776e18] * 2, "SubBackward0")),
    ("torch.rsub(x, U63)", {"op": "rsub", "args": ["x", U63]}, F, U63, ("float32", [9.223372036854776e18] * 2,
                                                                         "RsubBackward1")),
    ("x / U63", {"op": "div", "args": ["x", U63]}, F, U63, ("float32", [1.0842021724855044e-19, 2.168404344971009e-19],
                                                            "DivBackward0")),
    ("torch.div(U64, x)", {"op": "div", "args": [U64, "x"]}, F, U64,
     ("float32", [1.8446744073709552e19, 9.223372036854776e18], "DivBackward0")),
    ("x ** U63", {"op": "pow", "args": ["x", U63]}, F, U63, ("float32", [1.0, "Infinity"], "PowBackward0")),
    ("x.clamp(max=U63)", {"op": "clamp", "args": ["x"], "kwargs": {"max": U63}}, F, U63, ("float32", [1.0, 2.0],
                                                                                           "ClampBackward1")),
    ("torch.where(m, x, U63)", {"op": "where", "args": ["m", "x", U63]}, F, U63, ("float32",
                                                                                  [9.223372036854776e18, 2.0],
                                                                                  "WhereBackward0")),
    ("x.masked_fill(m, U64)", {"op": "masked_fill", "args": ["x", "m", U64]}, F, U64,
     ("float32", [1.0, 1.8446744073709552e19], "MaskedFillBackward0")),
    ("x.lt(U63)", {"op": "lt", "args": ["x", U63]}, F, U63, ("bool", [True, True], None)),
    ("torch.add(x, x, alpha=U63)", {"op": "add", "args": ["x", "x"], "kwargs": {"alpha": U63}}, F, U63,
     ("float32", [9.223372036854776e18, 1.8446744073709552e19], "AddBackward0")),
    ("i * U63", {"op": "mul", "args": ["x", U63]}, I, U63, ("int64", [-(2 ** 63), 0], None)),
    ("i + U64", {"op": "add", "args": ["x", U64]}, I, U64, ("int64", [0, 1], None)),
    ("U64 * i", {"op": "mul", "args": [U64, "x"]}, I, U64, ("int64", [-1, -2], None)),
    ("i - U64", {"op": "sub", "args": ["x", U64]}, I, U64, ("int64", [2, 3], None)),
    ("i / U63", {"op": "div", "args": ["x", U63]}, I, U63, ("float32", [1.0842021724855044e-19, 2.168404344971009e-19],
                                                            None)),
    ("torch.div(i, U64, rounding_mode='floor')", {"op": "div", "args": ["x", U64],
                                                  "kwargs": {"rounding_mode": "floor"}}, I, U64, ("int64", [-1, -2],
                                                                                                  None)),
    ("i.remainder(U64)", {"op": "remainder", "args": ["x", U64]}, I, U64, ("int64", [0, 0], None)),
    ("U64 ** i", {"op": "pow", "args": [U64, "x"]}, I, U64, ("int64", [-1, 1], None)),
    ("i.lt(U63)", {"op": "lt", "args": ["x", U63]}, I, U63, ("bool", [False, False], None)),
    ("i.ne(U64)", {"op": "ne", "args": ["x", U64]}, I, U64, ("bool", [True, True], None)),
    ("i.clamp(max=U63)", {"op": "clamp", "args": ["x"], "kwargs": {"max": U63}}, I, U63, NO_INT64),
    ("i ** U63", {"op": "pow", "args": ["x", U63]}, I, U63, NO_INT64),
    ("torch.where(m, i, U64)", {"op": "where", "args": ["m", "x", U64]}, I, U64, NO_INT64),
    ("i.masked_fill(m, U63)", {"op": "masked_fill", "args": ["x", "m", U63]}, I, U63, NO_INT64),
    ("torch.full_like(i, U63)", {"op": "full_like", "args": ["x", U63]}, I, U63, NO_INT64),
    ("torch.addcmul(i, i, i, value=U63)", {"op": "addcmul", "args": ["x", "x", "x"], "kwargs": {"value": U63}}, I,
     U63, NO_INT64),
    ("F.hardtanh(i, -1, U63)", {"op": "hardtanh", "args": ["x", -1, U63]}, I, U63, NO_INT64),
    ("torch.add(i, i, alpha=U64)", {"op": "add", "args": ["x", "x"], "kwargs": {"alpha": U64}}, I, U64, NO_INT64),
    ("torch.full((2,), U63)", {"op": "full", "args": [[2], U63]}, I, U63, NO_INT64),
    ("torch.full((2,), U63, dtype=float32)", {"op": "full", "args": [[2], U63], "kwargs": {"dtype": "float32"}}, I,
     U63, ("float32", [9.223372036854776e18] * 2, None)),
    ("U63 + i8", {"op": "add", "args": [U63, "x"]}, I8, U63, ("int8", [1, 2], None)),
    ("i8 * U64", {"op": "mul", "args": ["x", U64]}, I8, U64, ("int8", [-1, -2], None)),
    ("i8 ** U63", {"op": "pow", "args": ["x", U63]}, I8, U63, NO_INT64),
    ("i8 ** 300", {"op": "pow", "args": ["x", 300]}, I8, 300,
     ("RuntimeError", "value cannot be converted to type int8_t without overflow")),
    ("torch.where(m, i8, 300)", {"op": "where", "args": ["m", "x", 300]}, I8, 300,
     ("RuntimeError", "value cannot be converted to type int8_t without overflow")),
    ("b + U63", {"op": "add", "args": ["x", U63]}, B, U63, PROMOTION),
    ("U64 * b", {"op": "mul", "args": [U64, "x"]}, B, U64, PROMOTION),
    ("b < U63", {"op": "lt", "args": ["x", U63]}, B, U63, PROMOTION),
    ("torch.div(b, U63)", {"op": "div", "args": ["x", U63]}, B, U63, PROMOTION),
    ("torch.where(m, b, U63)", {"op": "where", "args": ["m", "x", U63]}, B, U63, PROMOTION),
    ("b.clamp(max=U63)", {"op": "clamp", "args": ["x"], "kwargs": {"max": U63}}, B, U63, PROMOTION),
    ("b ** U63", {"op": "pow", "args": ["x", U63]}, B, U63, NO_INT64),
    ("torch.full_like(b, U63)", {"op": "full_like", "args": ["x", U63]}, B, U63, ("bool", [True, True], None)),
]


def as_sent(data: list, dtype: str) -> list:
    """float32 data as the server reads it back (shortest float32 repr), in float64 as torch's tolist gives it."""
    if dtype != "float32":
        return data
    return [v if isinstance(v, str) else float(np.float32(v)) for v in data]


def uint64_program(op: dict, kind: str) -> list[dict]:
    x = [1.0, 2.0] if kind == F else [True, False] if kind == B else [1, 2]
    kwargs = {"requires_grad": True} if kind == F else {"dtype": "int8"} if kind == I8 else {}
    return [{"op": "tensor", "out": "x", "args": [x], "kwargs": kwargs}, {"op": "gt", "out": "m", "args": ["x", 1]},
            {**op, "out": "y"}]


@pytest.mark.parametrize("expr, op, kind, value, expected", UINT64_CASES, ids=[c[0] for c in UINT64_CASES])
def test_uint64_scalars_compute_where_torch_computes(client, expr, op, kind, value, expected):
    """Issue 27: a Scalar of 2**63 .. 2**64 - 1 is torch's uint64: converted to float beside a float tensor
    (also one that requires grad: recorded, and backward runs), cast modulo 2**64 into an integer tensor's
    type by the binary ops, and refused by the ops that convert a Scalar checked. 422 only where torch raises;
    a plan's replay answers the same as the first run."""
    raw = json.dumps({"ops": uint64_program(op, kind), "return": ["y"]})
    for _ in range(3):  # deferred, recorded, replayed
        response = client.post("/v1/eval", content=raw, headers={"content-type": "application/json"})
        if len(expected) == 2:
            body = assert_problem(response, 422, detail=expected[1])
            assert body["exception"] == expected[0] and body["op_index"] == 2, body
            continue
        y = ok(response)["tensors"]["y"]
        assert (y["dtype"], as_sent(y["data"], y["dtype"]), y["grad_fn"]) == expected, (expr, y)


def test_a_uint64_scalar_s_gradient_is_torch_s(client):
    """The recorded uint64 Scalar's backward: d(x * U63 + U64)/dx = U63, d(U64 / x)/dx = -U64 / x**2."""
    ops = [{"op": "tensor", "out": "x", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}},
           {"op": "mul", "out": "a", "args": ["x", U63]}, {"op": "add", "out": "b", "args": ["a", U64]},
           {"op": "div", "out": "c", "args": [U64, "x"]}, {"op": "add", "out": "d", "args": ["b", "c"]},
           {"op": "sum", "out": "s", "args": ["d"]}, {"op": "backward", "args": ["s"]}]
    raw = json.dumps({"ops": ops, "return": ["x.grad"]})
    for _ in range(3):
        grad = ok(client.post("/v1/eval", content=raw, headers={"content-type": "application/json"}))
        # torch 2.13: tensor([-9.2233720e+18, 4.6116860e+18])
        assert grad["tensors"]["x.grad"]["data"] == pytest.approx([-9.223372036854776e18, 4.611686018427388e18])


@pytest.mark.parametrize("expr, op, kind, value, expected", UINT64_CASES, ids=[c[0] for c in UINT64_CASES])
def test_uint64_cases_are_torch_s_live(expr, op, kind, value, expected):
    """The table above against the installed torch (its facts hold without it)."""
    torch = pytest.importorskip("torch")
    x = {F: torch.tensor([1.0, 2.0], requires_grad=True), I: torch.tensor([1, 2]),
         I8: torch.tensor([1, 2], dtype=torch.int8), B: torch.tensor([True, False])}[kind]
    scope = {"torch": torch, "F": torch.nn.functional, "x": x, "i": x, "i8": x, "b": x, "m": x > 1, "U63": U63,
             "U64": U64, "float32": torch.float32}
    try:
        y = eval(expr, scope)  # noqa: S307 (the table's own expressions)
    except Exception as exc:  # noqa: BLE001
        assert (type(exc).__name__, str(exc).splitlines()[0]) == expected
        return
    data = [v if v == v and abs(v) != float("inf") else "Infinity" for v in y.tolist()] \
        if y.dtype.is_floating_point else y.tolist()
    grad_fn = type(y.grad_fn).__name__ if y.grad_fn is not None else None
    assert (str(y.dtype).removeprefix("torch."), data, grad_fn) == expected
