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
    returns_when: str = Field(default="", description="The argument whose presence makes the result the `returns` "
                              "named tuple (`dim` for max: `max(x)` is a tensor, `max(x, 0)` values and indices); "
                              "empty: always.")
    functions: list[str] = Field(default_factory=list, description="The op's names (its name and aliases) torch "
                                 "binds as `torch.<name>` (`add_` is not one; `abs_` is).")
    methods: list[str] = Field(default_factory=list, description="The op's names torch binds as `Tensor.<name>` "
                               "(`gelu` is not one: `torch.nn.functional.gelu` only).")
    exports: list[str] = Field(default_factory=list, description="Public names beyond `functions` and `methods` "
                               "(`torch.nn.functional.relu`, `torch.special.expit`).")
    tuple_when: list[str] = Field(default_factory=list, description="Arguments that make the result a tuple of "
                                  "tensors when true (max_pool2d's `return_indices`); `!name`: when `name` is not "
                                  "given (`torch.where(condition)`).")
    variable_outputs: bool = Field(default=False, description="The number of outputs depends on the arguments or "
                                   "the data (split, chunk, unbind): the response's `bound` lists the names given.")
    meta_only: list[str] = Field(default_factory=list, description="Tensor arguments read for their metadata "
                                 "only (view_as's `other`, a shape): no edge to them, and a result does not require "
                                 "grad for them.")
    python_result: str = Field(default="", description="torch returns a Python value of this type (`bool` for "
                               "allclose); the op binds a 0-d tensor.")
    changes_argument: list[list[str]] = Field(default_factory=list, description="[[changed, given], ...]: the op "
                                              "changes argument `changed` in place when argument `given` is given, "
                                              "neither null nor false (embedding's max_norm, batch_norm's "
                                              "training).")
    storage: str = Field(default="", description="The result's memory: `view` (of the first argument), "
                         "`view_if_contiguous` (reshape), `new`; empty: as its family's.")
    converts_to: str = Field(default="", description="The dtype a conversion (`long`, `float`...) converts to.")
    dims_of: str = Field(default="input", description="What dimension arguments index: `input` (the first "
                         "argument), `output` (unsqueeze) or `other`.")
    promotion: str = Field(default="", description="The result's dtype: a rule, `result_type` (torch.result_type "
                           "of the operands), `broadcast_type` (the same, of the operands once broadcast: "
                           "`mse_loss`), `float` (integers give the default float), `true_divide` (float "
                           "unless a rounding mode), `long` (integers give int64), `same` (the first operand's), "
                           "`bool` or `int64`; optionally the operands it reads (`result_type(self,other)`) and, "
                           "after ` | `, torch's refusals as `condition: ExceptionClass: message` (conditions "
                           "`bool`, `integral`, `any_bool`, `all_bool`, `bool_tensors`, `bool_number`; `{dtype}` "
                           "stands for the ScalarType name). Empty: not declared. The op's in-place form cannot "
                           "hold a result of a higher category than its target (torch's `result type Float can't "
                           "be cast...`).")
    checks: list[str] = Field(default_factory=list, description="torch's refusals decided from the arguments' "
                              "metadata (dtypes, shapes, which arguments are given), tried in order: "
                              "`rule(arguments)[=value][ if|unless names] | ExceptionClass: message`, `{...}` standing "
                              "for what the rule fills in (the rules: `gradserve.torch._checks`).")
    shape: str = Field(default="", description="The result's shape by a rule (`conv(input,weight,stride,padding,"
                       "dilation)=2`, `cat(tensors,dim)`; the rules: `gradserve_server/engine/rules.py`), where the "
                       "op's family does not say it; empty: the family's (elementwise broadcasting, reductions) or "
                       "not known before the op runs.")
    parser: dict | None = Field(default=None, description="How torch's argument parser takes a call: per form "
                                "(`function`, `method`) the name its messages use and torch's overloads (texts "
                                "as torch prints them) or the one signature derived from the op's; `program_form`, "
                                "`hidden`, `numbers`, `python_attribute`, `no_argument_overloads`. A client "
                                "checks a call against it before sending it. Null: not parsed (indexing...).")
    cost: str = Field(default="inputs", description="What the op's cost follows: `inputs` (their sizes), "
                      "`arguments` (sizes given as arguments: creation, expand), `calls` (transforms), `other`.")


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
