"""Request ids, JSON logs and /metrics."""

from __future__ import annotations

import json
import logging
import re

import pytest

from gradserve_server.app.observability import JsonFormatter
from tests.app.conftest import assert_problem, make_client, ok, run, tensor

KEY = "observability-key-0123456789"


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record):
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def log_lines():
    handler = Lines()
    logger = logging.getLogger("gradserve")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_request_id_is_generated_or_kept_and_echoed_in_problems(client):
    r = client.get("/healthz")
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    r = client.get("/v1/sessions/nope", headers={"X-Request-ID": "trace-42.a:b"})
    assert r.headers["x-request-id"] == "trace-42.a:b"
    assert assert_problem(r, 404, "session_not_found")["request_id"] == "trace-42.a:b"
    for insane in ("has space", "x" * 129, "semi;colon", ""):
        r = client.get("/healthz", headers={"X-Request-ID": insane})
        assert r.headers["x-request-id"] != insane and re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])


def test_problems_from_every_layer_carry_the_request_id():
    with make_client(api_keys=KEY, max_body_bytes=10) as c:
        assert assert_problem(c.get("/v1/sessions"), 401)["request_id"]  # auth middleware
        headers = {"X-API-Key": KEY, "content-type": "application/json"}
        assert assert_problem(c.post("/v1/eval", content=b"x" * 11, headers=headers), 413)["request_id"]
        assert assert_problem(c.put("/healthz"), 405)["request_id"]


def test_access_log_is_one_json_line_with_the_request_fields_and_no_data_or_key(log_lines):
    with make_client(api_keys=KEY) as c:
        headers = {"Authorization": f"Bearer {KEY}", "X-Request-ID": "req-1"}
        sid = c.post("/v1/sessions", headers=headers).json()["id"]
        log_lines.clear()
        r = c.post(f"/v1/sessions/{sid}/ops", headers=headers,
                   json={"ops": [tensor("x", [123.456, 789.5]), {"op": "exp", "args": ["nope"]}]})
        assert r.status_code == 404
    access = [line for line in log_lines if line["logger"] == "gradserve.access"]
    assert len(access) == 1
    line = access[0]
    assert {"time", "level", "request_id", "method", "path", "status", "duration_ms", "session_id",
            "code"} <= set(line)
    assert line["request_id"] == "req-1" and line["session_id"] == sid and line["status"] == 404
    assert line["code"] == "unknown_tensor" and line["route"] == "/v1/sessions/{session_id}/ops"
    assert line["key_id"] == __import__("hashlib").sha256(KEY.encode()).hexdigest()[:12]
    text = json.dumps(log_lines)
    assert "123.456" not in text and KEY not in text


def test_unhandled_errors_are_logged_with_the_request_id_and_answered_as_problems(log_lines):
    with make_client() as c:
        def boom(*args, **kwargs):
            raise RuntimeError("secret tensor data 1.2345")
        c.app.state.service.op_catalog = boom
        r = c.get("/v1/ops", headers={"X-Request-ID": "req-500"})
    body = assert_problem(r, 500, "internal_error")
    assert body["request_id"] == "req-500" and "1.2345" not in body["detail"]
    errors = [line for line in log_lines if line["level"] == "error" and line["logger"] == "gradserve"]
    assert errors and errors[0]["request_id"] == "req-500" and "RuntimeError" in errors[0]["exception"]


def test_metrics_count_requests_by_route_and_status_on_both_execution_paths():
    with make_client() as c:
        sid = c.post("/v1/sessions").json()["id"]
        inline = [tensor("x", [1.0, 2.0]), {"op": "mul", "out": "y", "args": ["x", "x"]},
                  {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]
        ok(run(c, sid, inline))  # small: on the event loop
        ok(run(c, sid, inline, repeat=3))  # repeat: in the thread pool
        ok(c.post("/v1/eval", json={"ops": inline}))
        assert_problem(run(c, sid, [{"op": "exp", "args": ["nope"]}]), 404, "unknown_tensor")
        assert_problem(run(c, sid, [{"op": "sum", "args": ["x", 5]}], repeat=2), 422, "dim_out_of_range")
        c.get(f"/v1/sessions/{sid}/tensors/nope")
        c.get("/definitely/not/a/route")
        text = c.get("/metrics").text
    route = "/v1/sessions/{session_id}/ops"
    assert metric(text, "gradserve_requests_total", route=route, status=200) == 2
    assert metric(text, "gradserve_requests_total", route=route, status=404) == 1
    assert metric(text, "gradserve_requests_total", route=route, status=422) == 1
    assert metric(text, "gradserve_requests_total", route="/v1/eval", status=200) == 1
    assert metric(text, "gradserve_requests_total", route="unmatched", status=404) == 1
    assert metric(text, "gradserve_request_duration_seconds_count", route=route) == 4
    assert metric(text, "gradserve_backward_passes_total") == 1 + 3 + 1
    assert metric(text, "gradserve_op_errors_total", code="unknown_tensor") == 2
    assert metric(text, "gradserve_op_errors_total", code="dim_out_of_range") == 1
    assert metric(text, "gradserve_problems_total", code="not_found") == 1
    assert metric(text, "gradserve_sessions_live") == 1
    assert metric(text, "gradserve_sessions_created_total") == 1
    assert sid not in text


def test_metrics_count_expiries_and_deletions():
    with make_client(session_ttl_seconds=0.05) as c:
        c.post("/v1/sessions")
        gone = c.post("/v1/sessions").json()["id"]
        kept = c.post("/v1/sessions").json()["id"]
        c.delete(f"/v1/sessions/{kept}")
        import time
        time.sleep(0.1)
        c.get(f"/v1/sessions/{gone}")  # found expired
        c.app.state.store.sweep()  # and the other swept
        text = c.get("/metrics").text
    assert metric(text, "gradserve_sessions_expired_total") == 2
    assert metric(text, "gradserve_sessions_deleted_total") == 1
    assert metric(text, "gradserve_sessions_live") == 0


def test_rejected_requests_are_counted_under_their_route():
    with make_client(api_keys=KEY) as c:
        c.get("/v1/sessions/abc/tensors")
        text = c.get("/metrics").text
    assert metric(text, "gradserve_requests_total", route="/v1/sessions/{session_id}/tensors", status=401) == 1
    assert metric(text, "gradserve_problems_total", code="unauthorized") == 1


def test_access_lines_written_directly_are_the_formatters_lines(monkeypatch):
    """With the default logging set-up an access line skips ``logging``'s records (app.observability
    ``_sole_json_handler``); any other handler on the way sends it through ``logging`` again. Both lines agree."""
    import io

    from gradserve_server.app import observability

    gradserve = logging.getLogger("gradserve")
    root = logging.getLogger()
    # (plans off: both runs of the list take the same route; installs the JSON handler when this process has none)
    with make_client(plan_cache_entries=0) as c:
        handler = next(h for h in gradserve.handlers if getattr(h, observability._HANDLER_MARK, False))
        others = [h for h in gradserve.handlers if h is not handler]
        saved_root = root.handlers[:]
        stream = io.StringIO()
        previous = handler.setStream(stream)
        try:
            for h in others:
                gradserve.removeHandler(h)
            root.handlers = []
            assert observability._sole_json_handler(logging.INFO) is handler
            sid = c.post("/v1/sessions").json()["id"]
            stream.truncate(0)
            stream.seek(0)
            through = []
            with monkeypatch.context() as patch:  # the direct way does not call logging
                patch.setattr(observability.access_log, "log", lambda *args, **kwargs: through.append(args))
                c.post(f"/v1/sessions/{sid}/ops", headers={"X-Request-ID": "direct-1"},
                       json={"ops": [{"op": "exp", "args": ["nope"]}]})
            assert not through
            direct = [json.loads(line) for line in stream.getvalue().splitlines()]
            root.handlers = [Lines()]  # a handler on the root: the line goes through logging
            assert observability._sole_json_handler(logging.INFO) is None
            stream.truncate(0)
            stream.seek(0)
            c.post(f"/v1/sessions/{sid}/ops", headers={"X-Request-ID": "direct-1"},
                   json={"ops": [{"op": "exp", "args": ["nope"]}]})
            through_logging = [json.loads(line) for line in stream.getvalue().splitlines()]
            assert root.handlers[0].lines == through_logging
        finally:
            handler.setStream(previous)
            root.handlers = saved_root
            for h in others:
                gradserve.addHandler(h)
    assert len(direct) == len(through_logging) == 1
    one, other = direct[0], through_logging[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", one["time"])
    for line in (one, other):
        del line["time"], line["duration_ms"]
    assert one == other
    assert one == {"level": "info", "logger": "gradserve.access", "message": f"POST /v1/sessions/{sid}/ops 404",
                   "request_id": "direct-1", "method": "POST", "path": f"/v1/sessions/{sid}/ops",
                   "route": "/v1/sessions/{session_id}/ops", "status": 404, "session_id": sid,
                   "code": "unknown_tensor", "client": "testclient", "engine_route": "cold",
                   "engine_reason": "cache_disabled"}
