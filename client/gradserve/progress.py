"""A progress bar for a sync that takes long, fed by the server.

A request the client sends carries an ``X-Request-ID``; past ``GRADSERVE_PROGRESS_AFTER`` seconds (2 by
default) a thread polls ``GET /v1/requests/{id}/progress`` and draws a tqdm-style line on stderr (ops run of
the ops sent), erased when the request ends. Only on a terminal: ``GRADSERVE_PROGRESS=0`` turns it off,
``GRADSERVE_PROGRESS=1`` draws it even when stderr is not a terminal.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import httpx

WIDTH = 24


def enabled(stream=None) -> bool:
    setting = os.environ.get("GRADSERVE_PROGRESS", "")
    if setting in ("0", "false", "off"):
        return False
    stream = stream or sys.stderr
    return setting in ("1", "true", "on") or bool(getattr(stream, "isatty", lambda: False)())


def bar(done: int, total: int, seconds: float) -> str:
    """``gradserve: 1200/5000 ops |#####                   | 24% 3.1s``."""
    if total <= 0:
        return f"gradserve: {done} ops {seconds:.1f}s"
    filled = min(WIDTH, WIDTH * done // total)
    return (f"gradserve: {done}/{total} ops |{'#' * filled}{' ' * (WIDTH - filled)}| {100 * done // total:3d}% "
            f"{seconds:.1f}s")


class Watch:
    """``with Watch(http, request_id):`` around a request: the bar, while it runs past the delay."""

    def __init__(self, http: httpx.Client, request_id: str, stream=None, after: float | None = None,
                 every: float = 0.25):
        self.http, self.request_id, self.every = http, request_id, every
        self.stream = stream or sys.stderr
        self.after = float(os.environ.get("GRADSERVE_PROGRESS_AFTER", 2.0)) if after is None else after
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gradserve-progress", daemon=True)
        self._drawn = 0

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        if self._stop.wait(self.after):
            return
        try:
            while not self._stop.is_set():
                try:
                    body = self.http.get(f"/v1/requests/{self.request_id}/progress", timeout=2.0).json()
                except (httpx.HTTPError, ValueError):
                    body = None
                if isinstance(body, dict) and body.get("state") == "running":
                    self._draw(bar(body["done"], body["total"], time.monotonic() - started))
                self._stop.wait(self.every)
        finally:
            if self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self.stream.flush()

    def _draw(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self._drawn))
        self.stream.flush()
        self._drawn = max(self._drawn, len(line))
