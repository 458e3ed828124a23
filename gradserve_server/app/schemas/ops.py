"""Op lists (requests) and what running them reports (responses).

Op-list requests are TypedDicts validated by a TypeAdapter on orjson-parsed bodies: a 10,000-op list
validates in about twice the time orjson takes to parse it, where pydantic models take four to six times.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, with_config
from typing_extensions import TypedDict

from gradserve_server.app.schemas.tensors import TensorData, TensorDataOrNull, TensorView

Name = Annotated[str, Field(min_length=1, max_length=200)]
#: Names a request binds: identifiers, so that `x.grad` and `-Infinity` are never names; 64 characters at
#: most, the engine's limit
OutName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]


@with_config(ConfigDict(extra="forbid"))
class Op(TypedDict):
    """One call, written the way torch spells it: `{"op": "mul", "args": ["w", "x"], "out": "wx"}`."""

    op: Annotated[str, Field(description="torch's function name (`tensor`, `mul`, `sum`, `sub_`, `backward`, "
                                         "`manual_seed`, ...); `GET /v1/ops` lists them. Random ops draw torch's "
                                         "numbers from the session's generator (`generator` in kwargs names "
                                         "another one, made by the `Generator` op).")]
    args: NotRequired[Annotated[list[Any], Field(
        description="Positional arguments. A string is a tensor name (or `name.grad`), except \"NaN\", "
                    "\"Infinity\" and \"-Infinity\" which are numbers; numbers are scalars; data positions "
                    "take nested lists or a Base64Tensor object.")]]
    kwargs: NotRequired[Annotated[dict[str, Any], Field(description="Keyword arguments, torch's names.")]]
    out: NotRequired[Annotated[OutName | list[OutName] | None, Field(
        description="Name(s) to bind the result(s) to: identifiers (letters, digits, `_`), not `NaN` or "
                    "`Infinity`.")]]
    no_grad: NotRequired[Annotated[bool, Field(description="Run this op under `torch.no_grad()`.")]]


#: How much of a returned tensor a response shows: `full` (the TensorView), `meta` (everything but `data`
#: and `grad`), `auto` (`full` for tensors of at most 64 elements, gradient included, else `meta`)
ViewLevel = Literal["full", "meta", "auto"]

# `return` is a Python keyword, hence the functional TypedDict form
OpsRequest = TypedDict("OpsRequest", {
    "ops": Annotated[list[Op], Field(description="The ops, in order.")],
    "no_grad": NotRequired[Annotated[bool, Field(description="Run the whole list under `torch.no_grad()`.")]],
    "repeat": NotRequired[Annotated[int, Field(ge=1, description="Run the list this many times (a training "
                                               "loop); `GRADSERVE_MAX_REPEAT` bounds it.")]],
    "record": NotRequired[Annotated[list[Name], Field(description="Tensor names whose value is recorded after "
                                                      "each repetition (returned in `records`).")]],
    "until": NotRequired[Annotated[OutName, Field(
        description="A loop that stops: the name of a bool tensor with one element, read after each repetition; "
                    "the loop ends once it is true (`repeat` is then the most repetitions; the response's "
                    "`iterations` says how many ran). An error if the name is unbound or not a bool scalar, and "
                    "as ever nothing is applied then.")]],
    "return": NotRequired[Annotated[list[Name] | dict[Name, ViewLevel], Field(
        description="Pay only for what you read: the response's `tensors` holds exactly these names (or "
                    "`name.grad`; null for a name not bound and an unset gradient) instead of every tensor the "
                    "list created or changed, and `autograd` is left empty. A list asks for full views; an "
                    "object maps each name to a view level: `full`, `meta` (no `data`, no `grad`) or `auto` "
                    "(`full` up to 64 elements, else `meta`). Reading `x.grad` here never gives torch's "
                    "non-leaf warning (a `bind` op does).")]],
})
OpsRequest.__doc__ = "An op list, run atomically: either every op takes effect or none does."
OpsRequest.__pydantic_config__ = ConfigDict(extra="forbid")


# `return` is a Python keyword, hence the functional TypedDict form
EvalRequest = TypedDict("EvalRequest", {
    "ops": Annotated[list[Op], Field(description="The ops, in order.")],
    "no_grad": NotRequired[Annotated[StrictBool, Field(
        description="Run the whole list under `torch.no_grad()`.")]],
    "return": NotRequired[Annotated[list[Name], Field(
        description="Names (or `name.grad`) to return; every named tensor when omitted. Only these carry "
                    "data in the response (pay only for what you read).")]],
})
EvalRequest.__doc__ = "A one-shot op list in a fresh, throw-away session."
EvalRequest.__pydantic_config__ = ConfigDict(extra="forbid")

OpsRequestAdapter = TypeAdapter(OpsRequest)
EvalRequestAdapter = TypeAdapter(EvalRequest)


class OpResult(BaseModel):
    index: int = Field(description="Position of the op in the list.")
    op: str
    bound: list[str] = Field(description="Names the op bound (its `out`, or in-place targets).")


class GradEntry(BaseModel):
    name: str = Field(description="The tensor whose gradient this pass reached.")
    contribution: TensorData = Field(description="This pass's gradient for the tensor.")
    grad: TensorDataOrNull = Field(description="The accumulated `.grad` after the pass (null for `grad`, "
                                    "which never writes `.grad`, and for tensors that do not keep one).")
    grad_accumulations: int = Field(description="Backward passes summed into `.grad` so far.")


class AutogradRecord(BaseModel):
    op_index: int
    op: str = Field(description="`backward` or `grad`.")
    entries: list[GradEntry]


class OpsResponse(BaseModel):
    """Values first: the tensors (and `records`, `iterations`), then the autograd report, torch's warnings,
    and last which names each op bound."""

    tensors: dict[str, TensorView | None] = Field(
        description="Every tensor the request created or changed; with `return`, exactly the names asked for, "
                    "at the level asked for (`meta`: a view without `data` and `grad`; null for a name not "
                    "bound and an unset `x.grad`).")
    records: dict[str, list[TensorData]] | None = Field(
        None, description="With `record`: each named tensor's value after each repetition.")
    iterations: int | None = Field(None, description="With `until`: how many repetitions ran.")
    autograd: list[AutogradRecord] = Field(description="For each backward/grad op: what it reached (empty "
                                           "with `return`).")
    warnings: list[str] = Field(description="PyTorch's warning texts, in order (e.g. the non-leaf `.grad` "
                                "access warning).")
    ops: list[OpResult]


class EvalGradEntry(BaseModel):
    name: str = Field(description="The tensor whose gradient this pass reached.")
    contribution: str | None = Field(description="Where this pass's gradient is, by name, instead of its "
                                     "data: `x.grad` for a backward pass, the `out` name for a `grad` op, when "
                                     "that name holds exactly this pass's gradient at the end of the run; null "
                                     "when no name does (a later pass added to `x.grad`, `zero_grad` cleared "
                                     "it, or the `grad` op had no `out`). Put the name in `return` to read it.")
    grad_accumulations: int = Field(description="Backward passes summed into `.grad` so far.")


class EvalAutogradRecord(BaseModel):
    op_index: int
    op: str = Field(description="`backward` or `grad`.")
    entries: list[EvalGradEntry]


class EvalResponse(BaseModel):
    """Each value once: tensor data and gradients only in `tensors`, for the names `return` asks for; the
    autograd report refers to them by name."""

    tensors: dict[str, TensorView | None] = Field(description="The requested tensors (`return`), by name, or "
                                                  "every named tensor without `return`; `x.grad` is null while "
                                                  "x has no gradient. A tensor's view carries its `.grad` too.")
    autograd: list[EvalAutogradRecord] = Field(description="For each backward/grad op: the tensors it reached "
                                               "and the name holding each gradient (no data: read it "
                                               "through `return`).")
    warnings: list[str]


class BackwardRequest(BaseModel):
    """`tensor.backward(gradient=None, retain_graph=None, create_graph=False, inputs=None)`."""

    model_config = ConfigDict(extra="forbid")

    tensor: Name = Field(description="The root: a tensor name.")
    gradient: Name | None = Field(None, description="Required for non-scalar roots: the name of a tensor of the "
                                  "root's shape (torch's `gradient` argument is a tensor: create it with a "
                                  "`tensor` op first).")
    retain_graph: bool | None = None
    create_graph: bool = False
    inputs: list[Name] | None = Field(None, description="Accumulate only into these tensors.")


class GradRequest(BaseModel):
    """`torch.autograd.grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
    allow_unused=None, is_grads_batched=False, materialize_grads=False)`; results are bound to `out`."""

    model_config = ConfigDict(extra="forbid")

    outputs: Name | list[Name]
    inputs: Name | list[Name]
    grad_outputs: list[Name | None] | Name | None = Field(None, description="Tensor names, one per output "
                                                          "(required for non-scalar outputs).")
    retain_graph: bool | None = None
    create_graph: bool = False
    allow_unused: bool | None = None
    is_grads_batched: bool = Field(False, description="The first dimension of every grad_output is a batch: "
                                   "one gradient per batch entry, stacked.")
    materialize_grads: bool = False
    out: OutName | list[OutName] | None = Field(None, description="Names for the gradients, one per input.")


class ZeroGradRequest(BaseModel):
    """`optimizer.zero_grad(set_to_none=True)` over the named tensors (all leaves when omitted)."""

    model_config = ConfigDict(extra="forbid")

    tensors: list[Name] | None = None
    set_to_none: bool = True
