"""Strides as torch lays tensors out, known to the client without asking: ``.stride()``, ``.is_contiguous()``,
``.storage_offset()`` and the view error (``view size is not compatible with input tensor's size and stride``)
at the torch line.

A handle's layout is ``(strides, offset)`` in elements, a ``Deferred`` one that follows from the shape once that is
known (row-major, LAPACK's column-major, nonzero's), or None when the client cannot tell. New tensors are
contiguous; a view takes its base's layout through the view's geometry (``VIEWS``, by op name), and the pieces of
split, chunk, unbind and tensor_split are views too (``pieces``); an elementwise op lays its result out as torch's
TensorIterator does (dimensions sorted by the inputs' strides); a copy that preserves the layout (clone, a dtype
conversion) keeps dense strides; linear algebra lays its results out whatever its inputs' (``RESULT_LAYOUTS``);
other ops give a contiguous result of contiguous inputs, and an unknown layout otherwise (``stride()`` then says
the client cannot tell).
"""

from __future__ import annotations

from gradserve.torch._rules import channels_last_like

UNKNOWN = None
#: torch's message for a view its input's strides do not allow
VIEW_ERROR = ("view size is not compatible with input tensor's size and stride (at least one dimension spans across "
              "two contiguous subspaces). Use .reshape(...) instead.")


class Deferred:
    """A layout known before the shape is: its (strides, offset) once the shape is (``resolve``). ``kind``:
    ``row-major``; ``column-major`` (LAPACK's results: the last two dimensions transposed, the batch row-major);
    ``nonzero`` (``(1, n)`` for n rows: torch allocates it transposed, n itself even when 0); ``nonzero-column``
    (``index``-th of ``nonzero(as_tuple=True)``'s columns: a view of that, at ``index * n``); ``transposed-fold``
    (matmul of a matrix that requires grad by a batch: torch multiplies the batch transposed and folded, and
    transposes the product back, copied to row-major unless that is contiguous already: a row or a column);
    ``channels-last`` (a 4-d or 5-d tensor's channels innermost: cat of inputs laid out so); ``outer`` (torch's
    outer product is the elementwise product of a column by a row: row-major, but for an empty column by a row of
    one)."""

    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int = 0):
        self.kind, self.index = kind, index

    def __eq__(self, other) -> bool:
        return isinstance(other, Deferred) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __repr__(self) -> str:
        return f"Deferred({self.kind!r}, {self.index})"

    def resolve(self, shape: tuple) -> tuple:
        if self.kind == "row-major":
            return contiguous(shape), 0
        if self.kind == "column-major":
            return column_major(shape), 0
        if self.kind == "nonzero":
            return (1, shape[0]), 0
        if self.kind == "channels-last":
            return channels_last(shape), 0
        if self.kind == "outer":
            return elementwise(shape, [((shape[0], 1), (1, 1)), ((shape[1],), (1,))]), 0
        if self.kind == "transposed-fold":
            folded = column_major(shape)
            return (folded if is_contiguous(shape, folded) else contiguous(shape)), 0
        return (1,), self.index * shape[0]


#: a layout known to be row-major before its shape is (the result of an op of a contiguous family, shape unknown)
ROW_MAJOR = Deferred("row-major")
#: LAPACK's layout (inv, cholesky, solve, svd's U and Vh): each matrix column-major, the batch row-major
COLUMN_MAJOR = Deferred("column-major")


def of(t) -> tuple | None:
    """Handle ``t``'s (strides, offset), or None when not known."""
    layout = t._layout
    if layout.__class__ is Deferred:
        return None if t._shape is None else layout.resolve(tuple(t._shape))
    return layout


def column_major(shape: tuple) -> tuple:
    """LAPACK's strides of ``shape``: the last two dimensions' order reversed (a vector's are row-major)."""
    if len(shape) < 2:
        return contiguous(shape)
    *batch, m, n = contiguous((*shape[:-2], shape[-1], shape[-2]))
    return (*batch, n, m)


def channels_last(shape: tuple) -> tuple:
    """The strides torch allocates a channels_last (4-d) or channels_last_3d (5-d) tensor of ``shape`` with."""
    strides, step = [0] * len(shape), 1
    for d in (1, *range(len(shape) - 1, 1, -1), 0):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


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


def elementwise(shape: tuple, inputs: list, number: bool = False) -> tuple:
    """The strides of an elementwise result of broadcast ``shape`` from ``inputs`` ((shape, strides) each, in
    argument order), as TensorIterator allocates it: inputs of one shape all contiguous, or all dense with the
    same strides, give those (not with a Python ``number`` among the operands: a 0-d operand of its own);
    otherwise the dimensions are ordered by the inputs' strides (a broadcast one does not decide; the first input
    that tells decides; equal strides: the smaller size first) and the result is dense in that order."""
    n = len(shape)
    if not number and all(s == shape for s, _ in inputs):
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
    if not n:
        return tuple(shape), layout  # (a 0-d tensor's dimension 0 or -1: itself)
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
    if not shape:  # (a 0-d tensor expands with strides 0 only)
        return target, ((0,) * len(target), offset)
    out = [st if shape[i] == target[lead + i] else 0 for i, st in enumerate(strides)]
    for d in range(lead - 1, -1, -1):  # (a new dimension of one: as if unsqueezed, a larger one: 0)
        out.insert(0, 0 if target[d] != 1 else out[0] * target[d + 1])
    return target, (tuple(out), offset)


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
            offset += start * strides[d]  # (an empty slice's too: torch moves to its clamped start)
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
    """reshape, reshape_as: a view where the layout allows (its strides computed anew, a size-1 dimension's
    too, even to the same shape), else a contiguous copy."""
    strides = view(tuple(shape), layout[0], tuple(out))
    return out, ((strides, layout[1]) if strides is not None else (contiguous(out), 0))


def _flattened(shape, layout, arg, out):
    """flatten: the tensor itself where nothing is flattened, else as reshape."""
    return (out, layout) if tuple(shape) == tuple(out) else _reshaped(shape, layout, arg, out)


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
         "reshape_as": _reshaped, "flatten": _flattened, "contiguous": _contiguous, "detach": _same,
         "variable_data": _same}
NEEDS_SHAPE = frozenset({"view", "view_as", "unflatten", "reshape", "reshape_as", "flatten"})
#: copies that keep their input's layout (preserve_format)
PRESERVING = frozenset({"clone", "to", "float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
                        "bool", "flip"})
#: families whose results are contiguous when their inputs are (linear algebra's solvers are column-major: not here)
CONTIGUOUS_FAMILIES = frozenset({"reduction", "nn", "conv", "creation", "scan", "queries", "indexing", "order_stats",
                                 "special", "random", "matrix", "composites", "shape", "attention"})
#: ops of those families whose results are laid out otherwise (nonzero's is column-major)
NOT_CONTIGUOUS = frozenset({"nonzero", "einsum"})
CONTIGUOUS_LINALG = frozenset({"matmul", "rmatmul", "mm", "bmm", "addmm", "baddbmm", "dot", "mv", "outer", "cross",
                               "linalg.cross", "det", "linalg.det", "logdet", "linalg.vector_norm",
                               "linalg.matrix_norm", "linalg.norm", "linalg.svdvals"})


# ----- results laid out whatever the inputs' layouts: (the call's ``arg(name)``) -> a Deferred layout --------------
def _solve(arg):
    return ROW_MAJOR if arg("left") is False else COLUMN_MAJOR  # (left=False solves the transposed system)


def _svd(arg):
    # torch.svd's V is linalg.svd's Vh transposed; without compute_uv its U and V are zeros, V made as Vh is
    return (COLUMN_MAJOR, ROW_MAJOR, ROW_MAJOR) if arg("compute_uv") is not False else (ROW_MAJOR, ROW_MAJOR,
                                                                                          COLUMN_MAJOR)


_ROW_MAJOR_OPS = ("matmul", "__matmul__", "__rmatmul__", "rmatmul", "mm", "bmm", "addmm", "baddbmm", "dot", "mv",
                  "outer", "ger", "inner_1d", "cross", "linalg.cross", "det", "linalg.det", "logdet",
                  "linalg.svdvals")
def _matmul(arg, first: str = "self", second: str = "other"):
    """matmul's layout: row-major, but for a matrix that requires grad by a batch (torch's transposed fold;
    ``_rules.matmul_folds`` says when torch folds); None where whether the matrix requires grad is not known."""
    from gradserve.torch._meta import UNKNOWN, peek

    a, b = arg(first), arg(second)
    a_shape, b_shape = getattr(a, "_shape", None), getattr(b, "_shape", None)
    if a_shape is None or b_shape is None or len(a_shape) != 2 or len(b_shape) < 3:
        return ROW_MAJOR
    grad = peek(a, "requires_grad")
    return None if grad is UNKNOWN else TRANSPOSED_FOLD if grad else ROW_MAJOR


TRANSPOSED_FOLD = Deferred("transposed-fold")
OUTER = Deferred("outer")
CHANNELS_LAST = Deferred("channels-last")


def _cat(arg):
    """cat's layout, as torch chooses it: channels_last when every input is laid out so (4-d, or 5-d), else
    row-major (the first row-major input decides); None where an input's layout is not known."""
    chosen = None
    for t in arg("tensors") or ():
        layout = of(t) if hasattr(t, "_layout") else None
        if layout is None:
            return None
        rank = len(t._shape) if channels_last_like(tuple(t._shape), layout[0]) else 0
        if rank == 0 or chosen not in (None, rank):
            return ROW_MAJOR
        chosen = rank
    return None if chosen is None else CHANNELS_LAST


#: results row-major whatever their inputs' layouts: the families' (reductions, scans, medians; not flip, which
#: preserves its input's, nor sort's named tuple) and these ops' (softmax makes its input contiguous)
ROW_MAJOR_FAMILIES = frozenset({"reduction", "scan", "order_stats"})
ROW_MAJOR_OPS = frozenset({"softmax", "log_softmax", "softmin", "_safe_softmax"})
#: one-output ops whose result's layout does not follow their inputs' (matmul's is row-major even of transposed
#: operands; LAPACK's column-major; nonzero's transposed), as a function of the call's arguments
RESULT_LAYOUTS = {**{name: (lambda arg: ROW_MAJOR) for name in _ROW_MAJOR_OPS},
                  "matmul": _matmul, "rmatmul": lambda arg: _matmul(arg, "other", "self"), "cat": _cat,
                  "linalg.inv": lambda arg: COLUMN_MAJOR, "inverse": lambda arg: COLUMN_MAJOR,
                  "linalg.cholesky": lambda arg: COLUMN_MAJOR, "linalg.solve": _solve,
                  "nonzero": lambda arg: Deferred("nonzero"), "outer": lambda arg: OUTER, "ger": lambda arg: OUTER,
                  "masked_fill": lambda arg: ROW_MAJOR}  # (masked_fill fills a contiguous clone)
#: the same for named-tuple results, one layout per field
NAMED_LAYOUTS = {"svd": _svd, "linalg.svd": lambda arg: (COLUMN_MAJOR, ROW_MAJOR, COLUMN_MAJOR),
                 "slogdet": lambda arg: (ROW_MAJOR, ROW_MAJOR), "linalg.slogdet": lambda arg: (ROW_MAJOR, ROW_MAJOR)}


# ----- the pieces of split, chunk, unbind, tensor_split: views of the input, each (shape, layout) -------------------
def pieces(name: str, shape: tuple, layout: tuple | None, arg, count: int) -> list | None:
    """The ``count`` pieces (the server says how many) of ``name`` on an input of ``shape`` and ``layout`` (None:
    the pieces' shapes only), or None where the call is not understood."""
    dim = arg("dim")
    d = _wrap(0 if dim is None else dim, len(shape))
    if d is None or not shape:
        return None
    n = shape[d]
    strides, offset = layout if layout is not None else (None, 0)
    if name == "unbind":
        if count != n:
            return None
        return [((*shape[:d], *shape[d + 1:]), None if layout is None else
                 ((*strides[:d], *strides[d + 1:]), offset + i * strides[d])) for i in range(n)]
    starts = _starts(name, n, arg, count)
    if starts is None or len(starts) != count:
        return None
    return [((*shape[:d], length, *shape[d + 1:]), None if layout is None else (strides, offset + start * strides[d]))
            for start, length in starts]


def _starts(name: str, n: int, arg, count: int) -> list | None:
    """Each piece's (start, length) along the split dimension of size ``n``."""
    if name == "split" or name == "chunk":
        size = arg("split_size_or_sections") if name == "split" else arg("chunks")
        if _ints(size):
            out, start = [], 0
            for length in size:
                out.append((start, length))
                start += length
            return out
        if not _ints((size,)) or size <= 0:
            return None
        if name == "chunk":
            size = -(-n // size)
            if size == 0:
                return [(0, 0)] * count
        return [(i * size, min(size, n - i * size)) for i in range(count)]
    if name == "tensor_split":
        sections = arg("indices_or_sections")
        if _ints(sections):
            bounds = [0, *(min(max(i + n if i < 0 else i, 0), n) for i in sections), n]
            return [(bounds[i], max(bounds[i + 1] - bounds[i], 0)) for i in range(len(bounds) - 1)]
        if not _ints((sections,)) or sections <= 0:
            return None
        small, extra = divmod(n, sections)
        lengths = [small + 1] * extra + [small] * (sections - extra)
        return [(sum(lengths[:i]), lengths[i]) for i in range(sections)]
    return None
