"""The real app over HTTP (TestClient), with the real engine."""

from __future__ import annotations

from collections import Counter

import pytest
from fastapi.testclient import TestClient

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app


def make_client(**overrides) -> TestClient:
    return TestClient(create_app(Settings(**overrides)))


@pytest.fixture
def client():
    with make_client() as c:
        yield c


@pytest.fixture
def session(client) -> str:
    return client.post("/v1/sessions").json()["id"]


def tensor(name: str, value, requires_grad: bool = True) -> dict:
    return {"op": "tensor", "out": name, "args": [value],
            "kwargs": {"requires_grad": True} if requires_grad else {}}


def run(client: TestClient, session: str, ops: list[dict], **body):
    return client.post(f"/v1/sessions/{session}/ops", json={"ops": ops, **body})


def ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def assert_problem(response, status: int, code: str | None = None, detail: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["type"] == f"urn:gradserve:problem:{body['code']}"
    assert body["title"] and body["detail"]
    if code is not None:
        assert body["code"] == code
    if detail is not None:
        assert body["detail"] == detail
    return body


#: generated cases of the OpenAPI fuzzing (tests/app/test_fuzz_openapi.py), reported in the terminal summary (a
#: pytest-xdist worker sends its counts to the controller when it finishes)
FUZZ_CASES: Counter[str] = Counter()


def pytest_collection_modifyitems(items):
    """schemathesis gives every operation's test of one function the same node id (the operation is only in its
    name): pytest-xdist schedules tests by node id and would run one of them, so each gets its operation in it."""
    for item in items:
        if getattr(item, "operation_label", None) and not item.nodeid.endswith(f"::{item.name}"):
            if hasattr(item, "_id"):  # pytest 9: a NodeId, its parent's id and its name
                item._id = item.parent.id.child(item.name)
            else:
                item._nodeid = f"{item.parent.nodeid}::{item.name}"


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["fuzz_cases"] = dict(FUZZ_CASES)


def pytest_testnodedown(node, error):
    FUZZ_CASES.update(getattr(node, "workeroutput", {}).get("fuzz_cases", {}))


def pytest_terminal_summary(terminalreporter):
    if FUZZ_CASES:
        parts = ", ".join(f"{n} {kind}" for kind, n in FUZZ_CASES.items())
        terminalreporter.write_line(f"schemathesis: {sum(FUZZ_CASES.values())} generated cases ({parts})")
