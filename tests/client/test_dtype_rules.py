"""The client's dtype rules (the op table's ``promotion`` declarations, served in the catalog, read by
``gradserve.torch._promotion``) against torch: for every unary and binary op of ``dtype_rules.json`` and every
combination of dtypes (tensors with dimensions, 0-d tensors, Python numbers), the dtype the client predicts, or the
exception it raises, is torch's (the fixture where torch is not installed, torch itself where it is); and through a
real server, those errors are raised at the line that made the call, with nothing sent."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import gradserve.torch._promotion as P
import gradserve_server.engine as E
from gradserve.torch import _checks, _meta
from gradserve.torch._dtypes import DEFAULT_FLOAT, DTYPES, FACTS, Size
from gradserve.torch._layout import ROW_MAJOR
from gradserve.torch._tensor import Tensor
from gradserve_server.engine import dtypes as engine_dtypes
from tests.client.dtype_rules_fixture import CHECK_CASES, EXTRA, FIXTURE, NUMBERS, case_key
from tests.engine.test_dtypes_torch import FIXTURE as PROMOTION_FIXTURE

RECORDED = json.loads(FIXTURE.read_text())
CATALOG = {e["name"]: e for e in E.op_catalog()}
#: ops of the fixture the table declares no rule for (the client leaves their dtype to the server): a rule that
#: reads more than the operands (square is pow(x, 2); hardtanh refuses uint8 by its limits' values); sort returns a
#: named tuple
UNDECLARED = {"hardtanh", "square"}

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


# ----- checks: torch's refusals from arguments' metadata ------------------------------------------------------------
#: recorded calls torch refuses for a reason other than a declared check: the client's shape inference (broadcasting,
#: matrix products' shapes, which torch checks before their dtypes), and refusals no check declares (the server
#: raises them at the next sync)
LEFT_TO_OTHER_CHECKS = {"max(float32[0], int64[3])", "mm(float32[2,3], float64[4,2])",
                        "matmul(float32[2,3], float64[4,2])",
                        "matmul(float64[5,2,3], float32[5,4,2])", "matmul(float32[2,3], int64[4])",
                        "mv(float32[2,3], float64[4])", "movedim(float32[2,3], 0, 2)",
                        "dot(float32[3], float32[4])", "matmul(bool[2,3], bool[4])", "mv(float32[2,3], float32[4])",
                        "linear(float32[4], float32[3])", "linear(float32[2,16], float32[2])",
                        "linear(float32[5,2,3], float32[4])",
                        # torch refuses these first with a check of the op's own, which the rules leave to it
                        "embedding(float32[2], float32[4,3], max_norm=1.0)",
                        "unflatten(float32[2,3], 1, [])"}
NOT_DECLARED: set[str] = set()


def _handle(spec: str) -> Tensor:
    """A handle whose dtype and shape are known (``float32[2,3]``), as after a request, and what the fixture's
    tensors (``torch.ones``) are: row-major, not requiring grad (what decides matmul's route); nothing is sent."""
    dtype, _, dims = spec[:-1].partition("[")
    t = object.__new__(Tensor)
    t._dtype, t._shape = dtype, Size(int(d) for d in dims.split(",") if d)
    t._layout = ROW_MAJOR
    t._storage, t._ctx = SimpleNamespace(version=0, is_grad=False), None
    t._view, t._view_stamp = {"requires_grad": False}, t._stamp()
    return t


def _value_of(entry: dict, args: list, kwargs: dict):
    """``value(name)`` of a call (as ``call_op`` gives the rules): positional by the catalog's order, else keyword."""
    positions = []
    for a in entry["arguments"]:
        if a.get("kind") == "kwargs":
            break
        positions.append(a["name"])
        if a.get("kind") == "varargs":  # (given as one list: x.expand([2, 3]))
            break
    given = dict(zip(positions, args)) | kwargs
    if entry["name"] in ("getitem", "setitem") and isinstance(given.get("index"), list):
        given["index"] = tuple(_handle(x) if isinstance(x, str) else x  # (the fixture writes a tuple index as a
                               for x in given["index"])  # list; a mask as a tensor's spec)

    def value(name):
        v = given.get(name)
        if isinstance(v, str) and v.endswith("]"):
            return _handle(v)
        if isinstance(v, list) and any(isinstance(x, str) for x in v):
            return [_handle(x) for x in v]
        return DTYPES[v] if name == "dtype" and v is not None else v
    return value


@pytest.fixture(autouse=True, scope="module")
def _catalog_of_this_engine():
    """The catalog the client reads, from the engine in this process (what a server of this code serves): the
    in-place checks look argument positions up in it, without a server."""
    from gradserve.torch import _catalog

    if not _catalog._CATALOG:
        for entry in E.op_catalog():
            for name in (entry["name"], *entry.get("aliases", ())):
                _catalog._CATALOG.setdefault(name, entry)
    yield


def client_verdict(op: str, args: list, kwargs: dict):
    """What the client decides of the call before sending it: torch's error (class, message) from the op's checks or
    its dtype rule, the result's dtype, or None (left to the server)."""
    entry = CATALOG[op]
    value = _value_of(entry, args, kwargs)
    base = CATALOG.get(op[:-1]) if entry["inplace"] else None  # (setitem has none)
    checks = (*entry["checks"], *(base["checks"] if base else ()))  # (as call_op reads)
    broken = _checks.first_failure(checks, value)
    if broken is not None:
        return {"error": list(broken)}
    if entry["inplace"]:  # the target must hold the out-of-place op's result
        positions = [a["name"] for a in entry["arguments"]]
        args = [value(n) for n in positions[:len(args)]]
        try:
            _meta.check_inplace_dtype(entry, base, tuple(args), {k: value(k) for k in kwargs})
        except Exception as e:  # noqa: BLE001 - torch's class, raised by the client
            return {"error": [type(e).__name__, str(e)]}
        return None
    when = value(entry["returns_when"]) if entry["returns_when"] else True  # (max(x, y): y in dim's place)
    if not entry["promotion"] or entry["returns"] and when is not None and not isinstance(when, Tensor):
        return None  # (no rule, or a named tuple: its dtypes are the server's)
    if value("dtype") is not None and any(a["name"] == "dtype" for a in entry["arguments"]):
        return value("dtype").name  # (dtype= casts)
    try:
        got = _meta.predict(entry, value)
    except Exception as e:  # noqa: BLE001 - torch's class, raised by the client
        return {"error": [type(e).__name__, str(e)]}
    return None if got is _meta.UNKNOWN else got


def check_disagreements(recorded: dict) -> list[str]:
    wrong = []
    for op, cases in CHECK_CASES.items():
        for args, kwargs in cases:
            key = case_key(op, args, kwargs)
            want, got = recorded[key], client_verdict(op, args, kwargs)
            if isinstance(want, dict):
                if key in LEFT_TO_OTHER_CHECKS or key in NOT_DECLARED:
                    if got is not None and "error" in got:
                        wrong.append(f"{key}: the checks refuse it ({got}); torch's refusal is another's: {want}")
                elif got != want:
                    wrong.append(f"{key}: client {got}, torch {want}")
            elif got is not None and got != want:
                wrong.append(f"{key}: client {got}, torch {want}")
    return wrong


def test_every_declared_check_raises_torchs_error_or_lets_the_call_through():
    wrong = check_disagreements(RECORDED["checks"])
    assert not wrong, "\n".join(wrong)


def test_the_check_cases_cover_every_op_with_checks_and_each_rule():
    with_checks = {name for name, e in CATALOG.items() if e["checks"]}
    assert with_checks <= set(CHECK_CASES)
    used = {_checks.parse(d)[0] for e in CATALOG.values() for d in e["checks"]}
    assert used == set(_checks.RULES)
    refused = {case_key(op, a, k) for op, cases in CHECK_CASES.items() for a, k in cases
               if isinstance(RECORDED["checks"][case_key(op, a, k)], dict)}
    assert len(refused) > 60  # (most cases are refusals; the rest are calls the rules must let through)


def test_declarations_parse_into_known_rules_and_conditions():
    for entry in CATALOG.values():
        if entry["promotion"]:
            rule, _, refusals = P.parse(entry["promotion"])
            assert rule in ("result_type", "broadcast_type", "float", "true_divide", "long", "same", "bool", "int64",
                            "float64"), entry["name"]
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
    assert live["checks"] == RECORDED["checks"]
    assert not disagreements(live["ops"])
    assert not check_disagreements(live["checks"])


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


def test_metadata_refusals_of_the_checked_families_raise_at_their_line(ctx):
    import gradserve.torch as torch

    F = torch.nn.functional
    x, cond, square = torch.ones(2, 3), torch.ones(2, 3), torch.ones(3, 3, dtype=torch.long)
    torch.sync()
    _raises_here(ctx, lambda: torch.where(cond, x, x), RuntimeError,
                 "where expected condition to be a boolean tensor, but got a tensor with dtype Float")
    _raises_here(ctx, lambda: torch.clamp(x), RuntimeError,
                 "torch.clamp: At least one of 'min' or 'max' must not be None")
    _raises_here(ctx, lambda: x.clamp_(), RuntimeError, "torch.clamp: At least one of 'min' or 'max' must not be None")
    _raises_here(ctx, lambda: torch.max(torch.ones(0)), RuntimeError,
                 "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
                 "with the 'dim' argument.")
    _raises_here(ctx, lambda: torch.topk(x, 5), RuntimeError, "selected index k out of range")
    _raises_here(ctx, lambda: torch.linalg.inv(square), RuntimeError,
                 "linalg.inv: Expected a floating point or complex tensor as input. Got Long")
    _raises_here(ctx, lambda: torch.linalg.svd(torch.ones(3)), RuntimeError,
                 "linalg.svd: The input tensor A must have at least 2 dimensions.")
    _raises_here(ctx, lambda: x.det(), RuntimeError,
                 "linalg.det: A must be batches of square matrices, but they are 2 by 3 matrices")
    _raises_here(ctx, lambda: F.conv2d(torch.ones(1, 2, 5, 5), torch.ones(4, 3, 3, 3)), RuntimeError,
                 "Given groups=1, weight of size [4, 3, 3, 3], expected input[1, 2, 5, 5] to have 3 channels, but "
                 "got 2 channels instead")
    _raises_here(ctx, lambda: F.nll_loss(x, torch.tensor([0.0, 1.0])), RuntimeError,
                 "expected target dtype to be Long or Byte, but got Float")
    _raises_here(ctx, lambda: F.softmax(torch.tensor([1, 2]), dim=0), NotImplementedError,
                 "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'")
    # the same calls with what torch takes go through, their dtypes known without asking
    before = ctx.client.requests
    ok = [torch.where(cond > 0, x, 2), F.softmax(torch.tensor([1, 2]), dim=0, dtype=torch.float64),
          torch.clamp(x, min=0), torch.max(x, torch.tensor(1.0))]
    assert [t.dtype for t in ok[:2]] == [torch.float32, torch.float64] and ctx.client.requests == before
    assert F.nll_loss(x.log_softmax(1), torch.tensor([0, 2])).item() == pytest.approx(1.0986123, abs=1e-6)
    assert torch.linalg.inv(square.double() + torch.eye(3)).shape == (3, 3)


def test_tensor_data_dtypes_are_known_at_the_line_and_are_torchs(ctx):
    import numpy as np

    import gradserve.torch as torch

    cases = {"float": (1.0, "float32"), "ints": ([1, 2], "int64"), "bool": (True, "bool"),
             "nested mixed": ([[1.0, 2], [3, 4]], "float32"), "bools and ints": ([True, 1], "int64"),
             "empty": ([], "float32"), "numpy float64 number": (np.float64(2.0), "float64"),
             "numpy int32 number": (np.int32(3), "int32"), "numpy uint8 number": (np.uint8(3), "uint8"),
             "list with a float64 number": ([np.float64(1.0), 2.0], "float64"),
             "list with an int32 number": ([np.int32(1), 2], "int64"), "int32 array": (np.arange(2, dtype="int32"),
                                                                                     "int32")}
    torch.sync()
    before = ctx.client.requests
    made = {k: torch.tensor(v) for k, (v, _) in cases.items()}
    assert {k: t.dtype.name for k, t in made.items()} == {k: d for k, (_, d) in cases.items()}
    assert ctx.client.requests == before  # known at the line
    _raises_here(ctx, lambda: torch.where(made["float"], made["ints"], made["ints"]), RuntimeError,
                 "where expected condition to be a boolean tensor, but got a tensor with dtype Float")
    torch.sync()
    for k, t in made.items():  # the server made what the client said
        t._ctx.flush({t._name: "meta"})
        assert t._view["dtype"] == cases[k][1], k


def test_small_tensor_literals_are_read_without_a_request_and_hold_the_servers_values(ctx):
    import gradserve.torch as torch

    data = {"float": [0.1, 2.5, -1e-8], "int": [[1, 2], [3, -4]], "bool": [True, False], "scalar": 0.3,
            "half": ([0.1, 65504.0], torch.float16), "double": ([0.1], torch.float64)}
    made = {k: torch.tensor(*(v if isinstance(v, tuple) else (v,))) for k, v in data.items()}
    torch.sync()
    before = ctx.client.requests
    local = {k: t.tolist() for k, t in made.items()}
    assert ctx.client.requests == before
    for k, t in made.items():  # the server's values, read back
        t._array = None
        assert t.tolist() == local[k], k
    assert ctx.client.requests > before
    big = torch.tensor([0.5] * 65)  # (larger literals are read from the server)
    torch.sync()
    before = ctx.client.requests
    assert big.tolist() == [0.5] * 65 and ctx.client.requests == before + 1
