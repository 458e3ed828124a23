"""Sessions and the tensors they hold."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from gradserve_server.app.deps import ClientDep, EncodingQuery, OwnerDep, ServiceDep
from gradserve_server.app.routes import TensorJSON
from gradserve_server.app.schemas.problems import problem_responses
from gradserve_server.app.schemas.sessions import SessionCreated, SessionList, SessionSummary
from gradserve_server.app.schemas.tensors import TensorList, TensorView

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

SessionId = Annotated[str, Path(description="The id returned by `POST /v1/sessions`.")]
TensorName = Annotated[str, Path(description="A tensor name, or `name.grad` for its gradient.")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=SessionCreated,
             responses=problem_responses(429, 503), summary="Create a session")
def create_session(service: ServiceDep, owner: OwnerDep, client: ClientDep, response: Response) -> dict:
    """A new, empty namespace of tensors. It expires after `GRADSERVE_SESSION_TTL_SECONDS` without use."""
    created = service.create_session(owner, client)
    response.headers["Location"] = f"/v1/sessions/{created['id']}"
    return created


@router.get("", response_model=SessionList, responses=problem_responses(503), summary="List sessions")
def list_sessions(service: ServiceDep, owner: OwnerDep) -> dict:
    """The caller's own sessions (with API keys, those its key created)."""
    return service.list_sessions(owner)


@router.get("/{session_id}", response_model=SessionSummary, responses=problem_responses(404, 503),
            summary="Describe a session")
def get_session(session_id: SessionId, service: ServiceDep, owner: OwnerDep) -> dict:
    """Tensors by name, autograd nodes alive, backward passes run and bytes held."""
    return service.summary(session_id, owner)


@router.delete("/{session_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=problem_responses(404, 503), summary="Delete a session")
def delete_session(session_id: SessionId, service: ServiceDep, owner: OwnerDep) -> Response:
    service.delete_session(session_id, owner)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{session_id}/tensors", response_model=TensorList, responses=problem_responses(404, 503),
            summary="List a session's tensors")
def list_tensors(session_id: SessionId, service: ServiceDep, owner: OwnerDep,
                 encoding: EncodingQuery = "json") -> TensorJSON:
    return TensorJSON(service.tensors(session_id, encoding, owner))


@router.get("/{session_id}/tensors/{name}", response_model=TensorView, responses=problem_responses(404, 503),
            summary="Read one tensor (or a gradient: `x.grad`)")
def get_tensor(session_id: SessionId, name: TensorName, service: ServiceDep, owner: OwnerDep,
               encoding: EncodingQuery = "json") -> TensorJSON:
    """404 `unknown_tensor` for a name the session does not hold; 404 `grad_not_set` for `x.grad` while x
    has no gradient."""
    return TensorJSON(service.tensor(session_id, name, encoding, owner))
