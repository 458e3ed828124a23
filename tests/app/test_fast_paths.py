"""The service's fast paths agree with the slow ones: bulk validation with the TypeAdapters, lifted base64
strings with parsed ones, the byte-scan shortcuts with the op walk, and event-loop runs with thread-pool runs.
"""

from __future__ import annotations

import base64
import threading

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gradserve_server.app import codec as app_codec
from gradserve_server.app import service as app_service
from gradserve_server.app.codec import lift_blobs
from gradserve_server.app.config import Settings
from gradserve_server.app.schemas.fast import eval_request_ok, ops_request_ok
from gradserve_server.app.schemas.ops import EvalRequestAdapter, OpsRequestAdapter
from gradserve_server.app.service import SessionService
from gradserve_server.app.store.memory import MemoryStore

from .conftest import assert_problem, make_client, ok, run, tensor

# ----- bulk validation: accepted only what the adapter returns unchanged ---------------------------------
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["x", "y_1", "NaN", "", "x.grad", "é", "a" * 201, "-Infinity", "1x"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(["a", "b"]), inner,
                                                                       max_size=2)), max_leaves=6)
op_keys = st.sampled_from(["op", "args", "kwargs", "out", "no_grad", "bogus"])
ops = st.lists(st.one_of(st.dictionaries(op_keys, values, max_size=5),
                         st.fixed_dictionaries({"op": st.sampled_from(["mul", "add"]),
                                                "args": st.lists(scalars, max_size=3)},
                                               optional={"out": st.one_of(values, st.lists(values, max_size=2)),
                                                         "kwargs": st.dictionaries(st.text(max_size=3), values,
                                                                                   max_size=2),
                                                         "no_grad": values}),
                         values), max_size=4)
top_keys = st.sampled_from(["ops", "no_grad", "repeat", "record", "return", "other"])
bodies = st.one_of(values, st.dictionaries(top_keys, values, max_size=4),
                   st.fixed_dictionaries({"ops": ops}, optional={"no_grad": values, "repeat": values,
                                                                 "record": st.lists(values, max_size=3),
                                                                 "return": st.lists(values, max_size=3)}))

JSON = {"content-type": "application/json"}


def adapter_result(adapter, data):
    try:
        return adapter.validate_python(data)
    except ValidationError:
        return ValidationError


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_bulk_validation_accepts_only_what_the_adapter_returns_unchanged(data):
    data = orjson.loads(orjson.dumps(data))  # exactly what the service checks: orjson's output
    for exact, adapter in ((ops_request_ok, OpsRequestAdapter), (eval_request_ok, EvalRequestAdapter)):
        if exact(data):
            assert adapter_result(adapter, data) == data


def test_bulk_validation_accepts_the_common_bodies():
    long_list = {"ops": [{"op": "mul", "out": f"t{i}", "args": [f"t{i - 1}" if i else "x", 2.0]} for i in range(500)]}
    assert ops_request_ok(long_list)
    assert ops_request_ok({"ops": [{"op": "grad", "args": [["y"], ["x"]], "out": ["dx"], "kwargs": {"a": [1]},
                                    "no_grad": False}], "repeat": 3, "record": ["x"], "no_grad": True})
    assert eval_request_ok({"ops": [], "return": ["x.grad"]})
    assert not ops_request_ok({"ops": [{"op": "mul", "out": "x.grad"}]})
    assert not ops_request_ok({"ops": [{"op": "mul", "out": "é"}]})
    assert not ops_request_ok({"ops": [], "repeat": True})  # lax mode decides what a bool repeat means


def test_problems_are_the_adapters_with_or_without_bulk_validation(client, session):
    ops = [{"op": "mul", "out": "x.grad"}] * 100
    body = assert_problem(run(client, session, ops), 422, "validation_error")
    try:
        OpsRequestAdapter.validate_python({"ops": ops})
    except ValidationError as exc:
        expected = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    assert body["errors"] == expected and len(expected) > 100


# ----- base64 strings lifted out of the body -----------------------------------------------------------
def payload(arr: np.ndarray) -> dict:
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "encoding": "base64",
            "data": base64.b64encode(arr.astype(arr.dtype.newbyteorder("<")).tobytes()).decode()}


BIG = np.arange(5000, dtype=np.float32) / 7


def test_a_large_base64_tensor_is_read_exactly(client, session):
    body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [payload(BIG)]}]})
    assert lift_blobs(body)[1]  # it takes the fast way
    ok(client.post(f"/v1/sessions/{session}/ops", content=body, headers=JSON))
    got = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))["data"]
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(got["data"]), "<f4"), BIG)


def test_a_data_string_that_is_not_a_payload_is_parsed_as_written(client, session):
    text = "A" * 6000
    # "data" as the key of an object that is not a payload (kwargs values are not decoded as payloads)
    body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [payload(BIG)]},
                                 {"op": "mul", "out": "y", "args": ["x", 2.0], "kwargs": {"data": text}}]})
    assert len(lift_blobs(body)[1]) == 2
    problem = assert_problem(client.post(f"/v1/sessions/{session}/ops", content=body, headers=JSON), 422)
    assert "gradserve-blob" not in problem["detail"]  # the original body was parsed: no token reached the engine


def test_a_token_is_never_a_string_the_parsed_document_holds(monkeypatch):
    """The tokens that replace lifted strings are the only occurrences of their prefix in what orjson reads: a
    body naming the prefix outside the lifted strings is parsed as written; inside a lifted string it is lifted
    with the rest of that string."""
    monkeypatch.setattr(app_codec.secrets, "token_hex", lambda n: "ab" * n)
    prefix = "gradserve-blob-" + "ab" * 8 + "-"
    big = payload(BIG)
    named = orjson.dumps({"ops": [{"op": "tensor", "out": prefix + "0", "args": [big]}]})
    assert lift_blobs(named) == (named, {})
    inside = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [{**big, "data": prefix + big["data"]}]}]})
    lifted, blobs = lift_blobs(inside)
    assert list(blobs) == [prefix + "0"] and bytes(blobs[prefix + "0"]) == (prefix + big["data"]).encode()
    assert orjson.loads(lifted)["ops"][0]["args"][0]["data"] == prefix + "0"


def test_escaped_or_invalid_large_payloads_behave_as_before(client, session):
    escaped = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [payload(BIG)]}]}).replace(b"/", b"\\/")
    assert b"\\/" in escaped
    ok(client.post(f"/v1/sessions/{session}/ops", content=escaped, headers=JSON))
    bad = payload(BIG)
    bad["data"] = bad["data"][:-8] + "!!!!!!!!"
    small = payload(BIG[:4])
    small["data"] = small["data"][:-4] + "!!!!"
    big_problem = assert_problem(run(client, session, [{"op": "tensor", "args": [bad]}]), 422,
                                 "invalid_tensor_payload")
    small_problem = assert_problem(run(client, session, [{"op": "tensor", "args": [small]}]), 422,
                                   "invalid_tensor_payload")
    assert big_problem["detail"] == small_problem["detail"]


# ----- shortcuts for long lists ------------------------------------------------------------------------
def test_long_lists_still_read_escaped_nonfinite_strings_and_refuse_deep_arguments(client, session):
    filler = [{"op": "mul", "out": f"t{i}", "args": ["x", 1.0]} for i in range(70)]
    ok(run(client, session, [tensor("x", [1.0, 2.0])]))
    body = orjson.dumps({"ops": [*filler, {"op": "mul", "out": "y", "args": ["x", "NaN"]}]})
    body = body.replace(b'"NaN"', b'"\\u004e\\u0061\\u004e"')
    assert b"NaN" not in body
    answer = ok(client.post(f"/v1/sessions/{session}/ops", content=body, headers=JSON))
    assert answer["tensors"]["y"]["data"] == ["NaN", "NaN"]
    deep = [*filler, {"op": "tensor", "args": [orjson.loads("[" * 70 + "1.0" + "]" * 70)], "out": "z"}]
    assert_problem(run(client, session, deep), 422, "too_deep")
    named = orjson.dumps({"ops": [*filler, {"op": "mul", "out": "NaN", "args": ["x", 1.0]}]})
    assert_problem(client.post(f"/v1/sessions/{session}/ops", content=named, headers=JSON), 422, "invalid_name")


# ----- event loop or thread pool -------------------------------------------------------------------------
def service() -> SessionService:
    return SessionService(MemoryStore(max_sessions=10, ttl_seconds=60), Settings())


def test_small_bounded_requests_may_run_inline_and_others_not():
    s = service()
    small = s.parse_ops(orjson.dumps({"ops": [tensor("x", 2.0), {"op": "mul", "out": "y", "args": ["x", "x"]},
                                              {"op": "backward", "args": ["y"]}]}))
    assert s.inline_ok(small)
    for ops in ([{"op": "zeros", "args": [1000, 1000]}], [{"op": "matmul", "args": ["x", "x"]}],
                [{"op": "exp", "args": ["x"]}] * 17):
        assert not s.inline_ok(s.parse_ops(orjson.dumps({"ops": ops})))
    assert not s.inline_ok(s.parse_ops(orjson.dumps({"ops": [tensor("x", 2.0)], "repeat": 2})))
    assert not s.small_body(b" " * 4096)


def test_inline_never_waits_for_a_busy_session_and_skips_heavy_ones(monkeypatch):
    # heavy by its state here, not by the wall time of its last run (a loaded machine can take 2 ms for any run)
    monkeypatch.setattr(app_service, "INLINE_MAX_RUN_SECONDS", 10.0)
    s = service()
    sid = s.create_session()["id"]
    small = {"ops": [tensor("x", 2.0)]}
    assert s.run_ops(sid, s.parse_ops(orjson.dumps(small)), "json", inline=True) is not None
    session = s.store.get(sid)
    with session.lock:  # another request holds the session: the caller goes to the thread pool instead
        assert s.run_ops(sid, s.parse_ops(orjson.dumps(small)), "json", inline=True) is None
    s.run_ops(sid, s.parse_ops(orjson.dumps({"ops": [{"op": "zeros", "out": "big", "args": [100_000]}]})), "json")
    assert s.run_ops(sid, s.parse_ops(orjson.dumps(small)), "json", inline=True) is None  # a large tensor
    s.run_ops(sid, s.parse_ops(orjson.dumps({"ops": [{"op": "tensor", "out": "big", "args": [1.0]}]})), "json")
    assert s.run_ops(sid, s.parse_ops(orjson.dumps(small)), "json", inline=True) is not None  # light again


def test_concurrent_backward_calls_on_one_session_all_accumulate():
    with make_client() as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(run(client, sid, [tensor("x", 2.0)]))
        ops = [{"op": "mul", "out": "y", "args": ["x", 3.0]}, {"op": "backward", "args": ["y"]}]
        big = [*ops, {"op": "tensor", "out": "pad", "args": [[0.0] * 1000]}]  # over 2 KiB: the thread pool

        def hit(body):
            for _ in range(10):
                ok(run(client, sid, body))

        threads = [threading.Thread(target=hit, args=(body,)) for body in (ops, big, ops, big)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        x = ok(client.get(f"/v1/sessions/{sid}/tensors/x"))
        assert x["grad"] == 120.0 and x["grad_accumulations"] == 40
