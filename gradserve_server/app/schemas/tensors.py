"""Tensor payloads (JSON or base64) and tensor views."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema

DTYPES = ("float32", "float64", "int64", "bool")


class Base64Tensor(BaseModel):
    """A tensor's bytes: little-endian, C order, base64 with padding. The length is checked exactly."""

    dtype: Literal["float32", "float64", "int64", "bool"]
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


class TensorView(BaseModel):
    """A tensor as torch shows it: value, autograd flags, grad_fn name, version and gradient."""

    name: str = Field(description="The tensor's name in the session (`x`, or `x.grad` for a gradient).")
    shape: list[int]
    dtype: Literal["float32", "float64", "int64", "bool"]
    data: TensorData
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None = Field(description="torch's grad_fn class name (`MulBackward0`), null for leaves.")
    grad: TensorData | None = Field(
        description="The accumulated `.grad`: null until a backward reaches the tensor, after "
                    "`zero_grad(set_to_none=True)`, and for non-leaves that do not retain grad (where torch "
                    "returns None and warns).")
    retains_grad: bool
    version: int = Field(description="torch's `_version`: +1 per in-place change.")
    grad_accumulations: int = Field(description="Backward passes summed into `.grad` since it was last "
                                    "zeroed or set to None.")


class TensorMeta(BaseModel):
    """A TensorView without `data` and `grad`: what `"return": {"x": "meta"}` answers."""

    name: str
    shape: list[int]
    dtype: Literal["float32", "float64", "int64", "bool"]
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None
    retains_grad: bool
    version: int
    grad_accumulations: int


class TensorList(BaseModel):
    tensors: dict[str, TensorView]
