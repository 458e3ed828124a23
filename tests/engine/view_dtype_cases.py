"""``Tensor.view(dtype)`` cases, run verbatim by torch 2.13, the engine (``torch_compat``) and the client: every pair
of the engine's dtypes over source layouts that meet each of torch's layout rules (strides, sizes, storage offsets,
0-d, empty, expanded); autograd facts of the result; writes through the result seen by its source. Each case is
torch code binding ``r`` with ``S`` (the source dtype) and ``T`` (the target) bound; ``encode`` records the outcome.
torch's outcomes are in ``tests/fixtures/view_dtype.json`` (re-record: ``python -m tests.engine.test_view_dtype_torch
--record``, needs torch)."""

from __future__ import annotations

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
FLOATS = ("float16", "bfloat16", "float32", "float64")

_FLOAT_DATA = [1.5, -2.0, 0.25, 3.0, -0.5, 7.0, 100.0, -1.0, 0.0, 2.5, -8.0, 0.125, 65.0, -3.75, 12.0, 1.0]
_INT_DATA = [1, -2, 3, 127, 0, -5, 100, 64, -7, 8, 9, -10, 33, 12, -128, 120]


def source(dtype: str) -> str:
    """Code binding ``b``: a (2, 8) tensor of ``dtype`` (S) with varied bits."""
    if dtype in FLOATS:
        data = _FLOAT_DATA
    elif dtype == "bool":
        data = [v % 3 == 0 for v in _INT_DATA]
    elif dtype == "uint8":
        data = [v & 0xFF for v in _INT_DATA]
    else:
        data = _INT_DATA
    return f"b = torch.tensor({[data[:8], data[8:]]}, dtype=S)\n"


#: source layouts: code binding ``s`` from ``b``
LAYOUTS = {
    "contiguous": "s = b",
    "transposed": "s = b.t()",
    "offset_1": "s = b[:, 1:5]",
    "offset_2": "s = b[:, 2:6]",
    "offset_4": "s = b[:, 4:8]",
    "step_2": "s = b[:, ::2]",
    "row_1": "s = b[1]",
    "scalar": "s = b[0, 1]",
    "last_size_3": "s = b[:, :3]",
    "odd_row_stride": "s = b.reshape(16)[:15].reshape(3, 5)[:, :4]",
    "expanded": "s = b[:, :1].expand(2, 4)",
    "unsqueezed": "s = b[0].unsqueeze(-1)",
    "empty_slice": "s = b[:, :0]",
    "empty_fresh": "s = torch.zeros(2, 0, dtype=S)",
}

#: autograd facts, for a floating source that requires grad (a leaf, and a result of an op)
AUTOGRAD = {
    "leaf": "x = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=S, requires_grad=True)\nr = x.view(T)",
    "non_leaf": "x = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=S, requires_grad=True)\ny = x * 2\nr = y.view(T)",
    "no_grad": ("x = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=S, requires_grad=True)\nwith torch.no_grad():\n"
                "    r = x.view(T)"),
}

#: a write through the result, read through the source (and the versions both see). (Into a bool view: a value;
#: torch's copy of a bool makes its bytes 0 or 1 where numpy's keeps them: docs/explanation/deviations.md)
WRITE_THROUGH = "v = b.view(T)\nv[0] = v[1] if T != torch.bool else True\nr = b"


def case_code(kind: str, name: str, src: str) -> str:
    if kind == "layout":
        return source(src) + LAYOUTS[name] + "\nr = s.view(T)"
    if kind == "autograd":
        return AUTOGRAD[name]
    return source(src) + WRITE_THROUGH


def cases():
    """(key, kind, name, source dtype, target dtype) of every case."""
    for src in DTYPES:
        for dst in DTYPES:
            for name in LAYOUTS:
                yield f"layout:{name}[{src}->{dst}]", "layout", name, src, dst
            yield f"write_through[{src}->{dst}]", "write", "write_through", src, dst
            if src in FLOATS:
                for name in AUTOGRAD:
                    yield f"autograd:{name}[{src}->{dst}]", "autograd", name, src, dst
