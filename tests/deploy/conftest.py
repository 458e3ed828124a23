"""A real redis-server for the deployment tests (skipped, with the reason, where none can be had)."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.deploy.servers import RedisServer, Uvicorn, redis_server_binary

NO_REDIS = ("redis-server is not on PATH: install Debian's redis-server package (python3 dev.py test does so "
            "when run as root with apt-get available)")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if redis_server_binary() is None:
        pytest.skip(NO_REDIS)
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    return redis_server.url


@pytest.fixture
def key_prefix() -> str:
    """Each test its own keys, in the one server."""
    return f"test-{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def redis_client(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def uvicorns(tmp_path):
    """Start app processes with ``uvicorns(env)``; every one is killed at the end of the test."""
    started: list[Uvicorn] = []

    def start(env: dict[str, str], *extra: str) -> Uvicorn:
        server = Uvicorn.for_app(env, tmp_path / f"uvicorn-{len(started)}.log", *extra)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()
