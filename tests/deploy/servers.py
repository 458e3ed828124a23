"""Real servers for the deployment tests: redis-server and uvicorn, each on 127.0.0.1 and a free port,
each killed when its test is done."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


class RedisServer:
    """``redis-server`` in ``workdir``, without persistence or (``appendonly``) with an append-only file
    written at every command, as a restarted Redis finds it."""

    def __init__(self, workdir: Path, appendonly: bool = False):
        self.workdir = workdir
        self.appendonly = appendonly
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self) -> None:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence,
             "--dir", str(self.workdir), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> RedisServer:
        for _ in range(3):  # another process may take the free port between probe and bind
            self.port = free_port()
            self._spawn()
            if self._wait_ready(10):
                return self
            self.stop()
        raise RuntimeError("redis-server did not start")

    def restart(self) -> RedisServer:
        """Start again on the same port and directory (after ``stop``): with ``appendonly``, with the data."""
        self._spawn()
        if not self._wait_ready(20):
            raise RuntimeError("redis-server did not restart")
        return self

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Uvicorn:
    """The app in its own process, started with ``argv`` (a uvicorn command line) and ``env``."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log: Path, cwd: Path = ROOT):
        self.argv, self.env, self.port, self.log_path, self.cwd = argv, env, port, log, cwd
        self.proc: subprocess.Popen | None = None

    @classmethod
    def for_app(cls, env: dict[str, str], log: Path, *extra: str) -> Uvicorn:
        port = free_port()
        argv = [sys.executable, "-m", "uvicorn", "gradserve_server.app.main:app",
                "--host", "127.0.0.1", "--port", str(port),
                "--no-access-log", *extra]
        return cls(argv, env, port, log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Uvicorn:
        # only the settings given here: none leak in from the environment the tests run in
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GRADSERVE_", "UVICORN_")) and k not in ("WEB_CONCURRENCY", "FORWARDED_ALLOW_IPS")}
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, env=env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited with {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"uvicorn did not become ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL the whole process group (uvicorn's workers too): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
