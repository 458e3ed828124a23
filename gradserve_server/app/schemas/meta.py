"""The op catalog and health."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OpInfo(BaseModel):
    """One op of the engine's table (more fields may appear: the table is the source)."""

    model_config = ConfigDict(extra="allow")

    name: str
    grad_fns: list[str] = Field(description="torch grad_fn class names this op can produce.")
    differentiable: bool
    forward_ad: bool = Field(description="Every grad_fn of this op has a forward (JVP) formula: it works inside a "
                             "dual level (enter_dual_level / make_dual / unpack_dual).")
    grad_fns_without_forward_ad: list[str] = Field(
        default_factory=list, description="grad_fns of this op that have no forward formula (torch has none "
        "either): forward AD through them raises torch's NotImplementedError.")
    inplace: bool
    doc: str
    returns: list[str] = Field(default_factory=list, description="The field names of the named tuple the op "
                               "returns (torch.return_types: ['U', 'S', 'Vh'] for linalg.svd), bound in order to "
                               "an op's list of out names; empty for a single tensor or a data-dependent result.")


class OpCatalog(BaseModel):
    ops: list[OpInfo] = Field(description="The ops, in the table's order (those that match, on this page).")
    total: int = Field(description="How many ops match the filters (every op without filters), across pages.")


class Health(BaseModel):
    status: str = Field(examples=["ok"])


class HeavyStats(BaseModel):
    """Heavy requests (op lists run in the thread pool, autograd endpoints, SVG graphs)."""

    running: int = Field(description="Computing now.")
    queued: int = Field(description="Waiting for a slot.")
    slots: int = Field(description="GRADSERVE_MAX_HEAVY_REQUESTS.")
    queue: int = Field(description="GRADSERVE_MAX_HEAVY_QUEUE.")


class Readiness(BaseModel):
    status: str = Field(examples=["ready"])
    sessions: int
    max_sessions: int
    heavy: HeavyStats


class Progress(BaseModel):
    """How far a heavy request (an op list run in the thread pool) has got."""

    request_id: str
    state: Literal["running", "unknown"] = Field(description="`running` while the request runs; `unknown` before "
                                                 "it starts (queued, or a small request run inline), after it "
                                                 "finished, or for an id this server never saw.")
    done: int = Field(description="Ops run so far (a `repeat` loop counts each pass's ops).")
    total: int = Field(description="Ops the request runs in all (ops x repeat; 0 when unknown).")
    elapsed_seconds: float = Field(description="Time since the request started running.")
