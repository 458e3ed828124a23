"""Tensor payloads (JSON or base64) and tensor views."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

DTYPES = ("float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "float16", "bfloat16")
Dtype = Literal["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "float16", "bfloat16"]


class Base64Tensor(BaseModel):
    """A tensor's bytes: little-endian, C order, base64 with padding. The length is checked exactly."""

    dtype: Dtype
    shape: list[Annotated[int, Field(ge=0)]]
    encoding: Literal["base64"]
    data: str = Field(description="base64 of prod(shape) * itemsize bytes.")


_NUMBER_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number"},
        {"type": "boolean"},
        {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"],
         "description": "JSON has no NaN or infinities: they are written (and accepted) as these strings."},
    ]
}

TENSOR_DATA_SCHEMA: dict[str, Any] = {
    "description": "Tensor data. JSON form: a number, a boolean, or nested lists of them, with PyTorch's "
                   "`torch.tensor` dtype rules (`2.0` and `[1, 2.5]` are float32, `[1, 2]` int64, "
                   "`true` bool); "
                   "NaN and the infinities are the strings \"NaN\", \"Infinity\", \"-Infinity\". "
                   "Base64 form: a `Base64Tensor` object (requested with `?encoding=base64`).",
    "anyOf": [
        *_NUMBER_SCHEMA["anyOf"],
        {"type": "array", "items": {}},
        {"$ref": "#/components/schemas/Base64Tensor"},
    ],
}

TensorData = Annotated[Any, WithJsonSchema(TENSOR_DATA_SCHEMA)]
#: TensorData or null, as one flat union (a nested `anyOf` makes generated clients wrap unions in unions)
TensorDataOrNull = Annotated[Any, WithJsonSchema({**TENSOR_DATA_SCHEMA, "anyOf": [*TENSOR_DATA_SCHEMA["anyOf"],
                                                                                  {"type": "null"}]})]


def _no_default(schema: dict[str, Any]) -> None:
    """A field that is left out, not null, when absent: no `default: null` in its schema."""
    schema.pop("default", None)


class TensorView(BaseModel):
    """A tensor as torch shows it: value, autograd flags, grad_fn name, version and gradient. At the `meta`
    view level (`"return": {"x": "meta"}`, or `auto` for a large tensor) `data` and `grad` are left out."""

    name: str = Field(description="The tensor's name in the session (`x`, or `x.grad` for a gradient).")
    shape: list[int]
    dtype: Dtype
    data: TensorData = Field(None, description="The value; absent at the `meta` view level.",
                             json_schema_extra=_no_default)
    grad: TensorDataOrNull = Field(
        None, json_schema_extra=_no_default,
        description="The accumulated `.grad`: null until a backward reaches the tensor, after "
                    "`zero_grad(set_to_none=True)`, and for non-leaves that do not retain grad (where torch "
                    "returns None and warns); absent at the `meta` view level.")
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None = Field(description="torch's grad_fn class name (`MulBackward0`), null for leaves.")
    retains_grad: bool
    version: int = Field(description="torch's `_version`: +1 per in-place change.")
    grad_accumulations: int = Field(description="Backward passes summed into `.grad` since it was last "
                                    "zeroed or set to None.")


class TensorList(BaseModel):
    tensors: dict[str, TensorView]
