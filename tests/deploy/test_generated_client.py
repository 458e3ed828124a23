"""A client generated from the committed `openapi/openapi.json` by openapi-python-client, used against a live
server as its users use it: sessions, ops, eval, the graph in every format, the op catalog, and a problem.

Its package name comes from the document's title (`gradserve API`): `gradserve-api-client`, not the name of
this project's own client (`gradserve-client`). One setting is needed: openapi-python-client reads only JSON,
`text/*` and octet-stream answers, so the SVG drawing (`format: binary`) is read as bytes
(`content_type_overrides`); with it, the generator reports no warning at all.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.deploy.servers import ROOT, Uvicorn

SPEC = ROOT / "openapi" / "openapi.json"
CONFIG = """\
content_type_overrides:
  image/svg+xml: application/octet-stream
post_hooks: []
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The generated package, imported; removed from sys.path and sys.modules afterwards."""
    generator = Path(sys.executable).parent / "openapi-python-client"
    if not generator.exists():
        pytest.fail("openapi-python-client is not installed: it is in the test extra (pip install -e '.[test]')")
    where = tmp_path_factory.mktemp("generated")
    (where / "config.yaml").write_text(CONFIG)
    result = subprocess.run([str(generator), "generate", "--path", str(SPEC), "--config", "config.yaml"],
                            cwd=where, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output and "WARNING" not in output, output
    (project,) = [p for p in where.iterdir() if p.is_dir()]
    assert project.name == "gradserve-api-client"
    assert 'name = "gradserve-api-client"' in (project / "pyproject.toml").read_text()
    sys.path.insert(0, str(project))
    try:
        yield importlib.import_module("gradserve_api_client")
    finally:
        sys.path.remove(str(project))
        for name in [m for m in sys.modules if m == "gradserve_api_client" or m.startswith("gradserve_api_client.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Uvicorn.for_app({}, tmp_path_factory.mktemp("server") / "uvicorn.log").start()
    yield srv
    srv.stop()


def api(package, group: str, operation: str):
    return importlib.import_module(f"{package.__name__}.api.{group}.{operation}")


def test_a_generated_client_runs_sessions_ops_eval_graphs_catalog_and_reads_problems(generated, server):
    models = importlib.import_module(f"{generated.__name__}.models")
    sessions, ops, graph, meta = (lambda op, g=g: api(generated, g, op) for g in ("sessions", "ops", "graph", "meta"))
    with generated.AuthenticatedClient(base_url=server.url, token="ignored-by-an-open-server") as client:
        # sessions
        created = sessions("create_session_v1_sessions_post").sync(client=client)
        assert isinstance(created, models.SessionCreated) and created.id
        sid = created.id

        # ops: a request built from the generated models, the answer parsed into them
        request = models.OpsRequest(ops=[
            models.Op(op="tensor", out="x", args=[[1.0, 2.0, 3.0]], kwargs=models.OpKwargs.from_dict(
                {"requires_grad": True})),
            models.Op(op="mul", out="y", args=["x", "x"]),
            models.Op(op="sum", out="s", args=["y"]),
            models.Op(op="backward", args=["s"])])
        answer = ops("run_ops_v1_sessions_session_id_ops_post").sync(sid, client=client, body=request)
        assert isinstance(answer, models.OpsResponse), answer
        x = answer.tensors["x"]
        assert isinstance(x, models.TensorView)  # one plain model, not a union of views
        assert x.data == [1.0, 2.0, 3.0] and x.grad == [2.0, 4.0, 6.0] and x.is_leaf and x.grad_fn is None
        assert answer.tensors["s"].grad_fn == "SumBackward0" and answer.tensors["s"].data == 14.0
        assert [o.op for o in answer.ops] == ["tensor", "mul", "sum", "backward"]

        # a meta view is the same model, without data and grad
        meta_request = models.OpsRequest.from_dict({"ops": [], "return": {"y": "meta"}})
        y = ops("run_ops_v1_sessions_session_id_ops_post").sync(sid, client=client, body=meta_request).tensors["y"]
        assert isinstance(y, models.TensorView) and y.grad_fn == "MulBackward0" and y.shape == [3]
        assert isinstance(y.data, generated.types.Unset) and isinstance(y.grad, generated.types.Unset)

        # eval
        evaluated = ops("eval_ops_v1_eval_post").sync(client=client, body=models.EvalRequest.from_dict({
            "ops": [{"op": "tensor", "out": "a", "args": [2.0], "kwargs": {"requires_grad": True}},
                    {"op": "pow", "out": "b", "args": ["a", 3]}, {"op": "backward", "args": ["b"]}],
            "return": ["b", "a.grad"]}))
        assert isinstance(evaluated, models.EvalResponse)
        assert evaluated.tensors["b"].data == 8.0 and evaluated.tensors["a.grad"].data == 12.0

        # the graph in every format, each read by its own operation
        as_json = graph("get_graph_v1_sessions_session_id_graph_get").sync(sid, client=client, root="s")
        assert isinstance(as_json, models.GraphView)
        assert {"SumBackward0", "MulBackward0"} <= {n["name"] for n in as_json.to_dict()["nodes"]}
        dot = graph("get_graph_dot_v1_sessions_session_id_graph_dot_get").sync(sid, client=client, root="s")
        assert isinstance(dot, str) and dot.lstrip().startswith("digraph") and "MulBackward0" in dot
        mermaid = graph("get_graph_mermaid_v1_sessions_session_id_graph_mermaid_get").sync(sid, client=client,
                                                                                           root="s")
        assert isinstance(mermaid, str) and mermaid.startswith("flowchart") and "MulBackward0" in mermaid
        svg = graph("get_graph_svg_v1_sessions_session_id_graph_svg_get").sync(sid, client=client, root="s")
        assert isinstance(svg, generated.types.File)
        svg = svg.payload.read()
        assert b"MulBackward0" in svg and ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg"

        # the catalog, filtered
        catalog = meta("op_catalog_v1_ops_get").sync(client=client, q="svd", limit=3)
        assert isinstance(catalog, models.OpCatalog) and 0 < len(catalog.ops) <= 3 and catalog.total >= len(catalog.ops)
        assert all(isinstance(op, models.OpInfo) for op in catalog.ops)

        # problems: torch's error from an op list, an unknown session
        failed = ops("run_ops_v1_sessions_session_id_ops_post").sync(sid, client=client, body=models.OpsRequest(
            ops=[models.Op(op="matmul", out="z", args=["x", "y"]), models.Op(op="mm", out="w", args=["x", "y"])]))
        assert isinstance(failed, models.Problem), failed
        assert failed.status == 422 and failed.code == "shape_mismatch" and failed.op_index == 1
        assert failed.exception == "RuntimeError" and failed.detail.startswith("self must be a matrix")
        detailed = graph("get_graph_dot_v1_sessions_session_id_graph_dot_get").sync_detailed("0" * 32,
                                                                                             client=client)
        assert detailed.status_code == 404 and isinstance(detailed.parsed, models.Problem)
        assert detailed.parsed.code == "session_not_found"

        assert sessions("delete_session_v1_sessions_session_id_delete").sync_detailed(
            sid, client=client).status_code == 204
