"""Op lists: run them in a session, or one-shot in a throw-away session (eval).

These two routes are ``async``: they read the body and, for small bounded op lists, parse and run them on
the event loop (``SessionService.inline_ok``); everything else is heavy work (``app.admission``): it waits for
one of a bounded number of slots, runs in the thread pool under a deadline, and stops when the client goes
away. The service comes from ``request.app.state`` rather than a dependency: on a request of a few
hundred microseconds, FastAPI's dependency resolution is a measurable share.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from gradserve_server.app.deps import EncodingQuery
from gradserve_server.app.examples import EVAL_EXAMPLES, OPS_EXAMPLES, openapi_examples
from gradserve_server.app.routes import ROUTE_DEBUG, TensorJSON, json_body, openapi_extra
from gradserve_server.app.routes.sessions import SessionId
from gradserve_server.app.schemas.ops import EvalResponse, OpsResponse
from gradserve_server.app.schemas.problems import problem_responses

router = APIRouter(prefix="/v1", tags=["ops"])


@router.post("/sessions/{session_id}/ops", response_model=OpsResponse,
             responses=problem_responses(404, 409, 413, 422, 503, 504),
             openapi_extra=openapi_extra(json_body("OpsRequest", openapi_examples(OPS_EXAMPLES)), ROUTE_DEBUG),
             summary="Run an op list in a session (atomically)")
async def run_ops(session_id: SessionId, request: Request, encoding: EncodingQuery = "json") -> TensorJSON:
    """Runs the ops in order. On success: the names each op bound, a view of every tensor created or
    changed, each backward/grad pass's per-tensor contribution and accumulated `.grad`, torch's warnings,
    and `records` when `record` is given. On failure: a problem naming the failing op, and the session is
    exactly as it was before the request."""
    service = request.app.state.service
    heavy = request.app.state.heavy
    owner = request.state.owner
    partition = service.partition_of(request.state)  # whose plans: this key's (this address's when open)
    body = await request.body()
    if service.small_body(body):  # see app.service: small, bounded requests run on the event loop
        parsed = service.parse_ops(body)
        if service.inline_ok(parsed):
            result = await service.run_ops_async(session_id, parsed, encoding, owner=owner, partition=partition)
            if result is None:  # cheap, but not now on the loop: the light lane, never behind heavy work
                result = await request.app.state.light.run(request, service.run_ops, session_id, parsed, encoding,
                                                           owner=owner, partition=partition, light=True)
            if result is not None:
                return TensorJSON(result)
        return TensorJSON(await heavy.run(request, service.run_ops, session_id, parsed, encoding, owner=owner,
                                          partition=partition))

    def parse_and_run(control) -> bytes:
        return service.run_ops(session_id, service.parse_ops(body), encoding, owner=owner, control=control,
                               partition=partition)

    return TensorJSON(await heavy.run(request, parse_and_run))


@router.post("/eval", response_model=EvalResponse, responses=problem_responses(404, 409, 413, 422, 503, 504),
             openapi_extra=openapi_extra(json_body("EvalRequest", openapi_examples(EVAL_EXAMPLES)), ROUTE_DEBUG),
             summary="Run an op list one-shot, without a session")
async def eval_ops(request: Request, encoding: EncodingQuery = "json") -> TensorJSON:
    """Runs the ops in a fresh namespace and returns the tensors named in `return` (gradients as
    `x.grad`); nothing is kept. Each value comes once: data only in `tensors`; the `autograd` report
    names where each pass's gradient is (`contribution`: `x.grad`, or a `grad` op's `out` name) instead of
    repeating it."""
    service = request.app.state.service
    heavy = request.app.state.heavy
    partition = service.partition_of(request.state)
    body = await request.body()
    if service.small_body(body):
        parsed = service.parse_eval(body)
        if service.inline_ok(parsed):
            result = service.eval_inline(parsed, encoding, partition)
            if result is None:  # past the loop's bound (under load): the light lane, then the heavy one
                result = await request.app.state.light.run(request, service.eval_inline, parsed, encoding, partition)
            if result is not None:
                return TensorJSON(result)
        return TensorJSON(await heavy.run(request, service.eval, parsed, encoding, partition=partition))

    def parse_and_eval(control) -> bytes:
        return service.eval(service.parse_eval(body), encoding, control=control, partition=partition)

    return TensorJSON(await heavy.run(request, parse_and_eval))
