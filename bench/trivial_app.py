"""The floor of a FastAPI request on loopback, for bench/client.py: one plain ``def`` route that parses a JSON
body and answers a small JSON object, nothing else (no middleware, no store, no engine).

    uvicorn bench.trivial_app:app --port 8001
"""

from __future__ import annotations

from typing import Any

from fastapi import Body, FastAPI

app = FastAPI()


@app.post("/echo")
def echo(body: dict[str, Any] = Body(...)) -> dict:  # noqa: B008 - FastAPI's idiom
    return {"ops": len(body.get("ops", ()))}


@app.get("/readyz")
def readyz() -> dict:
    return {"status": "ok"}
