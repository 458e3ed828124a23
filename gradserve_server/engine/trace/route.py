"""Which way an op list ran, and why: the ``Route`` a dispatch (``engine.trace.dispatch``) returns with its result.

An op list runs one of three ways, all giving what the eager interpreter (``engine.program``) gives, bit for bit:
replayed from a compiled plan (``engine.trace.plan``), composed from per-op fragments (``engine.trace.compose``), or
op by op (cold). A route is a name from ``ROUTES`` and a reason from ``REASONS`` (both fixed: they label metrics), and
a free-text ``detail`` (which op, at which index) for logs and debugging only. """

from __future__ import annotations

from dataclasses import dataclass

#: how a run went
ROUTES = {
    "replayed": "a compiled plan of the list's structure replayed (a repeat loop: its iterations replayed)",
    "recorded": "no plan yet: the list ran op by op while its plan was recorded (the next run replays it)",
    "composed": "no plan: the list ran from per-op fragments (a one-shot list of 100+ ops, not recorded now)",
    "cold": "the list ran op by op, the eager interpreter's way, nothing recorded",
    "fallback": "a replay (or composed run) raised: the list ran again op by op, which gives the result or the error",
}

#: why it went that way (``not_composable:<code>``: a composed run gave up, ``COMPOSE_CODES``)
REASONS = {
    "plan_hit": "a plan of this structure was cached",
    "loop": "a repeat/until loop whose iterations replayed their plans",
    "loop_aborted": "a repeat/until loop that could not replay its iterations (an iteration's plan, a limit)",
    "no_plan": "no plan of this structure was cached, and this run records one",
    "training_step": "no plan of this structure was cached, and this run records one at its first sighting: a "
                     "session list with a backward and an in-place update under no_grad (a training loop's "
                     "iteration, which the loop sends again)",
    "segments": "a training loop's list ran in segments (its prefix under no_grad, its grad-mode part, its "
                "trailing dels), each keyed on the session tensors it names and replayed, recorded or run on its "
                "own (the route: replayed when one segment replayed; the detail says which); fallback: a segment "
                "raised or the whole list would meet a limit, and the list ran whole, op by op",
    "segments_fused": "every segment of this training loop's list replayed in an earlier run: this run records the "
                      "whole list's plan (op by op, as a training step's first sighting does), which every later "
                      "run replays as one plan",
    "first_sighting": "a structure run fewer times than the one that records its plan (GRADSERVE_PLAN_RECORD_AFTER)",
    "cache_disabled": "plans are off (GRADSERVE_PLAN_CACHE_ENTRIES=0)",
    "request_options": "record, return (sessions), repeat or until with a list that cannot plan",
    "unplannable_op": "an op that no plan can replay (no kernels, or value-dependent control)",
    "unkeyable": "the list or the state could not be keyed (a session tensor with a graph or a gradient, a "
                 "tensor op's data form)",
    "untraced_array": "an array reached a kernel or the result without coming from an input or a kernel",
    "non_static_argument": "a kernel got an argument a plan cannot hold",
    "recording_raised": "a kernel raised while the plan was recorded",
    "inplace_outside_kernel": "an array was changed in place outside a kernel",
    "warning": "the run warned",
    "too_large": "the plan would exceed the cache's bytes",
    "session_state": "the run left a session state a replay could not rebuild (names, views, graphs)",
    "kernel_raised": "a kernel raised during a replay (a value-dependent check)",
    "short_list": "a one-shot list of fewer than 100 ops: not composed",
    "literal_escaped": "a float literal was taken where only a float can be while the plan was recorded (numpy "
                       "took it as an operand): the list ran cold, its floats keyed by value from then on",
    **{f"not_composable:{code}": text for code, text in {
        "op": "an op or an op form that cannot be composed",
        "form": "an argument or output form composing does not cover",
        "misses": "too few of the ops' forms repeat",
        "limits": "the run could come near a limit",
        "raised": "an op raised (the cold run gives the error)",
        "state": "the run's state is not a fresh one",
        "disabled": "no fragments are kept (GRADSERVE_PLAN_FRAGMENT_ENTRIES=0)",
    }.items()},
}

#: the ``not_composable`` codes
COMPOSE_CODES = tuple(r.partition(":")[2] for r in REASONS if r.startswith("not_composable:"))

@dataclass(frozen=True, slots=True)
class Route:
    """How a run went: ``name`` in ``ROUTES``, ``reason`` in ``REASONS``, ``detail`` free text."""

    name: str
    reason: str
    detail: str = ""

    def header(self) -> str:
        """``<name>; reason=<reason>[; detail="..."]``: the ``X-Gradserve-Route`` response header's value
        (the detail printable ASCII, quoted, at most 200 characters)."""
        value = f"{self.name}; reason={self.reason}"
        if self.detail:
            text = "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in self.detail)[:200]
            value += f'; detail="{text}"'
        return value


# the routes decided without a detail: made once (a replay attaches one of these, nothing else)
REPLAYED = Route("replayed", "plan_hit")
REPLAYED_LOOP = Route("replayed", "loop")
RECORDED = Route("recorded", "no_plan")
RECORDED_STEP = Route("recorded", "training_step")
COMPOSED = Route("composed", "first_sighting")
COLD_FIRST = Route("cold", "first_sighting")
COLD_DISABLED = Route("cold", "cache_disabled")
COLD_OPTIONS = Route("cold", "request_options")
COLD_UNPLANNABLE = Route("cold", "unplannable_op")
COLD_UNKEYABLE = Route("cold", "unkeyable")
COLD_SHORT = Route("cold", "short_list")
COLD_LOOP = Route("cold", "loop_aborted")
FALLBACK_SEGMENTS = Route("fallback", "segments")
RECORDED_FUSED = Route("recorded", "segments_fused")
