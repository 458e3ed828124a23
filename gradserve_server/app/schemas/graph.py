"""The autograd graph as plain data (engine.export_graph)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class GraphView(BaseModel):
    """Nodes with torch's names, AccumulateGrad nodes, next_functions edges (None edges included) and
    saved tensors (shape, dtype, freed). Each node's `tensor_info` describes the tensor it produced (or, for
    AccumulateGrad, its leaf): name, shape, dtype, `value` for tensors of at most 6 elements, `grad` (a
    leaf's `.grad` or a retained grad: shape, dtype, small value) and `grad_accumulations`. A graph without
    nodes has a `message` saying why."""

    model_config = ConfigDict(extra="allow")

    nodes: list[dict[str, Any]]
    message: str | None = Field(None, description="Only when there are no nodes: why (no tensors, none that "
                                "requires grad, or a root that does not).")
