"""The autograd graph of a session, as data or drawn."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from gradserve_server.app.routes import TensorJSON
from gradserve_server.app.routes.sessions import SessionId
from gradserve_server.app.schemas.graph import GraphView
from gradserve_server.app.schemas.problems import problem_responses

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["graph"])

MEDIA_TYPES = {"dot": "text/vnd.graphviz", "mermaid": "text/plain; charset=utf-8", "svg": "image/svg+xml"}

GRAPH_CONTENT = {
    "text/vnd.graphviz": {"schema": {"type": "string"}, "example": "digraph { ... }"},
    "text/plain": {"schema": {"type": "string"}, "example": "flowchart BT ..."},
    "image/svg+xml": {"schema": {"type": "string"}},
}


@router.get("/graph", response_model=GraphView,
            responses={200: {"content": GRAPH_CONTENT, "description": "The graph as JSON (default), DOT, "
                             "Mermaid or SVG."}, **problem_responses(404, 422, 503)},
            summary="The autograd graph")
async def get_graph(session_id: SessionId, request: Request,
                    root: Annotated[str | None, Query(description="Only the graph behind this tensor; the "
                                                      "whole session's graph when omitted.")] = None,
                    format: Annotated[Literal["json", "dot", "svg", "mermaid"], Query(
                        description="`svg` uses Graphviz `dot` when installed (at most "
                        "`GRADSERVE_GRAPH_RENDER_TIMEOUT_SECONDS`, else, or when it fails, a built-in layered "
                        "layout). DOT, Mermaid and SVG draw at most `GRADSERVE_MAX_GRAPH_RENDER_NODES` nodes "
                        "(422 `limit_exceeded` above); JSON has no such limit."
                    )] = "json") -> Response:
    """grad_fn nodes with torch's names, AccumulateGrad nodes for leaves, next_functions edges (None
    edges included) and saved tensors (shape, dtype, freed). Beside torch's names, every format shows each
    node's tensor: name, shape and dtype, the values of small tensors, a leaf's `.grad` with its accumulation
    count, a retained grad, and saved values that a backward freed. A graph without nodes is drawn as a
    message saying why. Drawing an SVG counts as heavy work: it waits for a slot like a heavy op list."""
    service = request.app.state.service
    owner = request.state.owner
    if format == "svg":
        rendered = await request.app.state.heavy.run(request, service.graph, session_id, root, format, owner)
    else:
        rendered = await run_in_threadpool(service.graph, session_id, root, format, owner)
    if format == "json":
        return TensorJSON(rendered)
    return Response(rendered, media_type=MEDIA_TYPES[format])
