"""The autograd graph of a session, as data or drawn.

One operation per answer type, so that generated clients read each one: `GET .../graph` (JSON),
`.../graph/dot`, `.../graph/mermaid` and `.../graph/svg`. The older `GET .../graph?format=dot|mermaid|svg`
still answers as before, but the OpenAPI document leaves `format` out: it lists one answer per operation.
"""

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


class DotResponse(Response):
    media_type = "text/vnd.graphviz"


class MermaidResponse(Response):
    media_type = "text/plain"


class SvgResponse(Response):
    media_type = "image/svg+xml"


DRAWN = {"dot": DotResponse, "mermaid": MermaidResponse, "svg": SvgResponse}

Root = Annotated[str | None, Query(description="Only the graph behind this tensor; the whole session's graph "
                                   "when omitted.")]

DRAWN_LIMIT = ("Draws at most `GRADSERVE_MAX_GRAPH_RENDER_NODES` nodes (422 `limit_exceeded` above; the JSON "
               "graph has no such limit). Beside torch's names, each node shows its tensor: name, shape and "
               "dtype, the values of small tensors, a leaf's `.grad` with its accumulation count, a retained "
               "grad, and saved values that a backward freed. A graph without nodes is drawn as a message "
               "saying why.")


async def render(request: Request, session_id: str, root: str | None, format: str) -> Response:
    service = request.app.state.service
    owner = request.state.owner
    if format == "svg":  # drawing an SVG counts as heavy work: it waits for a slot like a heavy op list
        rendered = await request.app.state.heavy.run(request, service.graph, session_id, root, format, owner)
    else:
        rendered = await run_in_threadpool(service.graph, session_id, root, format, owner)
    if format == "json":
        return TensorJSON(rendered)
    return DRAWN[format](rendered)


@router.get("/graph", response_model=GraphView, responses=problem_responses(404, 422, 503),
            summary="The autograd graph")
async def get_graph(session_id: SessionId, request: Request, root: Root = None,
                    format: Annotated[Literal["json", "dot", "svg", "mermaid"], Query(
                        include_in_schema=False)] = "json") -> Response:
    """grad_fn nodes with torch's names, AccumulateGrad nodes for leaves, next_functions edges (None
    edges included) and saved tensors (shape, dtype, freed), each node with its tensor's name, shape, dtype,
    small values and gradient. Drawn: `/graph/dot`, `/graph/mermaid`, `/graph/svg` (the older
    `?format=dot|mermaid|svg` here still answers those drawings, but is not documented: one operation, one
    media type)."""
    return await render(request, session_id, root, format)


@router.get("/graph/dot", response_class=DotResponse, responses=problem_responses(404, 422, 503),
            summary="The autograd graph in Graphviz DOT",
            description=f"The graph as a Graphviz `digraph`. {DRAWN_LIMIT}")
async def get_graph_dot(session_id: SessionId, request: Request, root: Root = None) -> Response:
    return await render(request, session_id, root, "dot")


@router.get("/graph/mermaid", response_class=MermaidResponse, responses=problem_responses(404, 422, 503),
            summary="The autograd graph as a Mermaid flowchart",
            description=f"The graph as Mermaid flowchart text (`flowchart TB ...`). {DRAWN_LIMIT}")
async def get_graph_mermaid(session_id: SessionId, request: Request, root: Root = None) -> Response:
    return await render(request, session_id, root, "mermaid")


# the SVG as bytes (`format: binary`): generators read a non-text media type only as bytes (openapi-generator's
# bytearray; openapi-python-client's File, given `content_type_overrides: {image/svg+xml:
# application/octet-stream}`); a `type: string` answer of this type is unreadable to both
SVG_CONTENT = {"image/svg+xml": {"schema": {"type": "string", "format": "binary"}}}


@router.get("/graph/svg", response_class=SvgResponse,
            responses={200: {"content": SVG_CONTENT}, **problem_responses(404, 422, 503)},
            summary="The autograd graph drawn as SVG",
            description="The graph as a picture (Swagger UI shows it). Graphviz `dot` lays it out when installed "
            "(within `GRADSERVE_GRAPH_RENDER_TIMEOUT_SECONDS`), else, or when it fails, a built-in layered "
            f"layout. Drawing counts as heavy work: it waits for a slot like a heavy op list. {DRAWN_LIMIT}")
async def get_graph_svg(session_id: SessionId, request: Request, root: Root = None) -> Response:
    return await render(request, session_id, root, "svg")
