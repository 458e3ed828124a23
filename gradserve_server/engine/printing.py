"""``repr(tensor)`` as torch prints it (a port of torch/_tensor_str.py's formatter for gradserve's dtypes).

This file is also the client's ``gradserve/torch/_printing.py``: a symbolic link to it, as the client's
``gradserve/_version.py`` is to the server's (the client never imports the engine, the engine never imports the
client; the client's sdist and wheel hold it as a real file). Standard library and numpy only."""

from __future__ import annotations

import math

import numpy as np

PRECISION = 4
LINEWIDTH = 80
THRESHOLD = 1000
EDGEITEMS = 3
_FLOATING = frozenset(("float32", "float64", "float16", "bfloat16"))


def widened(a: np.ndarray, dtype: str) -> np.ndarray:
    """float16/bfloat16 values as float32, which holds them exactly (torch formats them as float32). The client
    carries bfloat16 as its uint16 bits (the upper half of a float32's), the engine as ml_dtypes' bfloat16."""
    if dtype == "bfloat16" and a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float16" or dtype == "bfloat16":
        return a.astype(np.float32)
    return a


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(_int_str(v)))
            return
        f = flat.astype(np.float64)
        nz = f[np.isfinite(f) & (f != 0)]
        if nz.size == 0:
            return
        a = np.abs(nz)
        lo, hi = float(a.min()), float(a.max())
        self.int_mode = bool(np.all(nz == np.ceil(nz)))
        if self.int_mode:
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.sci_mode = True
                self.max_width = max(len(f"{v:.{PRECISION}e}") for v in nz.tolist())
            else:
                self.max_width = max(len(f"{v:.0f}") + 1 for v in nz.tolist())
        elif hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
            self.sci_mode = True
            self.max_width = max(len(f"{v:.{PRECISION}e}") for v in nz.tolist())
        else:
            self.max_width = max(len(f"{v:.{PRECISION}f}") for v in nz.tolist())

    def format(self, v) -> str:
        if self.floating:
            v = float(v)
            if self.sci_mode:
                s = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                s = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    s += "."
            else:
                s = f"{v:.{PRECISION}f}"
        else:
            s = _int_str(v)
        return " " * (self.max_width - len(s)) + s


def _int_str(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def _summarized(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]])
    return np.stack([_summarized(x) for x in a]) if a.ndim > 1 else a


def _str(a: np.ndarray, indent: int, fmt: _Formatter, summarize: bool) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        elem_len = fmt.max_width + 2
        per_line = max(1, int(math.floor((LINEWIDTH - indent) / elem_len)))
        items = a.tolist()
        if summarize and len(items) > 2 * EDGEITEMS:
            data = [fmt.format(v) for v in items[:EDGEITEMS]] + [" ..."] + [fmt.format(v) for v in items[-EDGEITEMS:]]
        else:
            data = [fmt.format(v) for v in items]
        lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
        return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"
    n = a.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        slices = [_str(a[i], indent + 1, fmt, summarize) for i in range(EDGEITEMS)] + ["..."] + \
                 [_str(a[i], indent + 1, fmt, summarize) for i in range(n - EDGEITEMS, n)]
    else:
        slices = [_str(a[i], indent + 1, fmt, summarize) for i in range(n)]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def tensor_repr(t, tangent=None) -> str:
    """An engine Tensor's repr; ``tangent``: its tangent (a Tensor) inside a dual level."""
    tan = None
    if tangent is not None:
        tan = tangent_str(tangent.data, tangent.dtype, tangent.grad_fn.name if tangent.grad_fn is not None else None,
                          tangent.requires_grad)
    return format_tensor(t.data, t.dtype, t.grad_fn.name if t.grad_fn is not None else None, t.requires_grad, tan)


def tangent_str(a: np.ndarray, dtype: str, grad_fn: str | None, requires_grad: bool,
                default_dtype: str = "float32") -> str:
    """A tangent as torch's ``f"tangent={tangent}"`` shows it: its repr, a 0-d one as its item (Tensor.__format__)."""
    if a.ndim == 0:
        return str(widened(a, dtype).item())
    return format_tensor(a, dtype, grad_fn, requires_grad, default_dtype=default_dtype)


def format_tensor(a: np.ndarray, dtype: str, grad_fn: str | None, requires_grad: bool,
                  tangent: str | None = None, default_dtype: str = "float32") -> str:
    """torch's ``repr`` of a tensor holding ``a``, with its ``grad_fn`` name and ``requires_grad``; ``tangent``
    (from ``tangent_str``) for a dual tensor, as the last suffix; ``default_dtype``: the dtype a repr does not name
    (``torch.get_default_dtype()``, which the client's ``set_default_dtype`` changes; the server's is float32)."""
    a = widened(a, dtype)
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    summarize = a.size > THRESHOLD
    if a.size == 0 and a.ndim == 1:
        body = "[]"
    elif a.size == 0:
        body = "[]"
        suffixes.append(f"size=({', '.join(map(str, a.shape))}{',' if a.ndim == 1 else ''})")
    else:
        fmt = _Formatter(_summarized(a) if summarize else a, dtype in _FLOATING)
        body = _str(a, indent, fmt, summarize)
    if dtype != default_dtype and (a.size == 0 or dtype not in ("int64", "bool")):  # (no element tells an empty one's)
        suffixes.append(f"dtype=torch.{dtype}")
    if grad_fn is not None:
        suffixes.append(f"grad_fn=<{grad_fn}>")
    elif requires_grad:
        suffixes.append("requires_grad=True")
    if tangent is not None:
        suffixes.append(f"tangent={tangent}")
    return _add_suffixes(prefix + body, suffixes, indent)


def _add_suffixes(text: str, suffixes: list, indent: int) -> str:
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last += len(suffix) + 2
    parts.append(")")
    return "".join(parts)
