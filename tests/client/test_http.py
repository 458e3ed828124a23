"""gradserve.Client, the plain HTTP client, against a real server: every route, problems as exceptions,
connection reuse and where it retries."""

from __future__ import annotations

import httpx
import pytest

import gradserve
from tests.deploy.servers import free_port

LINEAR = [{"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
          {"op": "tensor", "out": "w", "args": [3.0], "kwargs": {"requires_grad": True}},
          {"op": "mul", "out": "y", "args": ["w", "x"]}]


def test_sessions_create_list_get_delete(http):
    s = http.create_session()
    assert s["id"] in {x["id"] for x in http.list_sessions()}
    assert http.get_session(s["id"])["tensors"] == {}
    http.delete_session(s["id"])
    with pytest.raises(gradserve.ProblemError) as info:
        http.get_session(s["id"])
    assert info.value.status == 404 and info.value.code == "session_not_found"


def test_ops_with_return_tensors_and_encodings(http):
    s = http.create_session()["id"]
    body = http.run_ops(s, LINEAR, returns=["y"])
    assert list(body["tensors"]) == ["y"] and body["tensors"]["y"]["data"] == 6.0
    assert set(http.run_ops(s, [])["tensors"]) == set()
    assert http.run_ops(s, [], returns={"y": "meta"})["tensors"]["y"]["grad_fn"] == "MulBackward0"
    assert http.tensor(s, "y", encoding="base64")["data"]["encoding"] == "base64"
    assert set(http.tensors(s)) == {"x", "w", "y"}


def test_backward_grad_zero_grad_routes(http):
    s = http.create_session()["id"]
    http.run_ops(s, LINEAR)
    http.backward(s, "y", retain_graph=True)
    assert http.tensor(s, "x.grad")["data"] == 3.0
    http.grad(s, "y", ["w"], out=["dw"])
    assert http.tensor(s, "dw")["data"] == 2.0
    http.zero_grad(s, ["x"])
    with pytest.raises(gradserve.ProblemError) as info:
        http.tensor(s, "x.grad")
    assert info.value.code == "grad_not_set"


def test_graph_in_every_format(http):
    s = http.create_session()["id"]
    http.run_ops(s, LINEAR)
    graph = http.graph(s, root="y")
    assert {n["name"] for n in graph["nodes"]} == {"MulBackward0", "AccumulateGrad"}
    assert http.graph(s, root="y", format="dot").startswith("digraph")
    assert "MulBackward0" in http.graph(s, root="y", format="mermaid")
    assert "<svg" in http.graph(s, root="y", format="svg")


def test_eval_and_the_op_catalog(http):
    body = http.eval([*LINEAR, {"op": "backward", "args": ["y"]}], returns=["x.grad"])
    assert body["tensors"]["x.grad"]["data"] == 3.0
    names = {op["name"] for op in http.ops_catalog()}
    assert {"mul", "backward", "bind", "del"} <= names


def test_an_op_error_is_a_problem_with_its_index_and_torch_s_exception(http):
    s = http.create_session()["id"]
    with pytest.raises(gradserve.ProblemError) as info:
        http.run_ops(s, [*LINEAR, {"op": "backward", "args": ["y"]}, {"op": "backward", "args": ["y"]}])
    e = info.value
    assert (e.status, e.code, e.op_index, e.op, e.exception) == (409, "graph_freed", 4, "backward", "RuntimeError")
    assert str(e).startswith("Trying to backward through the graph a second time")


def test_one_connection_is_reused(server):
    opened = []

    class Counting(httpx.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            opened.append(response.extensions.get("network_stream"))
            return response

    with gradserve.Client(server.url, transport=Counting()) as c:
        for _ in range(5):
            c.list_sessions()
    assert None not in opened and len({id(s) for s in opened}) == 1 and c.requests == 5


def test_retries_only_where_a_retry_cannot_apply_a_change_twice():
    calls = []

    def handler(request: httpx.Request):
        calls.append(request.method)
        return httpx.Response(503, json={"status": 503, "code": "store_unavailable", "detail": "down"})

    c = gradserve.Client("http://gradserve.invalid", transport=httpx.MockTransport(handler), retries=2)
    with pytest.raises(gradserve.ProblemError):
        c.list_sessions()
    with pytest.raises(gradserve.ProblemError) as info:
        c.run_ops("s", [])
    assert calls == ["GET", "GET", "GET", "POST"] and info.value.code == "store_unavailable"
    down = gradserve.Client(f"http://127.0.0.1:{free_port()}", retries=1, timeout=2)
    with pytest.raises(gradserve.ConnectionError):
        down.create_session()  # never sent: retried, then raised
    assert down.requests == 2


def test_api_key_from_the_environment(monkeypatch):
    seen = []
    monkeypatch.setenv("GRADSERVE_API_KEY", "k1")
    c = gradserve.Client("http://gradserve.invalid",
                         transport=httpx.MockTransport(lambda r: seen.append(r.headers["authorization"])
                                                       or httpx.Response(200, json={"sessions": []})))
    c.list_sessions()
    assert seen == ["Bearer k1"]


def test_the_client_imports_neither_the_server_nor_the_engine():
    import subprocess
    import sys

    code = ("import sys, gradserve, gradserve.torch, gradserve.torch.nn, gradserve.torch.optim;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('gradserve_server', 'fastapi', 'pydantic'));"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_importing_the_torch_module_sends_nothing():
    # (a submodule importing a sibling through ``from gradserve.torch import x`` while gradserve.torch is being
    # imported asks its __getattr__, the server's catalog: the import tried the server and slept through retries)
    import subprocess
    import sys

    code = ("import httpx\n"
            "def refuse(*a, **k):\n"
            "    raise SystemExit('a request at import')\n"
            "httpx.Client.request = httpx.Client.send = refuse\n"
            "import gradserve.torch, gradserve.torch.distributions, gradserve.torch.nn\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd="/")
    assert out.stdout.strip() == "ok", out.stdout + out.stderr
