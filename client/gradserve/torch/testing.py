"""``torch.testing.assert_close`` as torch 2.13 checks and words it: tensors (their values read from the server),
Python numbers, and sequences and mappings of them; the default tolerances by dtype, ``equal_nan``,
``check_dtype``, ``msg``; the mismatch report (mismatched elements, the greatest absolute and relative differences
and where) to the letter."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from gradserve.torch import _dtypes
from gradserve.torch._tensor import Tensor

#: torch's default (rtol, atol) per dtype
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7)}


class _Failed(AssertionError):
    pass


def assert_close(actual, expected, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False, msg=None) -> None:
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    try:
        _compare(actual, expected, rtol, atol, equal_nan, check_dtype, check_stride, ())
    except _Failed as failure:
        text, path = failure.args
        if msg is not None:
            text = msg(text) if callable(msg) else msg
        elif path:
            text += "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
        raise AssertionError(text) from None


def _compare(actual, expected, rtol, atol, equal_nan, check_dtype, check_stride, path) -> None:
    if isinstance(actual, Tensor) or isinstance(expected, Tensor):
        if not (isinstance(actual, Tensor) and isinstance(expected, Tensor)):
            raise TypeError(f"No comparison pair was able to handle inputs of type {_type(actual)} and "
                            f"{_type(expected)}.")
        return _tensors(actual, expected, rtol, atol, equal_nan, check_dtype, check_stride, path)
    if _number(actual) and _number(expected):
        return _numbers(actual, expected, rtol, atol, equal_nan, path)
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        if set(actual) != set(expected):
            missing = sorted(set(expected) - set(actual), key=repr)
            extra = sorted(set(actual) - set(expected), key=repr)
            raise _Failed(f"The keys of the mappings do not match:\nMissing keys in the actual mapping: {missing}\n"
                          f"Additional keys in the actual mapping: {extra}", path)
        for key in sorted(actual, key=repr):
            _compare(actual[key], expected[key], rtol, atol, equal_nan, check_dtype, check_stride, (*path, key))
        return None
    if _sequence(actual) and _sequence(expected):
        if len(actual) != len(expected):
            raise _Failed(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", path)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, rtol, atol, equal_nan, check_dtype, check_stride, (*path, i))
        return None
    raise TypeError(f"No comparison pair was able to handle inputs of type {_type(actual)} and {_type(expected)}.")


def _type(value) -> str:
    return "<class 'torch.Tensor'>" if isinstance(value, Tensor) else repr(type(value))


def _number(value) -> bool:
    return isinstance(value, (bool, int, float))


def _sequence(value) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _numbers(actual, expected, rtol, atol, equal_nan, path) -> None:
    if rtol is None:
        rtol, atol = (1e-7, 1e-7) if isinstance(actual, float) or isinstance(expected, float) else (0.0, 0.0)
    if actual == expected or (equal_nan and math.isnan(actual) and math.isnan(expected)):
        return
    diff = abs(actual - expected)
    if not math.isnan(diff) and diff <= atol + rtol * abs(expected):
        return
    rel = diff / abs(expected) if expected != 0 else (math.nan if diff == 0 else math.inf)
    close = not (rtol == 0 and atol == 0)
    text = (f"Scalars are not {'close' if close else 'equal'}!\n\nExpected {expected} but got {actual}.\n"
            f"Absolute difference: {diff}{f' (up to {atol} allowed)' if close else ''}\n"
            f"Relative difference: {rel}{f' (up to {rtol} allowed)' if close else ''}")
    raise _Failed(text, path)


def _values(t: Tensor) -> np.ndarray:
    a = np.asarray(t.detach()._data())
    return _dtypes.readable(a, t.dtype.name)


def _tensors(actual: Tensor, expected: Tensor, rtol, atol, equal_nan, check_dtype, check_stride, path) -> None:
    if actual.shape != expected.shape:
        raise _Failed(f"The values for attribute 'shape' do not match: {actual.shape} != {expected.shape}.", path)
    if check_dtype and actual.dtype != expected.dtype:
        raise _Failed(f"The values for attribute 'dtype' do not match: {actual.dtype} != {expected.dtype}.", path)
    if check_stride and actual.stride() != expected.stride():
        raise _Failed(f"The values for attribute 'stride()' do not match: {actual.stride()} != {expected.stride()}.",
                      path)
    da, de = actual.dtype.name, expected.dtype.name
    if rtol is None:
        ra, aa = _TOLERANCES.get(da, (0.0, 0.0))
        re_, ae = _TOLERANCES.get(de, (0.0, 0.0))
        rtol, atol = max(ra, re_), max(aa, ae)
    a, e = _values(actual), _values(expected)
    if da != de:  # (compared in their promoted dtype, as torch promotes them)
        common = np.promote_types(a.dtype, e.dtype)
        a, e = a.astype(common), e.astype(common)
    if a.dtype == np.bool_:
        a, e = a.astype(np.int64), e.astype(np.int64)
    floating = a.dtype.kind == "f"
    with np.errstate(invalid="ignore", over="ignore"):
        if floating:
            matches = np.abs(a - e) <= atol + rtol * np.abs(e)
            matches |= a == e  # (equal infinities)
            if equal_nan:
                matches |= np.isnan(a) & np.isnan(e)
        else:
            matches = np.abs(a.astype(np.float64) - e.astype(np.float64)) <= atol + rtol * np.abs(e.astype(np.float64))
    if matches.all():
        return
    close = not (rtol == 0 and atol == 0)
    if actual.dim() == 0:
        _numbers(a.item(), e.item(), rtol, atol, equal_nan, path) if floating else \
            _numbers(int(a.item()), int(e.item()), rtol, atol, equal_nan, path)
        return
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        abs_diff = np.abs(a - e)
        rel_diff = abs_diff / np.abs(e) if floating else \
            (abs_diff.astype(np.float32) / np.abs(e).astype(np.float32))
    abs_diff = np.where(matches, 0, abs_diff)
    rel_diff = np.where(matches, 0, rel_diff)
    n, total = int((~matches).sum()), matches.size
    lines = [f"Tensor-likes are not {'close' if close else 'equal'}!", "",
             f"Mismatched elements: {n} / {total} ({n / total:.1%})"]
    for label, diffs, allowed in (("absolute", abs_diff, atol), ("relative", rel_diff, rtol)):
        flat = diffs.reshape(-1)
        k = int(np.nanargmax(flat)) if not np.isnan(flat).all() else 0
        if np.isnan(flat).any():
            k = int(np.flatnonzero(np.isnan(flat))[0])
        where = tuple(int(i) for i in np.unravel_index(k, diffs.shape))
        value = flat[k].item()
        lines.append(f"Greatest {label} difference: {value} at index {where}"
                     + (f" (up to {allowed} allowed)" if close else ""))
    raise _Failed("\n".join(lines), path)
