"""A real gradserve server process for the documentation tests (walk-throughs, code blocks, Swagger UI), and one
headless Chromium for every browser test of them (started once: the site's pages and Swagger UI)."""

from __future__ import annotations

import pytest

from tests.deploy.servers import Uvicorn
from tests.docs.browser import start_chromium, stop_chromium


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app with default settings (memory store, open), on 127.0.0.1 and a free port."""
    srv = Uvicorn.for_app({}, tmp_path_factory.mktemp("server") / "uvicorn.log").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def browser():
    b = start_chromium()
    yield b
    stop_chromium(b)
