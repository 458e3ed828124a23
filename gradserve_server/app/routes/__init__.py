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
