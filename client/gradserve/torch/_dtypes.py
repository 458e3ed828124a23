"""``torch.float32`` and friends (the dtypes gradserve's engine has), and ``torch.Size``.

The client holds values as numpy arrays: float16 as numpy's own, bfloat16 (which numpy lacks) as its bits in
uint16 (a float32's upper half), widened to float32 where a value is read (``item``, ``tolist``, ``repr``)."""

from __future__ import annotations

import numpy as np

#: per dtype the server has: its kind ("b" bool, "u" unsigned, "i" signed, "f" floating), its size in bytes and
#: torch's ScalarType name (``Got: Long``): the table the client's dtype rules read (``_promotion``); the engine's
#: ``dtypes`` holds the same facts (a test compares them), so a dtype the engine gains needs one line here
FACTS = {"bool": ("b", 1, "Bool"), "uint8": ("u", 1, "Byte"), "int8": ("i", 1, "Char"), "int16": ("i", 2, "Short"),
         "int32": ("i", 4, "Int"), "int64": ("i", 8, "Long"), "float32": ("f", 4, "Float"),
         "float64": ("f", 8, "Double"), "float16": ("f", 2, "Half"), "bfloat16": ("f", 2, "BFloat16")}
#: the server's default floating dtype (what an integer input of a float function gives there)
DEFAULT_FLOAT = "float32"
#: torch's default floating dtype in this process (``set_default_dtype``): where it is not the server's, the client
#: sends the dtype torch would take from it (``_meta.default_casts``)
_DEFAULT = [DEFAULT_FLOAT]


def default_float() -> str:
    return _DEFAULT[0]


class dtype:
    """A torch dtype: prints as ``torch.float32``; ``name`` is the wire name the HTTP API uses."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    @property
    def is_floating_point(self) -> bool:
        return FACTS[self.name][0] == "f"

    @property
    def itemsize(self) -> int:
        return FACTS[self.name][1]

    def __reduce__(self):
        return by_name, (self.name,)


float32 = dtype("float32")
float64 = dtype("float64")
int64 = dtype("int64")
int32 = dtype("int32")
int16 = dtype("int16")
int8 = dtype("int8")
uint8 = dtype("uint8")
bool = dtype("bool")  # noqa: A001 - torch.bool
float16 = dtype("float16")
bfloat16 = dtype("bfloat16")
DTYPES = {d.name: d for d in (float32, float64, int64, int32, int16, int8, uint8, bool, float16, bfloat16)}
FLOATING = frozenset(("float32", "float64", "float16", "bfloat16"))
#: the numpy dtype the client holds a dtype's values in (bfloat16: its bits)
NP_HELD = {name: np.dtype("uint16") if name == "bfloat16" else np.dtype(name) for name in DTYPES}


def refuse_numpy(name: str) -> None:
    """torch's refusal of ``numpy()`` for a dtype numpy lacks."""
    if name == "bfloat16":
        raise TypeError("Got unsupported ScalarType BFloat16")


def readable(a: np.ndarray, name: str) -> np.ndarray:
    """Values as Python reads them (``item``, ``tolist``): bfloat16's bits widened to float32 (exact)."""
    if name == "bfloat16" and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def by_name(name: str) -> dtype:
    return DTYPES[name]


class Size(tuple):
    """``torch.Size``: a tuple that prints as ``torch.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"

    __str__ = __repr__

    # (torch's Size stays a Size through concatenation, repetition and slicing, with a tuple on either side)
    def __add__(self, other):
        return Size(tuple(self) + tuple(other)) if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n):
        return Size(tuple(self) * n) if isinstance(n, int) else NotImplemented

    __rmul__ = __mul__

    def __getitem__(self, key):
        got = tuple.__getitem__(self, key)
        return Size(got) if isinstance(key, slice) else got

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n
