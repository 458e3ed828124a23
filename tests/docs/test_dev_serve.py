"""`python3 dev.py serve` as the docs describe it (docs/tutorial/run.md): `--port N` serves on N and is echoed
once; the dev server sends no `server` header and answers malformed HTTP as problem+json, as the image does
(docs/how-to/keys.md, "Headers"); each request is one JSON access line on stderr, and `--no-access-log`
turns that line off too (docs/how-to/monitoring.md). The command dev.py builds is started for real, on a free
loopback port (with this interpreter: the same environment dev.py's `serve` would install)."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys

import httpx
import pytest

from tests.deploy.servers import ROOT, Uvicorn, free_port


def load_dev():
    spec = importlib.util.spec_from_file_location("gradserve_dev", ROOT / "dev.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dev = load_dev()


def started(args: list[str], tmp_path) -> tuple[Uvicorn, list[str]]:
    cmd, env = dev.serve_command(args)
    port = int(cmd[cmd.index("--port") + 1])
    srv = Uvicorn([sys.executable, *cmd[1:]], env, port, tmp_path / "uvicorn.log").start()
    return srv, cmd


def access_lines(srv: Uvicorn) -> list[dict]:
    lines = []
    for line in srv.log_path.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("logger") == "gradserve.access":
                lines.append(record)
    return lines


def test_port_and_host_replace_the_defaults_and_appear_once():
    cmd, env = dev.serve_command(["--port", "8080"])
    assert cmd.count("--port") == 1 and cmd[cmd.index("--port") + 1] == "8080"
    assert cmd.count("--host") == 1 and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert env == {}
    cmd, _ = dev.serve_command(["--host=0.0.0.0", "--port=9000"])
    assert "--host" not in cmd and "--port" not in cmd and cmd[-2:] == ["--host=0.0.0.0", "--port=9000"]
    cmd, _ = dev.serve_command([])
    assert cmd[cmd.index("--port") + 1] == "8000"


def test_the_dev_server_serves_on_the_given_port_like_the_image(tmp_path):
    port = free_port()
    srv, cmd = started(["--port", str(port)], tmp_path)
    try:
        assert srv.port == port
        r = httpx.get(f"{srv.url}/healthz")
        assert r.status_code == 200
        assert "server" not in r.headers, r.headers  # --no-server-header, as docs/how-to/keys.md says
        r = httpx.post(f"{srv.url}/v1/sessions")
        assert r.status_code == 201
        # malformed HTTP: a problem+json 400 from the protocol layer, not uvicorn's plain text
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
            answer = s.recv(4096).decode("latin-1")
        assert answer.startswith("HTTP/1.1 400") and "application/problem+json" in answer, answer
        assert "bad_http_request" in answer
    finally:
        srv.stop()
    lines = [r for r in access_lines(srv) if r["path"] != "/readyz"]  # Uvicorn.start polls /readyz
    assert [(r["method"], r["path"], r["status"]) for r in lines] == [("GET", "/healthz", 200),
                                                                      ("POST", "/v1/sessions", 201)]
    # uvicorn's own access lines ('"GET /healthz HTTP/1.1" 200') are off: each request is logged once
    assert '"GET /healthz HTTP/1.1" 200' not in srv.log_path.read_text()


def test_no_access_log_turns_off_the_json_access_lines_too(tmp_path):
    cmd, env = dev.serve_command(["--no-access-log", "--port", str(free_port())])
    assert env == {"GRADSERVE_ACCESS_LOG": "false"} and cmd.count("--no-access-log") == 1
    srv, _ = started(["--no-access-log", "--port", str(free_port())], tmp_path)
    try:
        for _ in range(3):
            assert httpx.post(f"{srv.url}/v1/sessions").status_code == 201
    finally:
        srv.stop()
    assert access_lines(srv) == []
    assert "/v1/sessions" not in srv.log_path.read_text() and "/readyz" not in srv.log_path.read_text()


@pytest.mark.parametrize("args", [["--port", "8001"], ["--no-access-log"], []])
def test_what_serve_echoes_is_what_it_runs(args, capsys, monkeypatch):
    ran = {}
    monkeypatch.setattr(dev, "ensure_env", lambda extra: None)
    monkeypatch.setattr(dev.os, "execve", lambda path, argv, env: ran.update(argv=argv, env=env))
    monkeypatch.setattr(dev.os, "chdir", lambda path: None)
    monkeypatch.delenv("GRADSERVE_ACCESS_LOG", raising=False)
    dev.serve(args)
    echoed = capsys.readouterr().out.strip().removeprefix("+ ").split(" ")
    env = dict(part.split("=", 1) for part in echoed if part.startswith("GRADSERVE_"))
    assert echoed[len(env):] == ran["argv"]
    assert echoed.count("--port") == 1
    assert all(ran["env"][k] == v for k, v in env.items())
    assert (ran["env"].get("GRADSERVE_ACCESS_LOG") == "false") == ("--no-access-log" in args)
