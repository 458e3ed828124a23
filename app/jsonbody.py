"""JSON request bodies parsed strictly: an object with a repeated key is refused (422 ``duplicate_key``)
rather than silently keeping the last value, on every route that takes a body.

orjson keeps the last of repeated keys and says nothing, so the check is made after it parsed, cheaply: each
key in a body is followed by exactly one ``:`` outside strings, and re-serialising what orjson kept writes one
per key it kept, with every string as it was (orjson never escapes ``:``). Equal counts prove no key was
dropped; any doubt (a difference, which may also come from colons inside dropped values, or ``\\u`` escapes,
which may spell a colon) is settled by the standard library's parser, which reports every key.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request

from app.errors import InvalidInput


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise InvalidInput(f"duplicate key {key!r} in a JSON object: every key may appear once",
                               code="duplicate_key")
        seen[key] = value
    return seen


def check_unique_keys(body: bytes, data: Any) -> None:
    """Raise InvalidInput(``duplicate_key``) when ``body`` (already parsed by orjson into ``data``) repeats a
    key in one of its objects."""
    colons = body.count(b":")
    if not colons:
        return
    if b"\\u" not in body:
        try:
            if orjson.dumps(data).count(b":") == colons:
                return
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (255): the exact way
            pass
    try:
        json.loads(body, object_pairs_hook=_refuse_repeats)
    except RecursionError:
        pass  # nested deeper than Python parses: refused as too deep by the request's validation


def loads(body: bytes) -> Any:
    """``orjson.loads`` that refuses repeated keys (raises orjson.JSONDecodeError for malformed JSON)."""
    data = orjson.loads(body)
    check_unique_keys(body, data)
    return data


class StrictJSONRoute(APIRoute):
    """A route whose JSON body (parsed by FastAPI) is first checked for repeated keys."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict_handler(request: Request):
            body = await request.body()  # cached on the request: FastAPI's own parse reads the same bytes
            if body:
                try:
                    data = orjson.loads(body)
                except orjson.JSONDecodeError:
                    data = None  # FastAPI reports malformed JSON itself
                else:
                    check_unique_keys(body, data)
            return await handler(request)

        return strict_handler
