"""The suite's programs over HTTP: ``POST /v1/eval`` of the real app (in process), returning the same
``Outcome`` the engine runner gives, read off the response's tensor views."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.fuzz.harness import HTTP_RIG

from .suite import Outcome, Phases, plain, run_engine

_NP = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_, "int32": np.int32,
       "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
_SPECIAL = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def _array(data, dtype: str) -> np.ndarray:
    def conv(v):
        if isinstance(v, list):
            return [conv(x) for x in v]
        return _SPECIAL.get(v, v) if isinstance(v, str) else v
    return np.asarray(conv(data), dtype=_NP[dtype])


def _json(v):
    """Arrays as nested lists, non-finite floats as the API's strings."""
    if isinstance(v, np.ndarray):
        return plain(v.tolist())
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _json(x) for k, x in v.items()}
    return plain(v)


class HttpEval:
    def __init__(self):
        from fastapi.testclient import TestClient

        from gradserve_server.app.config import Settings
        from gradserve_server.app.main import create_app
        self.client = TestClient(create_app(Settings(access_log=False, log_level="WARNING", **HTTP_RIG)))
        self.client.__enter__()

    def close(self):
        self.client.__exit__(None, None, None)

    def run(self, ops: list[dict], names: list[str]) -> Outcome:
        ops = [{**op, "args": _json(op.get("args", [])), "kwargs": _json(op.get("kwargs", {}))} for op in ops]
        r = self.client.post("/v1/eval", json={"ops": ops, "return": names})
        body = r.json()
        if r.status_code != 200:
            if r.status_code >= 500 or "exception" not in body:
                return Outcome(error=(f"HTTP {r.status_code}", str(body.get("detail"))))
            return Outcome(error=(body["exception"], body["detail"].strip()))
        views = [body["tensors"].get(n) for n in names]
        return Outcome(tensors=[None if v is None else (_array(v["data"], v["dtype"]).reshape(v["shape"]),
                                                         v["dtype"]) for v in views],
                       grad_fns=[None if v is None else v["grad_fn"] for v in views])

    def check(self, ph: Phases) -> str | None:
        """The sample's forward (and reverse, when differentiable) through HTTP, compared with torch."""
        ph.runner = self.run
        try:
            found = ph.forward() + (ph.reverse() if ph.differentiable else [])
        finally:
            ph.runner = run_engine
        return "; ".join(f"{c}: {d}" for c, d in found) or None
