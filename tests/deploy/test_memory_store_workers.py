"""The memory store serves one process: it refuses to start when told it will run under several workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app
from gradserve_server.app.store import declared_workers, make_store
from tests.deploy.servers import ROOT, free_port


def test_declared_workers_reads_every_place_a_worker_count_is_given():
    assert declared_workers(1, environ={}, argv=["pytest"]) == 1
    assert declared_workers(3, environ={}, argv=[]) == 3
    assert declared_workers(1, environ={"WEB_CONCURRENCY": "4"}, argv=[]) == 4
    assert declared_workers(1, environ={"UVICORN_WORKERS": "2"}, argv=[]) == 2
    uvicorn_main = "/venv/lib/python3.11/site-packages/uvicorn/__main__.py"
    assert declared_workers(1, environ={}, argv=[uvicorn_main, "gradserve_server.app.main:app", "--workers", "3"]) == 3
    assert declared_workers(1, environ={}, argv=["/venv/bin/uvicorn", "gradserve_server.app.main:app",
                                                   "--workers=2"]) == 2
    assert declared_workers(1, environ={}, argv=["other-tool", "--workers", "8"]) == 1


@pytest.mark.parametrize("how", ["setting", "WEB_CONCURRENCY"])
def test_the_memory_store_refuses_several_workers(how, monkeypatch):
    if how == "setting":
        settings = Settings(workers=2)
    else:
        monkeypatch.setenv("WEB_CONCURRENCY", "2")
        settings = Settings()
    with pytest.raises(RuntimeError, match="memory session store serves one process.*GRADSERVE_STORE_URL"):
        create_app(settings)


def test_several_workers_are_fine_with_redis(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "4")
    store = make_store(Settings(store_url="redis://127.0.0.1:1/0"))  # connects lazily
    assert type(store).__name__ == "RedisStore"


def test_uvicorn_with_two_workers_and_the_memory_store_stops_with_the_reason():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADSERVE_", "UVICORN_", "WEB_CONCURRENCY"))}
    argv = [sys.executable, "-m", "uvicorn", "gradserve_server.app.main:app",
            "--host", "127.0.0.1", "--port", str(free_port()),
            "--workers", "2"]
    # its own process group, killed whatever happens: a supervisor that kept restarting workers would linger
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # each worker exits with uvicorn's startup-failure status, and then the supervisor stops by itself
    assert "refusing to start: the memory session store serves one process" in output
    assert "failed to start, stopping the parent process" in output
