"""gradserve's engine: PyTorch autograd semantics on numpy.

Public surface: ``Tensor``, ``tensor()``, ``no_grad()``, ``backward()``, ``grad()``, ``run_program()``,
``dispatch()`` (a run through the plan cache, with the ``Route`` it took),
forward mode (``dual_level()``, ``make_dual()``, ``unpack_dual()``),
the op table (``OPS``), graph export and state serialisation, planned runs (``run_planned``).
The app imports this package only, never a submodule (tests/test_import_layers.py checks it).
"""

from __future__ import annotations

from . import ops  # noqa: F401  (registers ops, binds Tensor methods)
from .autograd import backward, grad
from .budget import Control
from .errors import CancelledError, DeadlineExceededError, EngineError, LimitExceededError
from .forward_ad import dual_level, enter_dual_level, exit_dual_level, make_dual, unpack_dual
from .grad_mode import Limits, WarningSink, enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .graph import export_graph as _export_graph
from .graph import node_lines, to_dot, to_mermaid
from .ops.creation import Owned
from .program import ProgramResult, State, op_catalog, run_program
from .registry import OPS, PRIMS
from .serialize import dump_parts, dumps, loads
from .tensor import Tensor, tensor
from .trace.cache import PlanCaches
from .trace.dispatch import dispatch
from .trace.plan import run_planned, run_session_planned
from .trace.route import REASONS, ROUTES, Route


def export_graph(state_or_tensors, root: str | None = None) -> dict:
    """The backward graph of ``root`` (a name or ``name.grad``), or of every named tensor."""
    tensors = state_or_tensors.tensors if isinstance(state_or_tensors, State) else state_or_tensors
    return _export_graph(tensors, root)


__all__ = ["Tensor", "tensor", "backward", "grad", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "EngineError", "Limits", "Control", "OPS", "PRIMS", "op_catalog", "State",
           "run_program", "ProgramResult", "Owned", "export_graph", "to_dot", "to_mermaid", "dumps", "dump_parts",
           "loads", "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "dispatch",
           "Route", "ROUTES", "REASONS",
           # what the app uses besides the above: error classes it maps, the warning sink of a request,
           # the plan caches and planned runs, the graph view's node text
           "CancelledError", "DeadlineExceededError", "LimitExceededError", "WarningSink", "PlanCaches",
           "run_planned", "run_session_planned", "node_lines"]
