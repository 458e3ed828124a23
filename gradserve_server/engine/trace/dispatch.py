"""The one way into a run of an op list: ``dispatch`` picks the route (replay a plan, record one, compose
from fragments, run op by op) and returns the result with the ``Route`` it took (``engine.trace.route``).

Which route applies is decided where the facts are (``plan.run_planned`` for a one-shot run,
``plan.route_session`` for a session's, ``compose.run`` for a list without a plan); this is the function the
app calls for both. Whatever the route, the result, the state left and an error (its message, its op index)
are the eager interpreter's (``program.run_program``) bit for bit; an error raised carries the route taken as
``.route``.
"""

from __future__ import annotations

from ..program import ProgramResult, State
from .cache import PlanCache
from .plan import route_session, run_planned
from .route import Route


def dispatch(cache: PlanCache | None, state: State, ops: list, *, session: bool = False, extra: tuple = (),
             **kwargs) -> tuple[ProgramResult, Route]:
    """``run_program(state, ops, **kwargs)`` through ``cache`` (None: plans off), and the route it took.
    ``session``: ``state`` is a session's (kept after the run), else a one-shot run's (fresh, thrown away)."""
    if session:
        return route_session(cache, state, ops, extra=extra, **kwargs)
    res = run_planned(cache, state, ops, extra=extra, **kwargs)  # (``route_oneshot``'s body, one call less)
    return res, res.route
