"""The autograd graph as plain data (engine.export_graph)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class GraphView(BaseModel):
    """Nodes with torch's names, AccumulateGrad nodes, next_functions edges (None edges included) and
    saved tensors (shape, dtype, freed)."""

    model_config = ConfigDict(extra="allow")

    nodes: list[dict[str, Any]]
