"""The client's dtype rules (the op table's ``promotion`` declarations, served in the catalog, read by
``gradserve.torch._promotion``) against torch: for every unary and binary op of ``dtype_rules.json`` and every
combination of dtypes (tensors with dimensions, 0-d tensors, Python numbers), the dtype the client predicts, or the
exception it raises, is torch's (the fixture where torch is not installed, torch itself where it is); and through a
real server, those errors are raised at the line that made the call, with nothing sent."""

from __future__ import annotations

import json

import pytest

import gradserve.torch._promotion as P
import gradserve_server.engine as E
from gradserve.torch._dtypes import DEFAULT_FLOAT, FACTS
from gradserve_server.engine import dtypes as engine_dtypes
from tests.client.dtype_rules_fixture import EXTRA, FIXTURE, NUMBERS
from tests.engine.test_dtypes_torch import FIXTURE as PROMOTION_FIXTURE

RECORDED = json.loads(FIXTURE.read_text())
CATALOG = {e["name"]: e for e in E.op_catalog()}
#: ops of the fixture the table declares no rule for (the client leaves their dtype to the server): a rule that
#: reads more than the operands (square is pow(x, 2); hardtanh refuses uint8 by its limits' values) or ops whose
#: overloads differ in kind (max(x) and max(x, y)); sort returns a named tuple
UNDECLARED = {"clamp", "hardtanh", "max", "min", "sort", "square"}

#: nor for the bitwise ops: they refuse the floating types torch.result_type gives
UNDECLARED |= {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
               "bitwise_right_shift"}


def operands(key: str) -> list[tuple[str, int]]:
    out = []
    for part in key.split():
        where, _, what = part.partition(":")
        if where == "number":
            out.append((P.number_dtype(NUMBERS[what]), P.NUMBER))
        else:
            out.append((what, P.DIM if where == "dim" else P.ZERO))
    return out


def predicted(op: str, key: str):
    extra = [(P.number_dtype(v), P.NUMBER) for k, v in EXTRA.get(op, {}).items()
             if any(a["name"] == k and a.get("tensor") for a in CATALOG[op]["arguments"])]
    try:
        return P.predict(CATALOG[op]["promotion"], operands(key) + extra)
    except P.Refused as refused:
        return {"error": [refused.kind, refused.message]}


def disagreements(recorded_ops: dict) -> list[str]:
    wrong = []
    for op, cases in recorded_ops.items():
        if not CATALOG[op]["promotion"]:
            continue
        for key, want in cases.items():
            if isinstance(want, dict) and want["error"][0] == "TypeError":
                continue  # (the argument parser's refusal, checked by the parser's tests)
            got = predicted(op, key)
            if got != want:
                wrong.append(f"{op}({key}): client {got}, torch {want}")
    return wrong


def test_every_declared_rule_gives_torchs_dtype_or_error_for_every_dtype_combination():
    wrong = disagreements(RECORDED["ops"])
    assert not wrong, "\n".join(wrong[:40])


def test_the_fixture_ops_without_a_rule_are_the_known_ones():
    assert {op for op in RECORDED["ops"] if not CATALOG[op]["promotion"]} == UNDECLARED


def test_the_fixture_covers_every_engine_dtype_and_the_declared_unary_and_binary_ops():
    from tests.client.dtype_rules_fixture import FAMILIES, arity

    assert RECORDED["dtypes"] == list(engine_dtypes.NAMES)
    declared = {e["name"] for e in CATALOG.values() if e["promotion"] and e["family"] in FAMILIES
                and not e["inplace"] and arity(e) is not None}
    assert declared <= set(RECORDED["ops"])


def test_declarations_parse_into_known_rules_and_conditions():
    for entry in CATALOG.values():
        if entry["promotion"]:
            rule, _, refusals = P.parse(entry["promotion"])
            assert rule in ("result_type", "float", "true_divide", "long", "same", "bool", "int64"), entry["name"]
            for condition, kind, message in refusals:
                assert condition in ("bool", "integral", "any_bool", "all_bool", "bool_tensors", "bool_number")
                assert kind in ("RuntimeError", "NotImplementedError") and message, entry["name"]


def test_the_client_dtype_table_is_the_engines():
    assert set(FACTS) == set(engine_dtypes.NAMES)
    for name, (kind, size, scalar) in FACTS.items():
        np_dtype = engine_dtypes.NP_DTYPES[name]
        assert size == np_dtype.itemsize
        assert scalar == engine_dtypes.SCALAR_TYPE_NAMES[name]
        assert (kind == "f") == engine_dtypes.is_floating(name)
        assert kind == {"b": "b", "u": "u", "i": "i", "f": "f", "V": "f"}[np_dtype.kind]  # (V: ml_dtypes' bfloat16)
    assert DEFAULT_FLOAT == engine_dtypes.DEFAULT_FLOAT


def test_result_type_is_torchs_for_every_recorded_pair():
    recorded = json.loads(PROMOTION_FIXTURE.read_text())["promotion"]
    numbers = {"2": 2, "2.5": 2.5, "True": True}
    wrong = []
    for key, want in recorded.items():
        ops = []
        for part in key.split():
            where, _, what = part.partition(":")
            ops.append((P.number_dtype(numbers[what]), P.NUMBER) if where == "number"
                       else (what, P.DIM if where == "dim" else P.ZERO))
        if P.result_type(ops) != want:
            wrong.append(key)
    assert not wrong


def test_the_fixture_is_what_torch_gives():
    pytest.importorskip("torch")
    from tests.client.dtype_rules_fixture import build

    live = build()
    assert live["ops"] == RECORDED["ops"]
    assert not disagreements(live["ops"])


# ----- through a server: at the line, nothing sent -----------------------------------------------------------------
def _raises_here(ctx, fn, kind: type, message: str) -> None:
    before = ctx.client.requests
    with pytest.raises(kind) as info:
        fn()
    assert str(info.value) == message
    assert ctx.client.requests == before  # decided by the client: no request


def test_mean_of_an_integer_tensor_raises_at_its_line(ctx):
    import gradserve.torch as torch

    x = torch.arange(3)
    _raises_here(ctx, lambda: x.mean(), RuntimeError, "mean(): could not infer output dtype. Input dtype must be "
                 "either a floating point or complex dtype. Got: Long")
    assert x.float().mean().item() == 1.0


def test_float_only_functions_of_integers_raise_torchs_not_implemented_error(ctx):
    import gradserve.torch as torch

    x = torch.tensor([1, 2], dtype=torch.int32)
    _raises_here(ctx, lambda: torch.nn.functional.gelu(x), NotImplementedError,
                 "\"GeluKernelImpl\" not implemented for 'Int'")
    _raises_here(ctx, lambda: torch.tensor([True]) - 1, RuntimeError,
                 "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
                 "mask, use the `~` or `logical_not()` operator instead.")


def test_an_in_place_op_whose_result_its_target_cannot_hold_raises_at_its_line(ctx):
    import gradserve.torch as torch

    x = torch.arange(3)
    _raises_here(ctx, lambda: x.exp_(), RuntimeError, "result type Float can't be cast to the desired output "
                 "type Long")
    _raises_here(ctx, lambda: x.add_(torch.ones(3)), RuntimeError, "result type Float can't be cast to the "
                 "desired output type Long")
    assert x.tolist() == [0, 1, 2]  # nothing was applied


def test_requires_grad_on_an_integer_result_raises_at_its_line(ctx):
    import gradserve.torch as torch

    y = (torch.arange(3) * 2).sum()
    _raises_here(ctx, lambda: y.requires_grad_(), RuntimeError,
                 "only Tensors of floating point dtype can require gradients")
    _raises_here(ctx, lambda: torch.randint(0, 5, (3,), requires_grad=True), RuntimeError,
                 "Only Tensors of floating point and complex dtype can require gradients")


def test_result_dtypes_are_known_without_a_request_and_are_the_servers(ctx):
    import gradserve.torch as torch

    torch.sync()
    a, w = torch.arange(3), torch.ones(3, requires_grad=True)
    results = {"float + int": torch.ones(3) + a, "int / int": a / 2, "sum of int": (a * 2).sum(),
               "comparison": a > 1, "exp of int": a.exp(), "int + 0-d double": a + torch.tensor(1.0).double(),
               "int32 + 0-d long": a.int() + torch.tensor(1),
               "zeros_like": torch.zeros_like(a), "float op": (w * 2).mean()}
    before = ctx.client.requests
    known = {k: t.dtype for k, t in results.items()}
    assert ctx.client.requests == before
    assert known["sum of int"] is torch.int64 and known["comparison"] is torch.bool
    assert known["int + 0-d double"] is torch.float64 and known["int32 + 0-d long"] is torch.int32
    assert known["exp of int"] is torch.float32
    assert not results["sum of int"].requires_grad and results["float op"].requires_grad
    torch.sync()
    for k, t in results.items():  # the server's view agrees
        t._ctx.flush({t._name: "meta"})
        assert t.dtype is known[k], k
