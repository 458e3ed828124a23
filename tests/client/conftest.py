"""A real gradserve server (uvicorn in its own process, on a free port) for the client's tests, and a
torch-layer session on it per test."""

from __future__ import annotations

import pytest

import gradserve
from tests.deploy.servers import Uvicorn


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    # rate limiting off, per key and per address (an open server): a test may send hundreds of requests a second
    limits_off = {"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0"}
    srv = Uvicorn.for_app(limits_off, tmp_path_factory.mktemp("client") / "uvicorn.log")
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def http(server):
    with gradserve.Client(server.url) as client:
        yield client


@pytest.fixture
def ctx(server):
    """A torch-layer session on the test server: what the test records goes there; deleted at the end."""
    with gradserve.session(client=gradserve.Client(server.url)) as context:
        yield context
