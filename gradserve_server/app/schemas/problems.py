"""RFC 9457 problem details, as every error response carries them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ValidationIssue(BaseModel):
    loc: list[str | int] = Field(description="Where in the request the problem is.")
    msg: str
    type: str


class Problem(BaseModel):
    """An error, as ``application/problem+json``."""

    type: str = Field(description="A URI naming the problem type: `urn:gradserve:problem:<code>`.")
    title: str = Field(description="A short summary of the problem type.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong; PyTorch's own message where PyTorch has one.")
    code: str = Field(description="A stable snake_case error code (see the error model: docs/reference/errors.md).")
    op_index: int | None = Field(None, description="For op errors: the index of the failing op in the list.")
    op: str | None = Field(None, description="For op errors: the failing op's name.")
    exception: str | None = Field(None, description="For op errors: the Python exception type PyTorch "
                                  "raises for the same program (RuntimeError, ValueError, TypeError, ...).")
    hint: str | None = Field(None, description="How to fix a problem whose cause torch's message cannot "
                             "name. For `requires_grad` on integer data: JSON integers (`2`, `[1, 2]`) make int64 "
                             "tensors, as `torch.tensor(2)` does, and browsers and JavaScript write `2.0` as `2`; "
                             "write floats or pass `\"dtype\": \"float32\"` in the op's kwargs.")
    errors: list[ValidationIssue] | None = Field(None, description="For validation errors: every issue.")
    warnings: list[str] | None = Field(None, description="PyTorch's warnings given while the request was handled, "
                                       "e.g. reading the `.grad` of a non-leaf tensor.")
    request_id: str | None = Field(None, description="The request's id, as in the `X-Request-ID` response "
                                   "header and the logs.")


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry documenting problem bodies for the given statuses."""
    descriptions = {
        404: "Unknown session or tensor name.",
        409: "The request conflicts with the session's state (graph freed, tensor modified in place, "
             "in-place op on a leaf that requires grad).",
        408: "The request body did not arrive in full within `GRADSERVE_BODY_READ_TIMEOUT_SECONDS`.",
        413: "Request body too large.",
        415: "The request body is not JSON (send `Content-Type: application/json`).",
        422: "Invalid input: malformed JSON, schema violation, an op PyTorch would reject, or a limit "
             "(`limit_exceeded`: elements per tensor, bytes per session counted as they are allocated, graph "
             "nodes, ops x repeat, response bytes; the detail names the setting and its value); nothing was "
             "applied.",
        401: "Missing or invalid API key (when the server has keys).",
        429: "Too many sessions, the key's (or without keys, the client address's) session quota or rate limit, "
             "or too many wrong keys from the address (see `Retry-After`).",
        503: "`store_unavailable`: the session store (Redis) is unreachable, full or read-only; or "
             "`server_busy`: every heavy slot is taken and the queue for them is full "
             "(`GRADSERVE_MAX_HEAVY_REQUESTS`, `GRADSERVE_MAX_HEAVY_QUEUE`); nothing was applied (see "
             "`Retry-After`).",
        504: "`deadline_exceeded`: the request computed longer than `GRADSERVE_REQUEST_DEADLINE_SECONDS`; "
             "nothing was applied.",
    }
    responses: dict[int | str, dict[str, Any]] = {
        s: {"model": Problem, "description": descriptions[s],
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
        for s in statuses}
    if 503 in responses:
        responses[503]["headers"] = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                                     "schema": {"type": "integer"}}}
    return responses
