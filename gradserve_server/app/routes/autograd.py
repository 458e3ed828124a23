"""The autograd actions as endpoints, mirroring torch's calls; each is a one-op list, run as heavy work
(``app.admission``): a bounded number at once, under a deadline, stopped when the client goes away."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request

from gradserve_server.app.deps import EncodingQuery
from gradserve_server.app.examples import BACKWARD_EXAMPLES, GRAD_EXAMPLES, ZERO_GRAD_EXAMPLES, openapi_examples
from gradserve_server.app.jsonbody import StrictJSONRoute
from gradserve_server.app.routes import TensorJSON
from gradserve_server.app.routes.sessions import SessionId
from gradserve_server.app.schemas.ops import BackwardRequest, GradRequest, OpsResponse, ZeroGradRequest
from gradserve_server.app.schemas.problems import problem_responses

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["autograd"], route_class=StrictJSONRoute)

ERRORS = problem_responses(404, 409, 413, 422, 503, 504)


async def _run(http: Request, session_id: str, op: dict, encoding) -> bytes:
    """The service and the requester from the request itself: an ``async`` route would run plain ``def``
    dependencies in the thread pool."""
    service = http.app.state.service
    return await http.app.state.heavy.run(http, service.run_one, session_id, op, encoding, http.state.owner,
                                          partition=service.partition_of(http.state))


@router.post("/backward", response_model=OpsResponse, responses=ERRORS, summary="tensor.backward()")
async def backward(session_id: SessionId, http: Request,
                   request: Annotated[BackwardRequest, Body(openapi_examples=openapi_examples(BACKWARD_EXAMPLES))],
                   encoding: EncodingQuery = "json") -> TensorJSON:
    """Equivalent to `{"ops": [{"op": "backward", "args": [tensor], "kwargs": {...}}]}`."""
    kwargs = request.model_dump(exclude={"tensor"}, exclude_unset=True)
    op = {"op": "backward", "args": [request.tensor], "kwargs": kwargs}
    return TensorJSON(await _run(http, session_id, op, encoding))


@router.post("/grad", response_model=OpsResponse, responses=ERRORS, summary="torch.autograd.grad()")
async def grad(session_id: SessionId, http: Request,
               request: Annotated[GradRequest, Body(openapi_examples=openapi_examples(GRAD_EXAMPLES))],
               encoding: EncodingQuery = "json") -> TensorJSON:
    """Equivalent to `{"ops": [{"op": "grad", "args": [outputs, inputs], "kwargs": {...}, "out": out}]}`;
    never writes `.grad`."""
    kwargs = request.model_dump(exclude={"outputs", "inputs", "out"}, exclude_unset=True)
    op = {"op": "grad", "args": [request.outputs, request.inputs], "kwargs": kwargs, "out": request.out}
    return TensorJSON(await _run(http, session_id, op, encoding))


@router.post("/zero_grad", response_model=OpsResponse, responses=ERRORS,
             summary="optimizer.zero_grad(set_to_none=True)")
async def zero_grad(session_id: SessionId, http: Request,
                    request: Annotated[ZeroGradRequest,
                                       Body(openapi_examples=openapi_examples(ZERO_GRAD_EXAMPLES))],
                    encoding: EncodingQuery = "json") -> TensorJSON:
    """Equivalent to `{"ops": [{"op": "zero_grad", "kwargs": {"tensors": ..., "set_to_none": ...}}]}`."""
    op = {"op": "zero_grad", "kwargs": request.model_dump(exclude_unset=True)}
    return TensorJSON(await _run(http, session_id, op, encoding))
