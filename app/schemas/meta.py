"""The op catalog and health."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class OpInfo(BaseModel):
    """One op of the engine's table (more fields may appear: the table is the source)."""

    model_config = ConfigDict(extra="allow")

    name: str
    grad_fns: list[str] = Field(description="torch grad_fn class names this op can produce.")
    differentiable: bool
    inplace: bool
    doc: str


class OpCatalog(BaseModel):
    ops: list[OpInfo]


class Health(BaseModel):
    status: str = Field(examples=["ok"])


class Readiness(BaseModel):
    status: str = Field(examples=["ready"])
    sessions: int
    max_sessions: int
