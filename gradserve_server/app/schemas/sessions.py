"""Sessions: a named namespace of tensors that lives between requests."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class SessionCreated(BaseModel):
    id: str = Field(description="Unguessable session id (192 random bits).")
    created_at: datetime
    expires_at: datetime = Field(description="When the session expires unless used (every access renews it).")
    ttl_seconds: float


class TensorSummary(BaseModel):
    shape: list[int]
    dtype: str
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None
    has_grad: bool = Field(description="Whether `.grad` is set (leaves and retain_grad tensors).")
    version: int


class SessionInfo(BaseModel):
    id: str
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    tensor_count: int


class SessionSummary(BaseModel):
    id: str
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    tensors: dict[str, TensorSummary] = Field(description="Every named tensor.")
    node_count: int = Field(description="Autograd nodes alive in the session.")
    backward_passes: int = Field(description="Backward/grad passes run so far.")
    memory_bytes: int = Field(description="Bytes held by the session's tensors (data, grads, saved values).")


class SessionList(BaseModel):
    sessions: list[SessionInfo]
