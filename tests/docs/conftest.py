"""A real gradserve server process for the documentation tests (walk-throughs, code blocks, Swagger UI)."""

from __future__ import annotations

import pytest

from tests.deploy.servers import Uvicorn


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app with default settings (memory store, open), on 127.0.0.1 and a free port."""
    srv = Uvicorn.for_app({}, tmp_path_factory.mktemp("server") / "uvicorn.log").start()
    yield srv
    srv.stop()
