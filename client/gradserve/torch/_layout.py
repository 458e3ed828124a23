"""Strides as torch lays tensors out, known to the client without asking: ``.stride()``, ``.is_contiguous()``,
``.storage_offset()`` and the view error (``view size is not compatible with input tensor's size and stride``)
at the torch line.

A handle's layout is ``(strides, offset)`` in elements, or None when the client cannot tell. New tensors are
contiguous; a view takes its base's layout through the view's geometry (``VIEWS``, by op name); an elementwise
op lays its result out as torch's TensorIterator does (dimensions sorted by the inputs' strides); a copy that
preserves the layout (clone, a dtype conversion) keeps dense strides; other ops give a contiguous result of
contiguous inputs, and an unknown layout otherwise (``stride()`` then says the client cannot tell).
"""

from __future__ import annotations

UNKNOWN = None
#: torch's message for a view its input's strides do not allow
VIEW_ERROR = ("view size is not compatible with input tensor's size and stride (at least one dimension spans across "
              "two contiguous subspaces). Use .reshape(...) instead.")


#: a layout known to be row-major before its shape is (the result of an op of a contiguous family, shape unknown)
ROW_MAJOR = "row-major"


def of(t) -> tuple | None:
    """Handle ``t``'s (strides, offset), or None when not known."""
    layout = t._layout
    if layout is ROW_MAJOR:
        return None if t._shape is None else (contiguous(tuple(t._shape)), 0)
    return layout


def contiguous(shape: tuple) -> tuple:
    """Row-major strides of ``shape`` (a dimension of size 0 counts as 1, as torch's)."""
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def is_contiguous(shape: tuple, strides: tuple) -> bool:
    """torch's ``is_contiguous()``: sizes of 1 are skipped, an empty tensor is contiguous."""
    if 0 in shape:
        return True
    step = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if st != step:
                return False
            step *= n
    return True


def dense(shape: tuple, strides: tuple) -> bool:
    """Non-overlapping and dense: some order of the dimensions is row-major (sizes below 2 skipped); an empty
    tensor is."""
    if 0 in shape:
        return True
    if len(shape) == 1:
        return shape[0] < 2 or strides[0] == 1
    step = 1
    for d in sorted((d for d in range(len(shape)) if shape[d] >= 2), key=lambda d: strides[d]):
        if strides[d] != step:
            return False
        step *= shape[d]
    return True


def view(shape: tuple, strides: tuple, size: tuple) -> tuple | None:
    """The strides of a view of ``shape``/``strides`` as ``size`` (same number of elements), or None when
    the layout does not allow one: the result's dimensions are matched, from the last, against runs of the
    input's dimensions that are contiguous with each other."""
    if not shape:
        return (1,) * len(size)
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        return tuple(strides) if tuple(size) == tuple(shape) else contiguous(size)
    out = [0] * len(size)
    v = len(size) - 1
    base = strides[-1]
    run = grown = 1
    for d in range(len(shape) - 1, -1, -1):
        run *= shape[d]
        if d == 0 or shape[d - 1] != 1 and strides[d - 1] != run * base:  # the end of a contiguous run
            while v >= 0 and (grown < run or size[v] == 1):
                out[v] = grown * base
                grown *= size[v]
                v -= 1
            if grown != run:
                return None
            if d > 0:
                base, run, grown = strides[d - 1], 1, 1
    return tuple(out) if v == -1 else None


def elementwise(shape: tuple, inputs: list) -> tuple:
    """The strides of an elementwise result of broadcast ``shape`` from ``inputs`` ((shape, strides) each, in
    argument order), as TensorIterator allocates it: inputs of one shape all contiguous, or all dense with the
    same strides, give those; otherwise the dimensions are ordered by the inputs' strides (a broadcast one
    does not decide; the first input that tells decides; equal strides: the smaller size first) and the result
    is dense in that order."""
    n = len(shape)
    if all(s == shape for s, _ in inputs):
        if all(is_contiguous(s, st) for s, st in inputs):
            return contiguous(shape)
        first = inputs[0][1]
        if all(st == first for _, st in inputs) and dense(shape, first):
            return tuple(first)
    if n <= 1:
        return contiguous(shape)
    expanded = []
    for s, st in inputs:  # each input's strides in the broadcast shape (0 where it is broadcast)
        lead = n - len(s)
        expanded.append([0] * lead + [0 if s[i] == 1 and shape[lead + i] != 1 else st[i] for i in range(len(s))])

    def order(a: int, b: int) -> int:  # 1: b goes before a (faster), -1: a before b, 0: no input tells
        for st in expanded:
            x, y = st[a], st[b]
            if x == 0 or y == 0:
                continue
            if x != y:
                return -1 if x < y else 1
            if shape[a] > shape[b]:
                return 1
        return 0

    perm = list(range(n - 1, -1, -1))  # fastest first
    for i in range(1, n):
        b = i
        for a in range(i - 1, -1, -1):
            c = order(perm[a], perm[b])
            if c > 0:
                perm[a], perm[b] = perm[b], perm[a]
                b = a
            elif c < 0:
                break
    if perm == list(range(n - 1, -1, -1)):
        return contiguous(shape)
    out, step = [0] * n, 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return tuple(out)


def preserved(shape: tuple, strides: tuple) -> tuple:
    """The strides of a copy that preserves the layout (clone, a dtype conversion): a dense input's own, else
    dense in the order of its strides."""
    return tuple(strides) if dense(shape, strides) else elementwise(tuple(shape), [(tuple(shape), tuple(strides))])


# ----- views: (input shape, input layout, the call's argument ``arg(name)`` with its declared default, the result's
# shape where the caller knows it) -> (result shape, result layout); None where the call is not understood -------------
def _wrap(d, n: int) -> int | None:
    n = max(n, 1)
    return d % n if isinstance(d, int) and not isinstance(d, bool) and -n <= d < n else None


def _ints(v) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in v)


def _transpose(shape, layout, arg, out):
    if len(shape) < 2:
        return shape, layout
    a, b = _wrap(arg("dim0"), len(shape)), _wrap(arg("dim1"), len(shape))
    if a is None or b is None:
        return None
    return _reorder(shape, layout, [b if d == a else a if d == b else d for d in range(len(shape))])


def _reorder(shape, layout, order):
    return tuple(shape[d] for d in order), (tuple(layout[0][d] for d in order), layout[1])


def _t(shape, layout, arg, out):
    return _reorder(shape, layout, [1, 0]) if len(shape) == 2 else (shape, layout)


def _permute(shape, layout, arg, out):
    dims = arg("dims")
    dims = [_wrap(d, len(shape)) for d in dims] if _ints(dims) else None
    if dims is None or None in dims or len(dims) != len(shape) or len(set(dims)) != len(dims):
        return None
    return _reorder(shape, layout, dims)


def _movedim(shape, layout, arg, out):
    source, destination = arg("source"), arg("destination")
    src = [source] if isinstance(source, int) else source
    dst = [destination] if isinstance(destination, int) else destination
    if not _ints(src) or not _ints(dst) or len(src) != len(dst):
        return None
    n = len(shape)
    src, dst = [_wrap(d, n) for d in src], [_wrap(d, n) for d in dst]
    if None in src or None in dst or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        return None
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(n) if d not in src)
    return _reorder(shape, layout, [d if d is not None else next(rest) for d in order])


def _expand(shape, layout, arg, out):
    size = arg("sizes") if arg("sizes") is not None else arg("size")
    other = arg("other")
    if other is not None:
        size = getattr(other, "_shape", None)
    if not _ints(size) or len(size) < len(shape):
        return None
    lead = len(size) - len(shape)
    target = tuple(shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(size))
    if any(d < 0 for d in target):
        return None
    strides, offset = layout
    return target, (tuple([0] * lead + [st if shape[i] == target[lead + i] else 0 for i, st in enumerate(strides)]),
                    offset)


def _unsqueeze(shape, layout, arg, out):
    strides, offset = layout
    d = _wrap(arg("dim"), len(shape) + 1)
    if d is None:
        return None
    new = 1 if d >= len(shape) else shape[d] * strides[d]
    return (*shape[:d], 1, *shape[d:]), ((*strides[:d], new, *strides[d:]), offset)


def _squeeze(shape, layout, arg, out):
    strides, offset = layout
    dim = arg("dim")
    if dim is None:
        dims = {d for d, n in enumerate(shape) if n == 1}
    else:
        dims = {_wrap(d, len(shape)) for d in (dim if isinstance(dim, (list, tuple)) else (dim,))}
        if None in dims:
            return None
        dims = {d for d in dims if shape and shape[d] == 1}
    return (tuple(n for d, n in enumerate(shape) if d not in dims),
            (tuple(st for d, st in enumerate(strides) if d not in dims), offset))


def _narrow(shape, layout, arg, out):
    strides, offset = layout
    d, start, length = _wrap(arg("dim"), len(shape)), arg("start"), arg("length")
    if d is None or not shape or not _ints((start, length)):
        return None
    start = start + shape[d] if start < 0 else start
    if start < 0 or length < 0 or start + length > shape[d]:
        return None  # (torch's error: the server's)
    return (*shape[:d], length, *shape[d + 1:]), (strides, offset + start * strides[d])


def _select(shape, layout, arg, out):
    strides, offset = layout
    d, index = _wrap(arg("dim"), len(shape)), arg("index")
    if d is None or not _ints((index,)) or not shape or not -shape[d] <= index < shape[d]:
        return None
    return (*shape[:d], *shape[d + 1:]), ((*strides[:d], *strides[d + 1:]), offset + (index % shape[d]) * strides[d])


def _diagonal(shape, layout, arg, out):
    strides, offset = layout
    k = arg("offset")
    a, b = _wrap(arg("dim1"), len(shape)), _wrap(arg("dim2"), len(shape))
    if a is None or b is None or a == b or not _ints((k,)) or len(shape) < 2:
        return None
    keep = [d for d in range(len(shape)) if d not in (a, b)]
    length = max(min(shape[a], shape[b] - k) if k >= 0 else min(shape[a] + k, shape[b]), 0)
    start = 0 if length == 0 else (k * strides[b] if k >= 0 else -k * strides[a])
    return ((*(shape[d] for d in keep), length),
            ((*(strides[d] for d in keep), strides[a] + strides[b]), offset + start))


def _getitem(shape, layout, arg, out):
    """A basic index (ints, slices of ints, None, Ellipsis); None for anything else."""
    key = arg("index")
    key = getattr(key, "key", key)
    items = list(key) if isinstance(key, tuple) else [key]
    if not all(k is None or k is Ellipsis or isinstance(k, int) and not isinstance(k, bool) or isinstance(k, slice)
               and all(v is None or isinstance(v, int) and not isinstance(v, bool) for v in (k.start, k.stop, k.step))
               for k in items) or items.count(Ellipsis) > 1:
        return None
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    if consumed > len(shape):
        return None
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items[i:i + 1] = [slice(None)] * (len(shape) - consumed)
    else:
        items += [slice(None)] * (len(shape) - consumed)
    strides, offset = layout
    sizes, out_strides, d = [], [], 0
    for k in items:
        if k is None:
            sizes.append(1)
            out_strides.append(1 if d >= len(shape) else shape[d] * strides[d])
            continue
        if isinstance(k, int):
            if not -shape[d] <= k < shape[d]:
                return None  # (torch's IndexError: the server's)
            offset += (k % shape[d]) * strides[d]
        else:
            if k.step is not None and k.step <= 0:
                return None
            start, _, step = k.indices(shape[d])
            length = len(range(*k.indices(shape[d])))
            offset += (start if length else 0) * strides[d]
            sizes.append(length)
            out_strides.append(strides[d] * step)
        d += 1
    return tuple(sizes), (tuple(out_strides), offset)


def _viewed(shape, layout, arg, out):
    """view, view_as, unflatten: torch's error when the layout does not allow it."""
    strides = view(tuple(shape), layout[0], tuple(out))
    if strides is None:
        from gradserve.torch._meta import error
        raise error("RuntimeError", VIEW_ERROR)
    return out, (strides, layout[1])


def _reshaped(shape, layout, arg, out):
    """reshape, flatten: a view where the layout allows, else a contiguous copy."""
    if tuple(shape) == tuple(out):
        return out, layout
    strides = view(tuple(shape), layout[0], tuple(out))
    return out, ((strides, layout[1]) if strides is not None else (contiguous(out), 0))


def _contiguous(shape, layout, arg, out):
    return shape, (layout if is_contiguous(tuple(shape), layout[0]) else (contiguous(shape), 0))


def _same(shape, layout, arg, out):
    return shape, layout


#: view ops (and the ops that return a view or a copy): how the result's shape and layout follow from the input's.
#: view, view_as, unflatten, reshape, reshape_as and flatten need the result's shape (``out``) from the caller.
VIEWS = {"t": _t, "transpose": _transpose, "permute": _permute, "movedim": _movedim, "expand": _expand,
         "expand_as": _expand, "broadcast_to": _expand, "unsqueeze": _unsqueeze, "squeeze": _squeeze,
         "narrow": _narrow, "select": _select, "diagonal": _diagonal, "linalg.diagonal": _diagonal,
         "getitem": _getitem, "view": _viewed, "view_as": _viewed, "unflatten": _viewed, "reshape": _reshaped,
         "reshape_as": _reshaped, "flatten": _reshaped, "contiguous": _contiguous, "detach": _same}
NEEDS_SHAPE = frozenset({"view", "view_as", "unflatten", "reshape", "reshape_as", "flatten"})
#: copies that keep their input's layout (preserve_format)
PRESERVING = frozenset({"clone", "to", "float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
                        "bool"})
#: families whose results are contiguous when their inputs are (linear algebra's solvers are column-major: not here)
CONTIGUOUS_FAMILIES = frozenset({"reduction", "nn", "conv", "creation", "scan", "queries", "indexing", "order_stats",
                                 "special", "random", "matrix", "composites", "shape", "attention"})
#: ops of those families whose results are laid out otherwise (nonzero's is column-major)
NOT_CONTIGUOUS = frozenset({"nonzero", "einsum"})
CONTIGUOUS_LINALG = frozenset({"matmul", "rmatmul", "mm", "bmm", "addmm", "baddbmm", "dot", "mv", "outer", "cross",
                               "linalg.cross", "det", "linalg.det", "logdet", "linalg.vector_norm",
                               "linalg.matrix_norm", "linalg.norm", "linalg.svdvals"})
