"""HTTP routes: parse, call the service, return. Errors are raised, never built here."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response


class TensorJSON(Response):
    """A body already serialised by orjson (tensor data never goes through jsonable_encoder)."""

    media_type = "application/json"


def json_body(schema_name: str, examples: dict[str, Any] | None = None) -> dict[str, Any]:
    """``openapi_extra`` for routes that read their JSON body themselves (orjson + TypeAdapter)."""
    content: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}
    if examples:
        content["examples"] = examples
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


#: the debug request header of the op list routes, and the response header it asks for (app.observability)
ROUTE_DEBUG: dict[str, Any] = {
    "parameters": [{
        "name": "X-Gradserve-Debug", "in": "header", "required": False,
        "description": "Debug aspects, comma-separated (others are ignored): `route` asks for `X-Gradserve-Route` on "
                       "the response, the way the engine ran the list and why (docs: explanation/plans.md, \"Which "
                       "way a list ran\"). Nothing else about the response changes.",
        "schema": {"type": "string", "examples": ["route"]},
    }],
    "responses": {"200": {"headers": {"X-Gradserve-Route": {
        "description": "Only when asked for (`X-Gradserve-Debug: route`): `<route>; reason=<reason>` and, where "
                       "there is one, `; detail=\"...\"` (free text, for a person). `<route>`: `replayed`, "
                       "`recorded`, `composed`, `cold` or `fallback`; `<reason>`: a fixed code (`plan_hit`, "
                       "`first_sighting`, `unplannable_op`, `not_composable:misses`...). Also on a problem "
                       "response of a run that failed.",
        "schema": {"type": "string"}}}}},
}


def openapi_extra(*parts: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` parts merged (each a dict of the operation's fields; nested dicts merged)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = openapi_extra(out[key], value)
            else:
                out[key] = value
    return out
