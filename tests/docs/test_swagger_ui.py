"""Swagger UI as a person uses it, in a real headless Chromium against a real server process: create a
session with "Try it out" and "Execute", paste its id, pick every example of `/ops` and `/eval` (and of the
convenience endpoints, after the `/ops` example each names) in the dropdown, press Execute twice, and find
the documented outcome in the response panel. Swagger UI re-serialises each example through JavaScript
(`2.0` becomes `2`): this is the trap the examples' dtypes avoid. The SVG graph is looked at in the same
browser, through Graphviz and through the built-in layout."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from gradserve_server.app.examples import (
    BACKWARD_EXAMPLES,
    EVAL_EXAMPLES,
    GRAD_EXAMPLES,
    OPS_EXAMPLES,
    ZERO_GRAD_EXAMPLES,
)
from tests.app.test_examples import as_javascript_writes_it, check_fields, close
from tests.deploy.servers import Uvicorn
from tests.docs.browser import SwaggerUI

OPS = "ops-run_ops_v1_sessions__session_id__ops_post"
EVAL = "ops-eval_ops_v1_eval_post"
CREATE = "sessions-create_session_v1_sessions_post"
GRAPH_SVG = "graph-get_graph_svg_v1_sessions__session_id__graph_svg_get"
CATALOG = "meta-op_catalog_v1_ops_get"
CONVENIENCE = {"autograd-backward_v1_sessions__session_id__backward_post": BACKWARD_EXAMPLES,
               "autograd-grad_v1_sessions__session_id__grad_post": GRAD_EXAMPLES,
               "autograd-zero_grad_v1_sessions__session_id__zero_grad_post": ZERO_GRAD_EXAMPLES}


def assert_documented(example: dict, status: int, text: str, where: str) -> None:
    """The status and the key content the example's description promises, as the panel shows them."""
    expect = example["expect"]
    assert status == expect["status"], f"{where}: {status} {text[:500]}"
    body = json.loads(text)
    if status >= 400:
        for field in ("code", "detail", "op_index", "exception"):
            if field in expect:
                assert body[field] == expect[field], f"{where}: {field}"
        for part in expect.get("hint_contains", []):
            assert part in body["hint"], part
        if "detail_startswith" in expect:
            assert body["detail"].startswith(expect["detail_startswith"]), where
        return
    for name, fields in expect.get("tensors", {}).items():
        check_fields(body["tensors"][name], fields, f"{where}: {name}")
    for name in expect.get("absent", []):
        assert body["tensors"].get(name, {}).get("grad") is None, f"{where}: {name}"
    for i, entries in enumerate(expect.get("autograd", [])):
        got = {e["name"]: e for e in body["autograd"][i]["entries"]}
        for name, fields in entries.items():
            check_fields(got[name], fields, f"{where}: autograd[{i}].{name}")
    for name, values in expect.get("records", {}).items():
        assert close(body["records"][name], values), f"{where}: records {name}"


def press(ui: SwaggerUI, block, key: str, example: dict, where: str, times: int = 2) -> None:
    shown = ui.pick_example(block, key)
    # what the browser will send: the example as JavaScript writes it (2.0 -> 2), not Python's text
    assert json.loads(shown) == as_javascript_writes_it(example["value"]), where
    for n in range(1, times + 1):
        status, text = ui.execute(block)
        assert_documented(example, status, text, f"{where} (press {n})")


def test_every_example_pressed_in_swagger_ui_gives_its_documented_outcome(server, browser, tmp_path):
    ui = SwaggerUI(browser, server.url).open()
    create = ui.operation(CREATE)
    status, text = ui.execute(create)
    assert status == 201, text
    session_id = json.loads(text)["id"]

    ops = ui.operation(OPS)
    ui.fill(ops, "session_id", session_id)
    assert ui.examples(ops) == list(OPS_EXAMPLES)
    shown = ui.pick_example(ops, "linear")
    assert re.search(r'"args": \[\s*2\s*\]', shown) and "2.0" not in shown  # the browser's rewrite
    for key, example in OPS_EXAMPLES.items():
        press(ui, ops, key, example, f"/ops {key}")

    evaluate = ui.operation(EVAL)
    assert ui.examples(evaluate) == list(EVAL_EXAMPLES)
    for key, example in EVAL_EXAMPLES.items():
        press(ui, evaluate, key, example, f"/eval {key}")
    ui.screenshot(tmp_path / "swagger-eval.png", evaluate)

    for operation_id, examples in CONVENIENCE.items():
        block = ui.operation(operation_id)
        ui.fill(block, "session_id", session_id)
        for key, example in examples.items():
            press(ui, ops, example["setup"], OPS_EXAMPLES[example["setup"]], f"/ops {example['setup']}", times=1)
            press(ui, block, key, example, f"{operation_id} {key}", times=1)
    ui.screenshot(tmp_path / "swagger-ops.png", ops)


LEARNER = {"ops": [
    {"op": "tensor", "out": "x", "args": [[1.0, 2.0, 3.0]], "kwargs": {"dtype": "float32", "requires_grad": True}},
    {"op": "tensor", "out": "w", "args": [0.5], "kwargs": {"dtype": "float32", "requires_grad": True}},
    {"op": "mul", "out": "y", "args": ["x", "w"]}, {"op": "retain_grad", "args": ["y"]},
    {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]}


def session_with(base_url: str, body: dict | None) -> str:
    sid = httpx.post(f"{base_url}/v1/sessions").json()["id"]
    if body is not None:
        assert httpx.post(f"{base_url}/v1/sessions/{sid}/ops", json=body).status_code == 200
    return sid


def look_at_svg(browser, url: str, shot) -> dict:
    """Open an SVG document in the browser; what it rendered."""
    browser.get(url)
    seen = browser.execute_script("""
        const root = document.documentElement;
        const box = root.getBoundingClientRect();
        return {tag: root.tagName, nodes: document.querySelectorAll('g.node').length,
                text: root.textContent, width: box.width, height: box.height,
                graphviz: new XMLSerializer().serializeToString(document).includes('Generated by graphviz')};""")
    browser.save_screenshot(str(shot))
    return seen


def check_learner_svg(seen: dict, graphviz: bool) -> None:
    assert seen["tag"] == "svg" and seen["width"] > 100 and seen["height"] > 100, seen
    # MulBackward0, SumBackward0, two AccumulateGrad (and Graphviz's oval for the root s)
    assert seen["nodes"] == 4 + graphviz, seen
    for line in ("MulBackward0", "y: float32[3] = [0.5, 1, 1.5]", "y.grad = [1, 1, 1] (retained)",
                 "x.grad = [0.5, 0.5, 0.5] (1 accumulation)", "w.grad = 6 (1 accumulation)",
                 "_saved_self: float32[3] (freed)"):
        assert line in seen["text"], line


def picture_in_panel(browser, block) -> dict:
    """The picture Swagger UI shows above an SVG response's source (app/static/svg-picture.js), as drawn."""
    picture = block.find_element("css selector", ".live-responses-table img.gradserve-svg-picture")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", picture)
    return browser.execute_script("""
        const img = arguments[0];
        return {complete: img.complete, width: img.naturalWidth, height: img.naturalHeight,
                shown: img.getBoundingClientRect().width, src: img.src.slice(0, 25)};""", picture)


def check_graph_svgs(browser, base_url: str, tmp_path, label: str) -> None:
    # in Swagger UI: GET /graph/svg with root=s; the panel shows the graph as a picture above its source, and
    # the Request URL opens it drawn on its own
    sid = session_with(base_url, LEARNER)
    ui = SwaggerUI(browser, base_url).open()
    block = ui.operation(GRAPH_SVG)
    ui.fill(block, "session_id", sid)
    ui.fill(block, "root", "s")
    status, text = ui.execute(block)
    assert status == 200 and "<svg" in text and "MulBackward0" in text, text[:300]
    ui.wait.until(lambda b: picture_in_panel(b, block)["complete"])
    drawn = picture_in_panel(browser, block)
    assert drawn["src"] == "data:image/svg+xml;base64" and drawn["width"] > 100 and drawn["height"] > 100, drawn
    assert drawn["shown"] > 100, drawn
    browser.save_screenshot(str(tmp_path / f"swagger-graph-{label}.png"))
    url = ui.request_url(block)
    assert url == f"{base_url}/v1/sessions/{sid}/graph/svg?root=s", url
    seen = look_at_svg(browser, url, tmp_path / f"graph-{label}.png")
    check_learner_svg(seen, label == "graphviz")
    assert seen["graphviz"] == (label == "graphviz"), seen["graphviz"]

    empty = session_with(base_url, None)
    seen = look_at_svg(browser, f"{base_url}/v1/sessions/{empty}/graph/svg",
                       tmp_path / f"graph-{label}-empty.png")
    assert seen["tag"] == "svg" and seen["nodes"] <= 1 and seen["width"] > 100, seen
    assert "No autograd graph: this session holds no tensors yet" in " ".join(seen["text"].split())


def test_graph_svg_renders_in_the_browser_with_graphviz(server, browser, tmp_path):
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot is not on PATH (Debian's graphviz; python3 dev.py test installs it as root)")
    check_graph_svgs(browser, server.url, tmp_path, "graphviz")


def test_graph_svg_renders_in_the_browser_with_the_builtin_layout(browser, tmp_path):
    no_tools = tmp_path / "empty-path"
    no_tools.mkdir()
    srv = Uvicorn.for_app({"PATH": str(no_tools)}, tmp_path / "uvicorn.log").start()  # no dot on its PATH
    try:
        check_graph_svgs(browser, srv.url, tmp_path, "builtin")
    finally:
        srv.stop()


def test_the_op_catalog_is_browsed_in_swagger_ui_a_filtered_page_at_a_time(server, browser, tmp_path):
    ui = SwaggerUI(browser, server.url).open()
    block = ui.operation(CATALOG)
    # as it opens, "Try it out" asks for a page of 20 (the limit's example), not the whole catalog
    status, text = ui.execute(block)
    body = json.loads(text)
    assert status == 200 and len(body["ops"]) == 20 and body["total"] > 200, text[:300]
    assert ui.request_url(block) == f"{server.url}/v1/ops?offset=0&limit=20"
    ui.fill(block, "q", "svd")
    ui.fill(block, "limit", "5")
    status, text = ui.execute(block)
    body = json.loads(text)
    assert status == 200 and 0 < len(body["ops"]) <= 5 and body["total"] >= len(body["ops"]), text[:300]
    assert "linalg.svd" in [op["name"] for op in body["ops"]]
    ui.screenshot(tmp_path / "swagger-catalog.png", block)
