"""Op catalog, health, offline docs and the committed OpenAPI document."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gradserve_server.app.openapi_dump import TARGET, render
from tests.app.conftest import assert_problem, ok

ROOT = Path(__file__).resolve().parents[2]


def test_op_catalog_lists_engine_ops_with_grad_fns(client):
    ops = {op["name"]: op for op in ok(client.get("/v1/ops"))["ops"]}
    assert {"tensor", "mul", "add", "sub_"} <= set(ops)
    assert "MulBackward0" in ops["mul"]["grad_fns"] and ops["mul"]["differentiable"] is True
    assert ops["sub_"]["inplace"] is True


def test_the_op_catalog_says_what_a_client_needs_to_call_an_op_as_torch_does(client):
    """A client builds its namespaces and results from the catalog alone (it holds no per-op table): the
    facts are declared with each op in the engine's table."""
    ops = {op["name"]: op for op in ok(client.get("/v1/ops"))["ops"]}
    assert "torch.special.expit" in ops["sigmoid"]["exports"] and "torch.nn.functional.sigmoid" in \
        ops["sigmoid"]["exports"]
    assert "torch.nn.functional.conv2d" in ops["conv2d"]["exports"]  # the nn and conv families: all of them
    assert ops["linalg.svd"]["returns"] == ["U", "S", "Vh"] and ops["linalg.svd"]["returns_when"] == ""
    assert (ops["max"]["returns"], ops["max"]["returns_when"]) == (["values", "indices"], "dim")
    assert ops["max_pool2d"]["tuple_when"] == ["return_indices"] and ops["split"]["variable_outputs"] is True
    assert ops["allclose"]["python_result"] == "bool"
    assert ops["embedding"]["changes_argument"] == [["weight", "max_norm"]]
    assert ops["batch_norm"]["changes_argument"] == [["running_mean", "training"], ["running_var", "training"]]
    assert (ops["view"]["storage"], ops["reshape"]["storage"], ops["cat"]["storage"]) == (
        "view", "view_if_contiguous", "new")
    assert ops["long"]["converts_to"] == "int64" and ops["unsqueeze"]["dims_of"] == "output"
    # scheduling: what a request's cost follows (inline runs are for ops whose cost follows their inputs)
    assert (ops["add"]["cost"], ops["zeros"]["cost"], ops["expand"]["cost"], ops["hessian"]["cost"],
            ops["backward"]["cost"]) == ("inputs", "arguments", "arguments", "calls", "inputs")


def test_the_op_catalog_filters_and_pages_and_without_parameters_is_whole(client):
    whole = ok(client.get("/v1/ops"))
    everything = whole["ops"]
    assert whole["total"] == len(everything) > 200
    by_name = {op["name"]: op for op in everything}

    def names(**params) -> list[str]:
        body = ok(client.get("/v1/ops", params=params))
        return [op["name"] for op in body["ops"]], body["total"]

    # q: name, alias, grad_fn name or doc, case-insensitive; the table's order kept
    found, total = names(q="SVD")
    assert "linalg.svd" in found and total == len(found)
    assert found == [n for n in by_name if n in found]
    assert all("svd" in (" ".join([n, *by_name[n]["aliases"], *by_name[n]["grad_fns"], by_name[n]["doc"]])).lower()
               for n in found)
    assert "mul" in names(q="MulBackward0")[0] and "abs" in names(q="absolute")[0]
    assert names(q="no op is called this") == ([], 0)
    # the other filters, and all of them at once
    inplace = names(inplace="true")[0]
    assert inplace == [n for n, op in by_name.items() if op["inplace"]] and "sub_" in inplace
    assert names(differentiable="false")[0] == [n for n, op in by_name.items() if not op["differentiable"]]
    assert names(family="linalg")[0] == [n for n, op in by_name.items() if op["family"] == "linalg"]
    both = names(family="elementwise", inplace="false", differentiable="true")[0]
    assert both and all(by_name[n]["family"] == "elementwise" and by_name[n]["differentiable"]
                        and not by_name[n]["inplace"] for n in both)
    # pages: in order, each op once, total the same on every page
    pages, offset = [], 0
    while True:
        body = ok(client.get("/v1/ops", params={"offset": offset, "limit": 100}))
        assert body["total"] == len(everything) and len(body["ops"]) <= 100
        if not body["ops"]:
            break
        pages.append(body["ops"])
        offset += 100
    assert [op for page in pages for op in page] == everything and len(pages) == -(-len(everything) // 100)
    assert ok(client.get("/v1/ops", params={"q": "sum", "limit": 1}))["ops"] == [
        op for op in everything if op["name"] == names(q="sum")[0][0]]
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"inplace": "maybe"}, {"q": "x" * 201}):
        assert_problem(client.get("/v1/ops", params=bad), 422, "validation_error")


def test_healthz_and_readyz(client, session):
    assert ok(client.get("/healthz")) == {"status": "ok"}
    settings = client.app.state.settings
    assert ok(client.get("/readyz")) == {"status": "ready", "sessions": 1, "max_sessions": 1000, "heavy": {
        "running": 0, "queued": 0, "slots": settings.max_heavy_requests, "queue": settings.max_heavy_queue}}


def test_unknown_route_and_wrong_method_are_problems(client):
    assert_problem(client.get("/v2/nothing"), 404, "not_found")
    assert_problem(client.put("/healthz"), 405, "method_not_allowed")


def _external_urls(text: str) -> list[str]:
    return [u for u in re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", text)
            for u in u if u.startswith(("http:", "https:", "//"))]


def test_docs_pages_reference_no_external_host(client):
    for path in ("/docs", "/redoc"):
        page = client.get(path)
        assert page.status_code == 200
        assert "/static/" in page.text
        assert _external_urls(page.text) == [], path
        assert not re.search(r"https?://(?!127\.0\.0\.1|localhost)", page.text.replace(
            "http://www.w3.org", "")), path


def test_docs_assets_are_served_locally(client):
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon-32x32.png"):
        r = client.get(f"/static/{asset}")
        assert r.status_code == 200 and len(r.content) > 100, asset


def test_committed_openapi_document_matches_the_app():
    assert TARGET.read_text() == render(), (
        "openapi/openapi.json is stale: run `python -m gradserve_server.app.openapi_dump`")


TEXT_ANSWERS = {"/metrics": "text/plain", "/v1/sessions/{session_id}/graph/dot": "text/vnd.graphviz",
                "/v1/sessions/{session_id}/graph/mermaid": "text/plain",
                "/v1/sessions/{session_id}/graph/svg": "image/svg+xml"}


def test_every_endpoint_documents_a_response_model_and_problems():
    doc = json.loads(render())
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            responses = operation["responses"]
            success = next(r for code, r in responses.items() if code.startswith("2"))
            if method != "delete":
                # one media type per operation: generated clients read each answer by its one type
                (media_type, content), = success["content"].items()
                assert "schema" in content, (method, path)
                assert media_type == TEXT_ANSWERS.get(path, "application/json"), (method, path)
            if "{session_id}" in path:
                assert "404" in responses, (method, path)
                problem = responses["404"]["content"]["application/problem+json"]["schema"]
                assert problem == {"$ref": "#/components/schemas/Problem"}


def test_example_bodies_are_selectable_in_the_documentation():
    doc = json.loads(render())
    examples = doc["paths"]["/v1/sessions/{session_id}/ops"]["post"]["requestBody"]["content"][
        "application/json"]["examples"]
    assert {"linear", "sgd", "create_graph_second_derivative"} <= set(examples)
    assert "expect" not in examples["linear"]
    assert "OpsRequest" in doc["components"]["schemas"] and "Op" in doc["components"]["schemas"]


def test_the_server_freezes_its_startup_objects_and_collects_young_objects_less_often_while_it_runs():
    import gc

    from fastapi.testclient import TestClient

    from gradserve_server.app.main import create_app
    from gradserve_server.app.memory import MIDDLE_GC_THRESHOLD, YOUNG_GC_THRESHOLD

    before = gc.get_threshold()
    with TestClient(create_app()) as client:
        assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, MIDDLE_GC_THRESHOLD, *before[2:])
        assert gc.get_freeze_count() > 10_000  # the framework, the schemas, the engine's tables
        ok(client.get("/healthz"))
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_deleted_sessions_reference_cycles_are_freed_by_the_trimmer_however_rarely_the_collector_runs():
    """The collector's older generations run rarely under the server's thresholds; the cycles a session
    leaves (a leaf and its AccumulateGrad node hold each other) must still go once the session is deleted:
    the trimmer collects them. Collections by allocation count are switched off here, so that only the
    trimmer can free them."""
    import gc
    import time
    import weakref

    from fastapi.testclient import TestClient

    from gradserve_server.app.main import create_app

    with TestClient(create_app()) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ok(client.post(f"/v1/sessions/{sid}/ops", json={"ops": [
            {"op": "tensor", "out": "x", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}},
            {"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
            {"op": "backward", "args": ["s"]}]}))
        leaf = client.app.state.store.get(sid).state.tensors["x"]
        assert leaf._accumulator is not None and leaf._accumulator.variable is leaf  # the cycle
        alive = weakref.ref(leaf)
        del leaf
        gc.disable()
        try:
            assert client.delete(f"/v1/sessions/{sid}").status_code == 204
            assert alive() is not None  # only a collection frees it
            deadline = time.monotonic() + 10
            while alive() is not None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            gc.enable()
        assert alive() is None


def test_tensor_views_are_one_model_and_no_union_nests_another():
    """What generated clients turn into their types: a tensor view is one model (a `meta` view is it without
    `data` and `grad`), and no `anyOf` has an `anyOf` inside it (a union of unions)."""
    doc = json.loads(render())
    schemas = doc["components"]["schemas"]
    assert "TensorMeta" not in schemas
    view = {"anyOf": [{"$ref": "#/components/schemas/TensorView"}, {"type": "null"}]}
    for model in ("OpsResponse", "EvalResponse"):
        assert schemas[model]["properties"]["tensors"]["additionalProperties"] == view
    assert {"data", "grad"}.isdisjoint(schemas["TensorView"]["required"])
    assert {"default"}.isdisjoint(schemas["TensorView"]["properties"]["data"])

    def nested(node, where: str) -> list[str]:
        found = []
        if isinstance(node, dict):
            if any(isinstance(member, dict) and "anyOf" in member for member in node.get("anyOf", [])):
                found.append(where)
            for key, value in node.items():
                found += nested(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                found += nested(value, f"{where}/{i}")
        return found

    assert nested(doc, "#") == []
