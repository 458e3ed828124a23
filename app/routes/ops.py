"""Op lists: run them in a session, or one-shot in a throw-away session (eval)."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import EncodingQuery, RawBody, ServiceDep
from app.examples import EVAL_EXAMPLES, OPS_EXAMPLES, openapi_examples
from app.routes import TensorJSON, json_body
from app.routes.sessions import SessionId
from app.schemas.ops import EvalResponse, OpsResponse
from app.schemas.problems import problem_responses

router = APIRouter(prefix="/v1", tags=["ops"])


@router.post("/sessions/{session_id}/ops", response_model=OpsResponse,
             responses=problem_responses(404, 409, 413, 422),
             openapi_extra=json_body("OpsRequest", openapi_examples(OPS_EXAMPLES)),
             summary="Run an op list in a session (atomically)")
def run_ops(session_id: SessionId, body: RawBody, service: ServiceDep,
            encoding: EncodingQuery = "json") -> TensorJSON:
    """Runs the ops in order. On success: the names each op bound, a view of every tensor created or
    changed, each backward/grad pass's per-tensor contribution and accumulated `.grad`, torch's warnings,
    and `records` when `record` is given. On failure: a problem naming the failing op, and the session is
    exactly as it was before the request."""
    request = service.parse_ops(body)
    return TensorJSON(service.run_ops(session_id, request, encoding))


@router.post("/eval", response_model=EvalResponse, responses=problem_responses(404, 409, 413, 422),
             openapi_extra=json_body("EvalRequest", openapi_examples(EVAL_EXAMPLES)),
             summary="Run an op list one-shot, without a session")
def eval_ops(body: RawBody, service: ServiceDep, encoding: EncodingQuery = "json") -> TensorJSON:
    """Runs the ops in a fresh namespace and returns the tensors named in `return` (gradients as
    `x.grad`); nothing is kept."""
    request = service.parse_eval(body)
    return TensorJSON(service.eval(request, encoding))
