"""What the client knows of a tensor without asking, and the errors torch decides from it, raised at the line.

torch refuses some calls from metadata alone (an in-place op on a leaf that requires grad, ``requires_grad``
on an integer tensor, a flag changed on a computed tensor, shapes that do not broadcast, ``autograd.grad`` of
an input the output does not depend on). The client records lazily, so it decides these itself when the op is
recorded, from the catalog's facts (``family``, ``inplace``, ``differentiable``, argument names): the error is
torch's class and message at torch's line, and nothing is sent for it. What it cannot know locally (a view's
metadata after its base changed, results of ops with data-dependent outputs, values) stays unknown, and the
server decides at the next sync as before.

Facts live in a handle's view (``Tensor._know``), so an in-place op on a storage invalidates them for every
handle sharing it. ``node`` is the client's picture of the autograd graph: a leaf that requires grad is its own
``Node``, a computed tensor that requires grad has a ``Node`` whose parents are its inputs' nodes.
"""

from __future__ import annotations

import functools

from gradserve.errors import TORCH_ERRORS
from gradserve.torch import _layout as L
from gradserve.torch import _promotion as P
from gradserve.torch import _rules
from gradserve.torch._dtypes import FACTS, default_float
from gradserve.torch._grad_mode import is_grad_enabled

UNKNOWN = object()
#: torch's messages
LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
VIEW_OF_LEAF_INPLACE = "a view of a leaf Variable that requires grad is being used in an in-place operation."
NO_GRAD_VIEW_INPLACE = ("A view was created in no_grad mode and is being modified inplace with grad mode enabled. "
                        "Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your "
                        "code by moving both the view and the inplace either both inside the no_grad block (if you "
                        "don't want the inplace to be tracked) or both outside (if you want the inplace to be "
                        "tracked).")
INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
                    "location. Please clone() the tensor before performing the operation.")
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                   "single memory location. Please clone() the tensor before performing the operation.")
_MULTI_VIEW = (" This view is the output of a function that returns multiple views. Such functions do not allow the "
               "output views to be modified inplace. You should replace the inplace operation by an out-of-place one.")
#: an output of split, chunk or unbind that requires grad, modified in place ({0}: its number, {1}: its node's name)
MULTI_VIEW_INPLACE = "Output {0} of {1} is a view and is being modified inplace." + _MULTI_VIEW
#: one that does not (no node), modified in place by an op that makes it require grad
NO_GRAD_MULTI_VIEW_INPLACE = ("A view was created in no_grad mode and is being modified inplace with grad mode "
                              "enabled." + _MULTI_VIEW)
NON_LEAF_FLAG = ("you can only change requires_grad flags of leaf variables. If you want to use a computed "
                 "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().")
INT_REQUIRES_GRAD = "Only Tensors of floating point and complex dtype can require gradients"
INT_REQUIRES_GRAD_METHOD = "only Tensors of floating point dtype can require gradients"
INT_REQUIRES_GRAD_SETTER = "only Tensors of floating point and complex dtype can require gradients"
NO_GRAD_FN = "element {} of tensors does not require grad and does not have a grad_fn"
UNUSED = ("The differentiated Tensor at index {} appears to not have been used in the graph. Set "
          "allow_unused=True if this is the desired behavior.")


class Node:
    """A node of the client's picture of the graph; ``parents``: the nodes of the inputs that require grad."""

    __slots__ = ("parents",)

    def __init__(self, parents: tuple = ()):
        self.parents = parents


def error(kind: str, message: str) -> Exception:
    """torch's exception (a ProblemError of torch's class, as the server's are), raised by the client."""
    return TORCH_ERRORS[kind]({"status": 0, "code": "client_check", "detail": message, "exception": kind})


def known(t) -> dict:
    """The facts the client knows about handle ``t`` (its view, while valid), or an empty dict."""
    view = t._view
    return view if view is not None and t._view_stamp == t._stamp() else _NOTHING


_NOTHING: dict = {}


def peek(t, key: str):
    """A fact the client knows about handle ``t`` without asking, or UNKNOWN."""
    if key == "shape":
        return tuple(t._shape) if t._shape is not None else UNKNOWN
    value = known(t).get(key, UNKNOWN)
    if value is UNKNOWN and key == "dtype" and t._dtype is not None:
        return t._dtype
    return value


def node(t):
    """``t``'s node: None when it does not require grad, UNKNOWN when the client cannot tell."""
    facts = known(t)
    requires_grad = facts.get("requires_grad", UNKNOWN)
    if requires_grad is UNKNOWN or not requires_grad:
        return UNKNOWN if requires_grad is UNKNOWN else None
    leaf = facts.get("is_leaf", UNKNOWN)
    if leaf is True:
        if t._leaf is None:
            t._leaf = Node()
        return t._leaf
    return UNKNOWN if leaf is UNKNOWN else facts.get("node", UNKNOWN)


def is_float(dtype) -> bool | None:
    return None if dtype is UNKNOWN or dtype is None else FACTS[dtype][0] == "f"


# ----- shapes -----------------------------------------------------------------------------------------------
def broadcast(shapes: list[tuple], two: bool) -> tuple | object:
    """torch's broadcast of ``shapes`` with its message: more than two are broadcast pairwise, in order, as
    torch's TensorIterator does (``tensor a`` is the shape so far)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    if not two:
        for shape in shapes[1:]:
            first = broadcast([first, shape], True)
        return first
    n = max(len(s) for s in shapes)
    out = [1] * n
    for i in range(n - 1, -1, -1):
        off = n - 1 - i
        sizes = [s[len(s) - 1 - off] if off < len(s) else 1 for s in shapes]
        other = {d for d in sizes if d != 1}
        if len(other) > 1:
            if not two:
                return UNKNOWN
            raise error("RuntimeError", f"The size of tensor a ({sizes[0]}) must match the size of tensor b "
                                        f"({sizes[1]}) at non-singleton dimension {i}")
        out[i] = other.pop() if other else 1
    return tuple(out)


def data_shape(data) -> tuple | object:
    """The shape of nested Python lists of numbers, as ``torch.tensor`` reads it (the first element's length
    at each depth), with torch's ValueError for a ragged list; UNKNOWN for what is not plain lists."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    import numpy as np

    if isinstance(data, np.ndarray):
        return data.shape
    shape, probe = [], data
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    shape = tuple(shape)
    return shape if _fits(data, shape, 0) else UNKNOWN


def _fits(data, shape: tuple, depth: int) -> bool:
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if depth == len(shape):
        return isinstance(data, (bool, int, float))
    if not isinstance(data, (list, tuple)):
        return False  # (a number where torch expects a sequence: the server gives torch's message)
    if len(data) != shape[depth]:
        raise error("ValueError", f"expected sequence of length {shape[depth]} at dim {depth} (got {len(data)})")
    return all(_fits(d, shape, depth + 1) for d in data)


def data_dtype(data):
    """torch.tensor's dtype for ``data``, as torch infers it: an array's or a numpy number's own dtype, a Python
    float the default float, an int int64, a bool bool, and a sequence its items' dtypes promoted (an empty one:
    the default float); UNKNOWN for what the client cannot send or does not know (a complex, a tensor)."""
    import numpy as np

    if isinstance(data, (np.ndarray, np.generic)):  # torch.tensor keeps its dtype (one the server has)
        from gradserve.torch._catalog import DTYPES
        return data.dtype.name if data.dtype.name in DTYPES else UNKNOWN
    if isinstance(data, (list, tuple)):
        out = None
        for v in data:
            d = data_dtype(v)
            if d is UNKNOWN:
                return UNKNOWN
            out = d if out is None or out == d else P.promote(out, d)
        return default_float() if out is None else out
    if isinstance(data, bool):
        return "bool"
    if isinstance(data, int):
        return "int64"
    return default_float() if isinstance(data, float) else UNKNOWN


def _number_kind(value) -> str | None:
    """``bool``, ``int`` or ``float`` for a Python or numpy number, else None (a tensor...)."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    return "float" if isinstance(value, (float, np.floating)) else None


def has_numpy_number(data) -> bool:
    """Does ``data`` hold a numpy number (which the wire sends as a Python one: its dtype is sent beside)?"""
    import numpy as np

    if isinstance(data, (list, tuple)):
        return any(has_numpy_number(v) for v in data)
    return isinstance(data, np.generic)


# ----- an op's facts ------------------------------------------------------------------------------------------
def creation(op: str, arg, dtype_name, requires_grad: bool) -> dict:
    """A new leaf's facts (``arg(name)``: the call's argument ``name``, ``*size`` too); raises
    torch's error for ``requires_grad=True`` on an integer dtype."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    from gradserve.torch import _catalog

    dt = dtype_name
    if dt is None:
        if op == "tensor":
            dt = data_dtype(arg("data"))
        elif op == "full":  # (a number's kind: a numpy number counts as the Python number it is sent as)
            kind = _number_kind(arg("fill_value"))
            dt = {"bool": "bool", "int": "int64", "float": default_float()}.get(kind, UNKNOWN)
        elif op == "arange":
            kinds = {_number_kind(v) for v in (arg("start"), arg("end"), arg("step", 1)) if v is not None}
            dt = UNKNOWN if kinds - {"bool", "int", "float"} else default_float() if "float" in kinds else "int64"
        else:  # the op's declared dtype (zeros: the default float; randint: int64; zeros_like: its input's)
            entry = _catalog.catalog()[op]
            dt = predict(entry, arg) if entry["promotion"] else UNKNOWN
    if requires_grad and is_float(dt) is False:
        raise error("RuntimeError", INT_REQUIRES_GRAD)
    facts = {"is_leaf": True, "requires_grad": requires_grad, "grad_fn": None, "retains_grad": False,
             "version": 0}
    shape = UNKNOWN
    if op.endswith("_like"):  # (the input's shape, its layout kept where dense: torch's preserve_format)
        like = arg(_catalog.catalog()[op]["arguments"][0]["name"])
        like_shape = getattr(like, "_shape", None)
        if like_shape is not None:
            facts["shape"] = shape = tuple(like_shape)
            if L.of(like) is not None:
                facts["layout"] = (L.preserved(shape, L.of(like)[0]), 0)
        if dt is not UNKNOWN:
            facts["dtype"] = dt
        return facts
    if op == "tensor":
        shape = data_shape(arg("data"))
    elif op == "arange":
        shape = _arange_shape(arg("start"), arg("end"), arg("step", 1))
    else:
        size = next((arg(p) for p in _catalog.positions(op) if p in _catalog.SIZE_PARAMS), None)
        if size is None and _catalog.varargs(op) in _catalog.SIZE_PARAMS:
            size = arg(_catalog.varargs(op))  # zeros(2, 3), zeros((2, 3)), zeros(size=(2, 3))
        if isinstance(size, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in size):
            shape = tuple(size)
    if shape is not UNKNOWN:
        facts["shape"] = shape
        facts["layout"] = (L.contiguous(shape), 0)
    if dt is not UNKNOWN:
        facts["dtype"] = dt
    return facts


def _arange_shape(start, end, step) -> tuple | object:
    """``arange``'s length (``arange(3)``: end in ``start``'s place): for ints exactly, for floats as torch counts
    it, ``ceil((end - start) / step)`` in double precision; UNKNOWN for anything else."""
    import math

    if end is None:
        start, end = 0, start
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)) or step == 0 \
            or (end - start) * step < 0 or not all(math.isfinite(v) for v in (start, end, step)):
        return UNKNOWN  # (torch refuses a step of the wrong sign: the server says so)
    if all(isinstance(v, int) for v in (start, end, step)):
        return (max(0, -((start - end) // step)),)
    return (max(0, math.ceil((end - start) / step)),)


def result(entry: dict, tensors: list, arg, grad_enabled: bool) -> dict:
    """The facts of a one-output op's result: requires_grad, is_leaf and node, and the shape where the op's
    family says how (broadcasting, reductions). Raises torch's broadcast error."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if entry["name"] == "view" and tensors:
        target = _view_dtype(arg)
        if target is not None:
            return view_dtype(tensors[0], target)
    facts: dict = {}
    if entry["name"] in L.VIEWS and tensors and tensors[0]._shape is None and \
            tensors[0]._layout.__class__ is L.Deferred and tensors[0]._layout != L.ROW_MAJOR:
        tensors[0].shape  # noqa: B018 - (asked: a view of a column-major result may fail, at this line)
    dtype = arg("dtype") if "dtype" in (_ARG_NAMES.get(entry["name"]) or _arg_names(entry)) else None
    cast = entry["converts_to"] or (getattr(dtype, "name", UNKNOWN) if dtype is not None else None)
    # (torch refuses a dtype before a dimension out of range or shapes that do not broadcast, but for a kernel's
    # NotImplementedError, which comes after every shape check; an op that checks a dimension first declares it
    # among its checks, ``dim_range``, which come before this)
    kernel_refusal = None
    try:
        predicted = predict(entry, arg) if cast is None and entry["promotion"] else UNKNOWN
    except NotImplementedError as refusal:
        kernel_refusal, predicted = refusal, UNKNOWN
    shape = shape_of(entry, tensors, arg)
    if kernel_refusal is not None:
        raise kernel_refusal
    shape, layout = layout_of(entry, tensors, arg, shape, predicted)
    if shape is not UNKNOWN:
        facts["shape"] = shape
    if layout is not None:
        facts["layout"] = layout
    if entry["name"] in L.VIEWS and tensors and tensors[0]._dtype is not None:
        facts["dtype"] = tensors[0]._dtype  # (a view, or a copy of one dtype)
    if cast is not None and cast is not UNKNOWN and entry["family"] == "shape":  # (a conversion: its dtype)
        facts["dtype"] = cast
        if not tensors or peek(tensors[0], "dtype") in (cast, UNKNOWN):
            facts.pop("layout", None)  # (itself, or a copy that keeps a dense layout)
            if tensors and L.of(tensors[0]) is not None and L.dense(tuple(tensors[0]._shape), L.of(tensors[0])[0]):
                facts["layout"] = L.of(tensors[0])
            return facts  # torch returns the tensor itself when it has the dtype already: its flags, unknown here
    if cast is None and entry["promotion"]:
        if predicted is not UNKNOWN:
            facts["dtype"] = cast = predicted  # (an integral result does not require grad)
    elif cast is not None and cast is not UNKNOWN:
        facts["dtype"] = cast  # (dtype=: sum(x, dtype=torch.float64))
    meta_only = entry.get("meta_only")
    if meta_only:  # (view_as's other gives only a shape: the result does not require grad for it)
        shapes_only = [arg(name) for name in meta_only]
        read = arg(entry["arguments"][0]["name"])  # (x.view_as(x): x is read as well)
        tensors = [t for t in tensors if t is read or not any(t is s for s in shapes_only)]
    return _flags(facts, entry, tensors, grad_enabled, cast)


def named_results(entry: dict, tensors: list, arg, grad_enabled: bool) -> list[dict] | None:
    """The facts of each field of a named-tuple result (sort's values and indices) by the fields' rules of the
    entry's ``promotion`` (``same => same,int64``), the shape where the family says how; None: not declared."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    rules = P.fields(entry["promotion"]) if entry["promotion"] else ()
    if not rules:
        fixed = L.NAMED_LAYOUTS.get(entry["name"])  # (svd's fields' layouts, whatever their dtypes)
        return None if fixed is None else [{"layout": layout} for layout in fixed(_with_defaults(entry, arg))]
    shape = shape_of(entry, tensors, arg)  # (torch's IndexError for a dim out of range, here)
    operands = _operands(_operand_names(entry), arg)
    layout = None
    have = L.of(tensors[0]) if shape is not UNKNOWN and len(tensors) == 1 else None
    fixed = L.NAMED_LAYOUTS.get(entry["name"])
    if fixed is not None:  # (svd's: one per field, whatever the input's layout)
        layout = list(fixed(_with_defaults(entry, arg)))
    elif entry["name"] == "sort":
        layout = None if have is None else (L.preserved(shape, have[0]), 0)  # (sort keeps its input's layout)
    elif shape is not UNKNOWN and entry["family"] in L.ROW_MAJOR_FAMILIES:
        layout = (L.contiguous(shape), 0)  # (max(dim), median(dim)... whatever the input's layout)
    elif have is not None and entry["family"] in L.CONTIGUOUS_FAMILIES and have[0] == L.contiguous(
            tuple(tensors[0]._shape)):
        layout = (L.contiguous(shape), 0)  # (topk, kthvalue... of a row-major input)
    out = []
    for i, rule in enumerate(rules):
        facts: dict = {} if shape is UNKNOWN else {"shape": shape}
        field = layout[i] if isinstance(layout, list) else layout
        if field is not None:
            facts["layout"] = field
        dtype = UNKNOWN if operands is UNKNOWN else P.predict(rule, operands)
        if dtype is not UNKNOWN and dtype is not None:
            facts["dtype"] = dtype
        out.append(_flags(facts, entry, tensors, grad_enabled, facts.get("dtype", UNKNOWN)))
    return out


def _flags(facts: dict, entry: dict, tensors: list, grad_enabled: bool, cast) -> dict:
    """``facts`` of a result of dtype ``cast`` (None: the rule's, not known; UNKNOWN) with its autograd flags and
    node, where the client knows them."""
    # (an op without a derivative that records a node, floor_divide's NotImplemented, still makes a result that
    # requires grad: its backward is what fails)
    if not grad_enabled or not (entry["differentiable"] or entry["grad_fns"]) or cast is not None and \
            is_float(cast) is False:
        facts.update(requires_grad=False, is_leaf=True, grad_fn=None, node=None)
        return facts
    if cast is UNKNOWN:
        return facts
    nodes = [node(t) for t in tensors]
    parents = tuple([n for n in nodes if n is not None and n is not UNKNOWN])
    if parents and UNKNOWN not in nodes:
        facts.update(requires_grad=True, is_leaf=False, node=Node(parents))
    elif parents:
        facts.update(requires_grad=True, is_leaf=False)
    elif UNKNOWN not in nodes:
        facts.update(requires_grad=False, is_leaf=True, grad_fn=None, node=None)
    return facts


def _view_dtype(arg) -> str | None:
    """The dtype of ``Tensor.view(dtype)`` (positional or ``dtype=``), or None: ``view(*shape)``."""
    target = arg("dtype")
    if target is None:
        rest = arg("shape")
        target = rest[0] if isinstance(rest, (list, tuple)) and len(rest) == 1 else None
    return getattr(target, "name", None) if target.__class__.__name__ == "dtype" else None


def view_dtype(t, target: str) -> dict:
    """The facts of ``t.view(target)``, as torch makes it: never requires grad (no grad_fn, a leaf, whatever
    ``t`` is), ``target``'s dtype, the last dimension scaled between element sizes (its errors, which need the
    strides, are the server's)."""
    facts = {"dtype": target, "requires_grad": False, "is_leaf": True, "grad_fn": None, "node": None}
    shape, source = peek(t, "shape"), peek(t, "dtype")
    if shape is UNKNOWN or source is UNKNOWN:
        return facts
    have, want = FACTS[source][1], FACTS[target][1]
    if have == want:
        facts["shape"] = shape
    elif shape and (have > want or shape[-1] % (want // have) == 0):
        facts["shape"] = (*shape[:-1], shape[-1] * have // want)
    return facts


def layout_of(entry: dict, tensors: list, arg, shape, dtype=UNKNOWN) -> tuple:
    """(shape, layout) of a one-output op's result (of ``dtype``, where known): a view's shape and layout from its
    input's (torch's view error, raised here, when the input's strides do not allow it), an elementwise result's as
    torch lays it out, a contiguous one of contiguous inputs where the op's family makes one; layout None where not
    known."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    name = entry["name"]
    view = L.VIEWS.get(name)
    if view is not None:
        first = _first_tensor(entry, tensors, arg)
        if first is None or first._shape is None:
            return shape, None
        have = tuple(first._shape)
        if name in L.NEEDS_SHAPE:
            if shape is UNKNOWN:
                shape = _target_shape(name, have, tensors, arg)
                if shape is UNKNOWN:
                    return shape, None
        layout = L.of(first)
        got = view(have, layout or (L.contiguous(have), 0), _with_defaults(entry, arg), shape)
        if got is None and name == "getitem" and shape is UNKNOWN:  # (an advanced index: a copy, its shape)
            index = arg("index")
            return advanced_index_shape(have, getattr(index, "key", index)), None
        if got is None:
            return shape, None
        return got[0], (got[1] if layout is not None else None)
    if name in L.PRESERVING and shape is UNKNOWN and len(tensors) == 1 and tensors[0]._shape is not None:
        shape = tuple(tensors[0]._shape)  # (clone, to: the input's shape)
    if not tensors and entry["family"] != "creation":
        return shape, None
    fixed = L.RESULT_LAYOUTS.get(name)
    if fixed is not None:  # (laid out whatever its inputs' layouts)
        layout = fixed(_with_defaults(entry, arg))
        return shape, (layout if shape is UNKNOWN or layout is None else layout.resolve(tuple(shape)))
    if name in L.ROW_MAJOR_OPS or entry["family"] in L.ROW_MAJOR_FAMILIES and name not in L.PRESERVING:
        return shape, (L.ROW_MAJOR if shape is UNKNOWN else (L.contiguous(shape), 0))
    layouts = [L.of(t) for t in tensors]
    if shape is UNKNOWN:  # (row-major, when its shape is known, as the contiguous families' below)
        return shape, (L.ROW_MAJOR if None not in layouts and _contiguous_result(entry, tensors, layouts) else None)
    if len(shape) <= 1 and entry["family"] != "elementwise" and name not in L.NOT_CONTIGUOUS and \
            name not in L.PRESERVING:
        return shape, (L.contiguous(shape), 0)  # (a new tensor of one dimension or none; a copy keeps a dense one's)
    if None in layouts:
        return shape, None
    if entry["family"] == "elementwise":
        # (a number given for a binary op's operand is a 0-d tensor operand to TensorIterator; clamp's bounds,
        # pow's exponent are Scalars of its kernel)
        number = any(a["name"] in ("self", "other") and _number_kind(arg(a["name"])) is not None
                     for a in entry["arguments"])
        # (TensorIterator converts an input of another dtype than the one it computes in first: ``to``, which
        # keeps a dense layout and makes another dense)
        common = dtype if dtype is not UNKNOWN and dtype != "bool" else None  # (a comparison: not known here)
        condition = arg("condition") if entry["name"] == "where" else None
        return shape, (L.elementwise(shape, [
            (tuple(t._shape), L.preserved(tuple(t._shape), lay[0]) if common is not None and t._dtype is not None
             and t._dtype != common and t is not condition else lay[0]) for t, lay in zip(tensors, layouts)],
            number), 0)
    if name in L.PRESERVING and len(tensors) == 1:
        return shape, (L.preserved(shape, layouts[0][0]), 0)
    if _contiguous_result(entry, tensors, layouts):
        return shape, (L.contiguous(shape), 0)
    return shape, None


def _contiguous_result(entry: dict, tensors: list, layouts: list) -> bool:
    """An op of a family whose results are row-major for row-major inputs, and inputs that are (the strides of
    their dimensions of size 1 too: some ops keep those)."""
    name = entry["name"]
    return (entry["family"] in L.CONTIGUOUS_FAMILIES and name not in L.NOT_CONTIGUOUS and name not in L.PRESERVING
            or name in L.CONTIGUOUS_LINALG) and entry["family"] != "elementwise" and all(
        lay[0] == L.contiguous(tuple(t._shape)) for t, lay in zip(tensors, layouts))  # (size-1 strides too)


def _first_tensor(entry: dict, tensors: list, arg):
    first = entry["arguments"][0] if entry["arguments"] else None
    value = arg(first["name"]) if first is not None else None
    return value if any(value is t for t in tensors) else None


def _with_defaults(entry: dict, arg):
    """``arg`` with the op's declared defaults for what the call does not give."""
    params = _params(entry)

    def value(name, default=None):
        got = arg(name)
        if got is None and name in params:
            got = params[name].get("default")
        return default if got is None or isinstance(got, str) and got.startswith("<") else got
    return value


def _target_shape(name: str, have: tuple, tensors: list, arg):
    """The shape of view_as, reshape_as, unflatten and flatten (view, reshape: ``shape_of``'s)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if name in ("view_as", "reshape_as"):
        other = arg("other")
        return view_shape(have, tuple(other._shape)) if any(other is t for t in tensors) and \
            other._shape is not None else UNKNOWN
    if name == "flatten":
        start, end = arg("start_dim"), arg("end_dim")
        start, end = 0 if start is None else start, -1 if end is None else end
        if not have:
            return (1,)
        n = len(have)
        if not all(isinstance(d, int) and not isinstance(d, bool) and -n <= d < n for d in (start, end)):
            return UNKNOWN
        start, end = start % n, end % n
        if start > end:
            return UNKNOWN
        return (*have[:start], _numel(have[start:end + 1]), *have[end + 1:])
    dim, sizes = arg("dim"), arg("sizes")  # unflatten (its sizes checked by the op's checks)
    n = len(have)
    if not isinstance(dim, int) or isinstance(dim, bool) or not have or not -n <= dim < n or \
            not isinstance(sizes, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                            for d in sizes):
        return UNKNOWN
    dim %= n
    inner = view_shape((have[dim],), sizes)
    return UNKNOWN if inner is UNKNOWN else (*have[:dim], *inner, *have[dim + 1:])


def _arg_names(entry: dict) -> frozenset:
    return _ARG_NAMES.get(entry["name"]) or _ARG_NAMES.setdefault(
        entry["name"], frozenset(a["name"] for a in entry["arguments"]))


_ARG_NAMES: dict[str, frozenset] = {}


#: dimension arguments, checked against the rank of the op's first argument as torch's maybe_wrap_dim does
DIM_PARAMS = ("dim", "dim0", "dim1", "dim2", "dims", "start_dim", "end_dim", "source", "destination")


#: ops whose ``dims`` argument counts repetitions, not dimensions
COUNTS_NAMED_DIMS = frozenset({"tile"})


def check_dims(entry: dict, arg, shape) -> None:
    """torch's IndexError for a dimension argument out of range of the first argument's rank."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    # the entry's dims_of: what its dimension arguments index, the first argument ("input"), the output (one
    # more dimension: unsqueeze) or something else (the broadcast of two inputs: cross; a stack: cat)
    dims_of = entry.get("dims_of", "input")
    if shape is UNKNOWN or dims_of == "other":
        return
    rank = max(len(shape) + (dims_of == "output"), 1)
    for param in _dim_params(entry):
        value = arg(param)
        if value is None:  # (a dimension not given: its declared default, diagonal's dim2=1 of a 1-d tensor too)
            value = _params(entry)[param].get("default")
        for d in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(d, int) and not isinstance(d, bool) and not -rank <= d < rank:
                raise error("IndexError", f"Dimension out of range (expected to be in range of [{-rank}, "
                                          f"{rank - 1}], but got {d})")


def _dim_params(entry: dict) -> tuple:
    """The entry's dimension arguments (DIM_PARAMS it has), in DIM_PARAMS' order."""
    got = _DIM_PARAMS.get(entry["name"])
    if got is None:
        got = _DIM_PARAMS[entry["name"]] = tuple(p for p in DIM_PARAMS if p in _arg_names(entry)
                                                 and not (p == "dims" and entry["name"] in COUNTS_NAMED_DIMS))
    return got


_DIM_PARAMS: dict[str, tuple] = {}


def _params(entry: dict) -> dict:
    """The entry's arguments by name."""
    got = _PARAMS.get(entry["name"])
    if got is None:
        got = _PARAMS[entry["name"]] = {a["name"]: a for a in entry["arguments"]}
    return got


_PARAMS: dict[str, dict] = {}


def _first_shape(entry: dict, tensors: list, arg):
    first = entry["arguments"][0] if entry["arguments"] else None
    if first is None or not first.get("tensor") or first.get("tensor_list"):
        return UNKNOWN
    value = arg(first["name"])
    return peek(value, "shape") if any(value is t for t in tensors) else UNKNOWN


def shape_of(entry: dict, tensors: list, arg):
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    family, name = entry["family"], entry["name"]
    if family == "elementwise":
        shapes = [t._shape for t in tensors]
        if not shapes or None in shapes:
            return UNKNOWN
        first = shapes[0]
        if len(shapes) == 1:
            return tuple(first)
        return broadcast([tuple(sh) for sh in shapes], len(shapes) == 2)
    shape = _first_shape(entry, tensors, arg)
    check_dims(entry, arg, shape)
    if entry.get("shape"):  # (declared: conv, pooling, cat, losses... by a rule of the op table's)
        declared = _rules.result_shape(entry["shape"], arg)
        if declared is not _rules.UNKNOWN:
            return declared
    if shape is UNKNOWN:
        return UNKNOWN
    if (family == "reduction" or entry.get("returns")) and len(tensors) == 1:
        params = _params(entry)
        if "dim" not in params:
            return UNKNOWN
        dim = arg("dim")
        if dim is None:
            dim = params["dim"].get("default", 0)
            dim = dim if dim is None or isinstance(dim, int) else UNKNOWN
        if "keepdim" not in params:  # (sort: the input's shape; topk: k along dim)
            k = arg("k")
            if not entry.get("returns") or not isinstance(dim, int) or isinstance(dim, bool):
                return UNKNOWN
            if "k" not in params:
                return shape
            if not isinstance(k, int) or isinstance(k, bool) or not shape and k > 1:
                return UNKNOWN
            return shape if not shape else (*shape[:dim % len(shape)], k, *shape[dim % len(shape) + 1:])
        if dim is None and params["dim"].get("default", 0) is None:
            dims = range(len(shape))
        elif isinstance(dim, int) and not isinstance(dim, bool) or isinstance(dim, (list, tuple)) and dim:
            dims = [d % max(len(shape), 1) for d in (dim if isinstance(dim, (list, tuple)) else (dim,))]
        else:
            return UNKNOWN
        if not shape:
            return ()
        if arg("keepdim", False):
            return tuple(1 if i in dims else n for i, n in enumerate(shape))
        return tuple(n for i, n in enumerate(shape) if i not in dims)
    if entry.get("converts_to"):  # (a conversion: long, double...)
        return shape
    if name in ("view", "reshape"):
        return view_shape(shape, arg("shape") if "shape" in _arg_names(entry) else arg("size"))
    if name in _SQUARE_SHAPES:  # (batches of square matrices: torch's error for others, the server's)
        return _SQUARE_SHAPES[name](shape) if len(shape) >= 2 and shape[-1] == shape[-2] else UNKNOWN
    if name in _PRODUCTS:
        other = arg(_PRODUCTS[name])
        known = any(other is t for t in tensors)
        if name == "linear" and (not known or len(peek(other, "shape")) != 1):
            return UNKNOWN  # (a matrix weight: declared checks; a vector: input @ weight, a dot or an mv)
        layouts = (L.of(tensors[0]) if tensors else None, L.of(other) if known else None)
        grads = tuple(_requires_grad(t) for t in (tensors[0] if tensors else None, other if known else None))
        out = matmul_shape(shape, peek(other, "shape") if known else UNKNOWN, name != "mm",
                           tuple(None if lay is None else lay[0] for lay in layouts), grads)
        return UNKNOWN if name == "linear" and arg("bias") is not None else out
    return UNKNOWN


#: matrix products whose shapes are matmul's, by the name of their second operand
_PRODUCTS = {"matmul": "other", "mm": "mat2", "mv": "vec", "dot": "tensor", "linear": "weight"}


#: ops of batches of square matrices: their result's shape
_SQUARE_SHAPES = {"linalg.inv": tuple, "inverse": tuple, "linalg.cholesky": tuple, "det": lambda s: s[:-2],
                  "linalg.det": lambda s: s[:-2], "logdet": lambda s: s[:-2]}


def view_shape(shape: tuple, size) -> tuple | object:
    """``view``/``reshape``'s result, with torch's errors for a size that does not fit."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if not isinstance(size, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in size):
        return UNKNOWN
    numel = 1
    for n in shape:
        numel *= n
    if list(size).count(-1) > 1:
        raise error("RuntimeError", "only one dimension can be inferred")
    known = 1
    for d in size:
        if d != -1:
            known *= d
    if any(d < -1 for d in size):
        return UNKNOWN
    if -1 in size:
        if known == 0 or numel % known:
            raise error("RuntimeError", f"shape '{list(size)}' is invalid for input of size {numel}")
        return tuple(numel // known if d == -1 else d for d in size)
    if known != numel:
        raise error("RuntimeError", f"shape '{list(size)}' is invalid for input of size {numel}")
    return tuple(size)


def matmul_shape(a, b, batched: bool = True, strides: tuple = (None, None), grads: tuple = (None, None)) \
        -> tuple | object:
    """``matmul``'s result shape, with torch's messages, by torch's routes: a dot, ``mv``, ``mm`` (a 1-D left
    operand as a row), the operand of more dimensions folded into one matrix for ``mm``/``mv`` with the other
    where torch folds it (``_rules.matmul_folds``), else ``bmm`` over the broadcast batch dimensions. ``strides`` and
    ``grads`` (requires_grad): the operands' (None: not known; a refusal whose message depends on them is the
    server's). ``batched=False`` (``mm``): 2-D operands only."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if b is UNKNOWN or not a or not b or not batched and (len(a) != 2 or len(b) != 2):
        return UNKNOWN  # (0-d operands: torch's message is the server's)
    if len(a) == 1 and len(b) == 1:
        if a[0] != b[0]:
            raise error("RuntimeError", f"inconsistent tensor size, expected tensor [{a[0]}] and src [{b[0]}] to "
                                        f"have the same number of elements, but got {a[0]} and {b[0]} elements "
                                        f"respectively")
        return ()
    a2 = a if len(a) >= 2 else (1, a[0])  # (a 1-D operand as a row, or as a column on the right)
    b2 = b if len(b) >= 2 else (b[0], 1)
    batch = broadcast([tuple(a2[:-2]), tuple(b2[:-2])], True) if len(a) > 2 or len(b) > 2 else ()
    out = (*batch, *(a[-2:-1] if len(a) >= 2 else ()), *(b[-1:] if len(b) >= 2 else ()))
    if a2[-1] == b2[-2]:
        return out
    if len(a) == len(b) == 3 and (a[0] == 1) != (b[0] == 1):  # (torch drops a batch of one that requires grad)
        one = 0 if a[0] == 1 else 1
        if grads[one] is None:
            return UNKNOWN
        if grads[one]:
            squeezed = [a, b]
            squeezed[one] = squeezed[one][1:]
            return matmul_shape(*squeezed, True, strides, grads)
    left = len(a) >= len(b)  # (the operand of more dimensions, transposed when it is the right one)
    big, small = (a2, b) if left or len(b) <= 2 else ((*b[:-2], b[-1], b[-2]), a if len(a) != 2 else (a[1], a[0]))
    fold = len(big) <= 2 or _rules.matmul_folds(big, strides[0] if left else _rules.swap_last(strides[1]),
                                                len(small), grads[1] if left else grads[0], len(a))
    if fold is None:
        return UNKNOWN
    if fold:  # mv, mm, or either of the bigger operand as one matrix
        rows, k = _numel(big[:-1]), big[-1]
        if len(small) == 1:
            raise error("RuntimeError", f"size mismatch, got input ({rows}), mat ({rows}x{k}), vec ({small[0]})")
        raise error("RuntimeError", f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and "
                                    f"{small[0]}x{small[1]})")
    n = _numel(batch)
    raise error("RuntimeError", f"Expected size for first two dimensions of batch2 tensor to be: [{n}, {a2[-1]}] "
                                f"but got: [{n}, {b2[-2]}].")


def _requires_grad(t) -> bool | None:
    value = UNKNOWN if t is None else peek(t, "requires_grad")
    return None if value is UNKNOWN else bool(value)


def advanced_index_shape(shape: tuple, key):
    """The shape of ``x[key]`` for an advanced index (integer tensors or lists of ints, with ints, slices and an
    Ellipsis), as torch gives it: the ints select first (``x[0, :, idx]`` is ``x[0][:, idx]``, where numpy differs),
    then the index arrays broadcast, their shape in their place when they are adjacent, else first; UNKNOWN for a
    mask (its count is the data's), a ``None`` among them, an index out of range or shapes that do not broadcast
    (the server's errors)."""
    items = list(key) if isinstance(key, tuple) else [key]
    ellipses = [i for i, k in enumerate(items) if k is Ellipsis]  # (by identity: a tensor's == is an op)
    if len(ellipses) > 1 or any(k is None for k in items):
        return UNKNOWN
    arrays = []
    for k in items:
        if isinstance(k, _tensor_class()):
            dtype = peek(k, "dtype")
            if k._shape is None or dtype is UNKNOWN or dtype not in ("int64", "int32", "int16", "int8"):
                return UNKNOWN  # (a mask: uint8/bool; a float index: torch's error)
            arrays.append(tuple(k._shape))
        elif isinstance(k, (list, tuple)):
            got = _list_index_shape(k)
            if got is UNKNOWN:
                return UNKNOWN
            arrays.append(got)
        elif not (k is Ellipsis or isinstance(k, slice) or isinstance(k, int) and not isinstance(k, bool)):
            return UNKNOWN
    if not arrays:
        return UNKNOWN
    consumed = len(items) - len(ellipses)
    if consumed > len(shape):
        return UNKNOWN
    if ellipses:
        items[ellipses[0]:ellipses[0] + 1] = [slice(None)] * (len(shape) - consumed)
    items += [slice(None)] * (len(shape) - len(items))
    sizes, places, indexed = [], [], []
    for d, k in enumerate(items):
        if isinstance(k, slice):
            if k.step is not None and k.step <= 0 or not all(v is None or isinstance(v, int) and not isinstance(v, bool)
                                                              for v in (k.start, k.stop, k.step)):
                return UNKNOWN
            sizes.append(len(range(*k.indices(shape[d]))))
            continue
        if isinstance(k, int):  # (torch selects first: the dimension goes, as in a basic index)
            if not -shape[d] <= k < shape[d]:
                return UNKNOWN
            continue
        indexed.append(arrays.pop(0))
        places.append(len(sizes))
        sizes.append(None)
    together = indexed[0]
    for other in indexed[1:]:  # (shapes that do not broadcast: torch's "shape mismatch" IndexError, the server's)
        together = _rules._broadcast_shape(together, other)
        if together is _rules.UNKNOWN:
            return UNKNOWN
    rest = [n for n in sizes if n is not None]
    if places == list(range(places[0], places[-1] + 1)):
        before = sum(1 for n in sizes[:places[0]] if n is not None)
        return (*rest[:before], *together, *rest[before:])
    return (*together, *rest)


def _list_index_shape(k) -> tuple | object:
    """The shape of a nested list of ints used as an index (torch reads it as an int64 tensor), or UNKNOWN."""
    shape, level = [], [k]
    while level and all(isinstance(v, (list, tuple)) for v in level):
        sizes = {len(v) for v in level}
        if len(sizes) != 1 or not sizes.pop():
            return UNKNOWN  # (ragged, or empty: torch's own reading)
        shape.append(len(level[0]))
        level = [x for v in level for x in v]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in level):
        return UNKNOWN  # (bools: a mask; floats: an error)
    return tuple(shape)


def basic_index(key) -> bool:
    """An index torch applies as a view (ints, slices, None, Ellipsis), not an advanced one (tensors, lists)."""
    items = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, slice) or isinstance(k, int) and not isinstance(k, bool)
               for k in items)


def view_of_leaf(entry: dict | None, base, index=None, facts: dict | None = None) -> bool:
    """Is the result (of ``facts``) of the op of catalog ``entry`` on ``base`` a view of a leaf (torch's
    ``_base.is_leaf``, which makes an in-place op on the view refused once it requires grad)? (None: getitem.)
    A reshape whose layout is not known here is taken for a view of a leaf, which is contiguous where it was made
    so."""
    views = is_view(entry, base, index, facts or {})
    if views is None:
        views = peek(base, "is_leaf") is True
    if not views:
        return False
    return peek(base, "is_leaf") is True or peek(base, "view_of_leaf") is True


#: the detached aliases: ``x.detach()`` (sharing the version counter on the server) and ``x.data`` (not): values
#: shared, autograd facts their own
DETACHES = frozenset({"detach", "variable_data"})
#: view ops whose result is a view where its input's layout allows one (else a copy)
RESHAPES = frozenset({"reshape", "reshape_as", "flatten"})
#: ops of the client's shape family whose result may be a copy of their input: reshapes, conversions (to another
#: dtype), contiguous (of a tensor that is not)
MAY_COPY = RESHAPES | (L.PRESERVING - {"clone", "flip"}) | {"contiguous"}


def copies(name: str, base, facts: dict) -> bool:
    """Is the result of ``name`` (one of ``MAY_COPY``, of ``facts``) of ``base`` a copy, where the client can tell?
    A reshape that the input's layout allows no view of, a conversion to another dtype, contiguous of a tensor that
    is not."""
    if name in RESHAPES:
        layout, shape = L.of(base), facts.get("shape")
        return layout is not None and shape is not None and base._shape is not None and \
            L.view(tuple(base._shape), layout[0], tuple(shape)) is None
    if name == "contiguous":
        layout = L.of(base)
        return layout is not None and not L.is_contiguous(tuple(base._shape), layout[0])
    dtype = facts.get("dtype")
    return dtype is not None and base._dtype is not None and dtype != base._dtype


def is_view(entry: dict | None, base, index, facts: dict) -> bool | None:
    """Is the result of the op of catalog ``entry`` (None: getitem) on ``base`` a view of it (a basic index, a
    view op of any family, a reshape that its layout allows; not a conversion, which returns the tensor itself or
    a copy)? None where the layout that decides is not known."""
    name = "getitem" if entry is None else entry["name"]
    if name == "getitem":
        return basic_index(index)
    if name in RESHAPES:
        return None if L.of(base) is None or facts.get("shape") is None else not copies(name, base, facts)
    return entry.get("storage") == "view" or name in L.VIEWS and name not in MAY_COPY and name not in DETACHES


def grad_view(entry: dict, base, index, facts: dict) -> None:
    """The facts of a view made under grad mode that its in-place ops read: a view of a leaf (``view_of_leaf``);
    a view of an output of split, chunk or unbind that requires grad (``multi_view``: torch refuses an in-place op
    on it too, naming the view's own node, which the client reads from the server then)."""
    if view_of_leaf(entry, base, index, facts):
        facts["view_of_leaf"] = True
    if peek(base, "multi_view") is not UNKNOWN and is_view(entry, base, index, facts):
        facts["multi_view"] = (0, None, *peek(base, "multi_view")[2:])


#: ops whose pieces are views that are the outputs of one node (tensor_split's are slices each): its short name
_MULTI_VIEW_NODES = {"split": "Split", "chunk": "Split", "unbind": "Unbind"}


def piece_facts(name: str, base, i: int, arg) -> dict:
    """The autograd facts of piece ``i`` of ``name`` (split, chunk, unbind, tensor_split) of ``base``, made under
    grad mode: a view of a leaf where ``base`` is one (or a view of one); where ``base`` requires grad, no leaf; an
    output of one node (split's, unbind's), which torch refuses to modify in place (``_check_multi_view``)."""
    if not is_grad_enabled():
        return {}
    facts = {"view_of_leaf": True} if peek(base, "is_leaf") is True or peek(base, "view_of_leaf") is True else {}
    short = _MULTI_VIEW_NODES.get(name)
    if short == "Split" and isinstance(arg("split_size_or_sections"), (list, tuple)):
        short = "SplitWithSizes"
    requires_grad = peek(base, "requires_grad")
    if requires_grad is True:
        facts.update(requires_grad=True, is_leaf=False)
        parent = node(base)  # (the pieces' node: of the op on base)
        if parent is not UNKNOWN and parent is not None:
            facts["node"] = Node((parent,))
    if short is not None:  # (whether it requires grad not known: asked at an in-place op on it, "unsure")
        facts["multi_view"] = (i, short) if requires_grad is True else (
            i, short, "no_grad" if requires_grad is False else "unsure")
    return facts


def _check_multi_view(target, multi: tuple, others: list) -> None:
    """torch's refusal of an in-place op on an output of split, chunk or unbind (or a view of one): ``multi`` is
    (i, node) where it requires grad, (i, node, "unsure") where that is not known (asked), (i, node, "no_grad")
    where it does not: refused then where an operand requires grad (known here)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    kind = multi[2] if len(multi) > 2 else None
    if kind == "unsure":
        kind = None if target.requires_grad else "no_grad"
    if kind is None:
        raise error("RuntimeError", MULTI_VIEW_INPLACE.format(multi[0], multi[1] or multi_view_node(target)))
    if any(peek(t, "requires_grad") is True for t in others):
        raise error("RuntimeError", NO_GRAD_MULTI_VIEW_INPLACE)


def multi_view_node(target) -> str:
    """The short name of the node of ``target``, a view (of a view) of a multi-output op's output: ``T`` of
    ``TBackward0``, as torch's message names it."""
    name = type(target.grad_fn).__name__
    return name[:name.rindex("Backward")] if "Backward" in name else name


def no_grad_view(entry: dict, base, index, facts: dict) -> None:
    """torch: a view made under ``no_grad`` of a tensor that requires grad requires grad too (without a grad_fn; an
    in-place op on it under grad mode has its own error, the server's); a copy (``reshape`` of a transposed
    tensor) does not. Where the client cannot tell, the flags are the server's."""
    requires_grad = peek(base, "requires_grad")
    if requires_grad is False:
        return
    for fact in ("requires_grad", "is_leaf", "grad_fn", "node"):
        facts.pop(fact, None)
    views = is_view(entry if entry["name"] != "getitem" else None, base, index, facts)  # (reshape_as: by layout)
    if peek(base, "is_leaf") is True and peek(base, "view_of_leaf") is not UNKNOWN:
        return  # (a view made a leaf by requires_grad_(): its base's flag decides, which the client does not know)
    if requires_grad is True and views:
        facts.update(requires_grad=True, grad_fn=None, view_of_leaf="no_grad")  # (view_of_leaf: its in-place error)


def inplace(entry: dict, target, others: list, grad_enabled: bool, index=None) -> dict:
    """Check an in-place op on ``target`` as torch does; the target's facts after it. ``index``: setitem's key
    (a basic index writes through a view of the target)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    facts_of = known(target)
    leaf, requires_grad = facts_of.get("is_leaf", UNKNOWN), facts_of.get("requires_grad", UNKNOWN)
    on_view = facts_of.get("view_of_leaf") is True
    multi = facts_of.get("multi_view")
    if grad_enabled and multi is not None:
        _check_multi_view(target, multi, others)
    if grad_enabled and requires_grad is True and facts_of.get("view_of_leaf") == "no_grad":
        raise error("RuntimeError", NO_GRAD_VIEW_INPLACE)
    if grad_enabled and requires_grad is True and (on_view or index is not None and view_of_leaf(None, target, index)):
        raise error("RuntimeError", VIEW_OF_LEAF_INPLACE)
    if grad_enabled and leaf is True and requires_grad is True:
        raise error("RuntimeError", LEAF_INPLACE)
    shape = peek(target, "shape")
    facts: dict = {} if shape is UNKNOWN else {"shape": shape}
    if on_view or facts_of.get("view_of_leaf") == "no_grad":
        facts["view_of_leaf"] = facts_of["view_of_leaf"]
    if multi is not None:  # (an output of split... that an in-place op did not make require grad stays one)
        facts["multi_view"] = multi
    if not grad_enabled or not entry["differentiable"]:
        if requires_grad is not UNKNOWN and leaf is not UNKNOWN:
            facts.update(requires_grad=requires_grad, is_leaf=leaf)
            if requires_grad and leaf is False and "node" in facts_of:
                facts["node"] = facts_of["node"]
        return facts
    nodes = [node(target), *(node(t) for t in others)]
    parents = tuple(n for n in nodes if n is not None and n is not UNKNOWN)
    if UNKNOWN in nodes:
        if parents:
            facts.update(requires_grad=True, is_leaf=False)
        return facts
    if parents:
        facts.update(requires_grad=True, is_leaf=False, node=Node(parents))
        if facts.get("view_of_leaf") is True:  # (its base, the leaf, is no longer one: it has CopySlices)
            del facts["view_of_leaf"]
    elif leaf is not UNKNOWN:
        facts.update(requires_grad=False, is_leaf=leaf, node=None)
    return facts


@functools.cache
def _broadcasts_in_place(name: str) -> bool:
    """An in-place op whose out-of-place form is elementwise (``add_``: ``add``), or that is itself (``copy_``),
    broadcasts into its target."""
    from gradserve.torch import _catalog

    table = _catalog.catalog()
    base = table.get(name.removesuffix("_"))
    return (base is not None and base["family"] == "elementwise") or table[name]["family"] == "elementwise"


def set_requires_grad(t, flag: bool, setter: bool) -> None:
    """``t.requires_grad_(flag)`` / ``t.requires_grad = flag``: torch's errors for a computed tensor and for an
    integer one."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if not flag and peek(t, "is_leaf") is False:
        raise error("RuntimeError", NON_LEAF_FLAG)
    if flag and is_float(peek(t, "dtype")) is False:
        raise error("RuntimeError", INT_REQUIRES_GRAD_SETTER if setter else INT_REQUIRES_GRAD_METHOD)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def check_grad(outputs: list, inputs: list, allow_unused, has_grad_outputs: bool = False) -> list[bool] | None:
    """``autograd.grad``'s errors torch decides from the graph: an output that does not require grad, an input
    not used (without ``allow_unused``). Returns which inputs are used, when the client knows."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    out_nodes = [node(t) for t in outputs]
    if not has_grad_outputs:
        for t, n in zip(outputs, out_nodes):
            shape = peek(t, "shape")
            if n is not None and shape is not UNKNOWN and len(shape) and _numel(shape) != 1:
                raise error("RuntimeError", "grad can be implicitly created only for scalar outputs")
    for i, n in enumerate(out_nodes):
        if n is None:
            raise error("RuntimeError", NO_GRAD_FN.format(i))
    in_nodes = [node(t) for t in inputs]
    if UNKNOWN in out_nodes or UNKNOWN in in_nodes or None in in_nodes:
        return None
    reached: set[int] = set()
    stack = list(out_nodes)
    while stack:
        n = stack.pop()
        if id(n) not in reached:
            reached.add(id(n))
            stack.extend(n.parents)
    used = [id(n) in reached for n in in_nodes]
    if not allow_unused and not all(used):
        raise error("RuntimeError", UNUSED.format(used.index(False)))
    return used


def set_grad(t, value) -> None:
    """``t.grad = value``: torch's error for a gradient of another size."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if value is None:
        return
    have, want = peek(value, "shape"), peek(t, "shape")
    if have is not UNKNOWN and want is not UNKNOWN and have != want:
        raise error("RuntimeError", f"attempting to assign a gradient of size '{list(have)}' to a tensor of size "
                                    f"'{list(want)}'. Please ensure that the gradient and the tensor are the same size")


# ----- torch's argument parser, at the torch line -------------------------------------------------------------
class _Unknown(Exception):
    """A fact the parser reads of a tensor (0-d, requires grad, dtype) is not known here: the server decides."""




def _tensor_facts(t) -> tuple:
    shape, requires_grad, dtype = peek(t, "shape"), peek(t, "requires_grad"), peek(t, "dtype")
    if shape is UNKNOWN or requires_grad is UNKNOWN or dtype not in FACTS:
        raise _Unknown
    return shape == (), bool(requires_grad), FACTS[dtype][0]


@functools.cache
def _parser():
    """The engine's torch_args (the same file, linked into this package), told what a tensor is here."""
    from gradserve.torch import _torch_args
    from gradserve.torch._dtypes import dtype
    from gradserve.torch._tensor import Tensor

    _torch_args.bind((Tensor,), _tensor_facts, (str, dtype))
    return _torch_args


def _signatures(facts: dict, numbers: bool, shown: str) -> tuple:
    """(derived signature or None, torch's overload texts or None, their parsed signatures) of one form, named
    ``shown`` in their messages, kept in the catalog entry's facts once made."""
    made = facts.setdefault("_parsed", {}).get(shown)
    if made is None:
        ta = _parser()
        derived = facts["signature"]
        derived = ta.signature_from_json({**derived, "name": shown}) if derived is not None else None
        options = tuple(facts["overloads"]) if facts["overloads"] is not None else None
        sigs = tuple(ta.parse_signature(shown, o, numbers) for o in options) if options else None
        made = facts["_parsed"][shown] = (derived, options, sigs)
    return made


def _plain(v):
    """A value as the server receives it (numpy scalars as Python numbers), containers kept as they are (torch
    names a tuple as a tuple)."""
    import numpy as np

    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, tuple) and type(v) is tuple:
        return tuple(_plain(x) for x in v)
    return v


def check_arguments(entry: dict, args: tuple, kwargs: dict, method: bool = False, spelling: str | None = None) -> None:
    """torch's argument parser on this call, from the catalog's ``parser`` facts of the op (what the server's
    engine.signature checks): a wrong argument raises torch's TypeError (or, for a torch function written in
    Python, its AttributeError) here, and nothing is sent. ``method``: called as a Tensor method (``args`` holds
    self first); ``spelling``: the name the user called, which torch's messages give where it is one of the
    op's aliases (``arctan2(): ...``) and the op has no message name of its own. A call whose check reads a
    tensor fact the client does not know is left to the server."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    parser = entry.get("parser")
    if not parser:
        return
    form = "method" if method or parser["program_form"] == "method" else "function"
    facts = parser.get(form)
    if facts is None:
        return
    ta = _parser()
    if form == "method":
        if not args or not isinstance(args[0], ta.TENSOR_TYPES):
            return  # (the server's message: a descriptor that does not apply)
        args = args[1:]
    key = _call_key(facts, args, kwargs)
    if key is not None and key in _ACCEPTED:
        return
    shown = facts["name"]
    if spelling in entry["aliases"] and shown == entry["name"]:
        shown = spelling.replace(".", "_")  # (torch.special.psi is special_psi to torch's parser)
    derived, options, sigs = _signatures(facts, parser["numbers"], shown)
    args = [_plain(a) for a in args]
    kwargs = {k: _plain(v) for k, v in kwargs.items()}
    try:
        if form == "function" and parser["python_attribute"]:
            attribute, order = parser["python_attribute"]
            ta.python_attribute(attribute, tuple(order), derived, args, kwargs)
        ta.refuse(shown, derived, options, sigs, parser["hidden"], args, kwargs,
                  tuple(parser["no_argument_overloads"]))
    except _Unknown:
        return
    except ta.ArgumentError as e:
        raise error(e.kind, e.message) from None
    if key is not None and len(_ACCEPTED) < 65536:
        _ACCEPTED.add(key)


#: calls the parser took, by what it reads of them (``_call_key``): the same call again is not parsed again
_ACCEPTED: set = set()


def _call_key(facts: dict, args, kwargs: dict) -> tuple | None:
    """What the parser reads of a call: each value's class and, of a tensor, whether it is 0-d (and then whether
    it requires grad and its dtype); None when a value is a container (its items are read). A tensor fact not
    known is part of the key as unknown: the parser raises _Unknown when it reads one (nothing is kept), so a
    call it took with the fact unknown did not read it, and the same call again need not be parsed again."""
    out = [id(facts)]
    tensors = _parser().TENSOR_TYPES
    for v in (*args, *kwargs.values()):
        c = v.__class__
        if c is list or c is tuple or c is dict:
            return None
        if isinstance(v, tensors):  # (requires grad and dtype are read of a 0-d tensor only)
            shape = v._shape
            if shape is None:
                out.append((c, None))
                continue
            if shape:
                out.append((c, False))
                continue
            rg, dtype = known(v).get("requires_grad", UNKNOWN), peek(v, "dtype")
            if rg is UNKNOWN or dtype is UNKNOWN:
                out.append((c, True, None))
                continue
            out.append((c, True, rg, dtype))
        else:
            out.append(c)
    out.extend(kwargs)
    return tuple(out)


# ----- dtype rules, at the torch line ---------------------------------------------------------------------------
_OPERAND_NAMES: dict[str, tuple] = {}


def _operand_names(entry: dict) -> tuple:
    """The arguments a declaration's rule reads: those it names, else every tensor argument of the op."""
    got = _OPERAND_NAMES.get(entry["name"])
    if got is None:
        named = P.parse(entry["promotion"])[1]
        got = _OPERAND_NAMES[entry["name"]] = named if named is not None else tuple(
            a["name"] for a in entry["arguments"] if a.get("tensor"))
    return got


def _operands(names: tuple, value) -> list | object:
    """(dtype, priority) of each argument the rule reads (``value(name)``: the call's), UNKNOWN when a dtype is not
    known here, or whether a tensor has dimensions is not known where it matters (tensors of different dtypes)."""
    tensor = _tensor_class()
    out = []
    unsized = False
    for name in names:
        v = value(name)
        if v is None:
            continue
        c = v.__class__
        if c is tensor or isinstance(v, tensor):
            dt = v._dtype  # (a handle's dtype never changes: in-place ops keep it)
            if dt is None:
                return UNKNOWN
            shape = v._shape
            if shape is None:
                unsized = True
                out.append((dt, P.DIM))
            else:
                out.append((dt, P.DIM if shape else P.ZERO))
        elif c is float or c is int or c is bool:
            out.append((P.number_dtype(v), P.NUMBER))
        else:
            return UNKNOWN  # (a list, a dtype, a numpy number...: not an operand the rule knows)
    if unsized and len({d for d, p in out if p != P.NUMBER}) > 1:
        return UNKNOWN  # (a 0-d tensor and a dimensioned one of different dtypes promote differently)
    return out


@functools.cache
def _positions(op: str) -> dict[str, int]:
    from gradserve.torch import _catalog

    return _catalog.positions(op)


@functools.cache
def _tensor_class() -> type:
    from gradserve.torch._tensor import Tensor

    return Tensor


_PREDICTED: dict[tuple, object] = {}


def predict(entry: dict, value) -> str | object:
    """The dtype of the op's result by its catalog ``promotion`` (``value(name)``: the call's argument), or UNKNOWN;
    raises torch's exception for dtypes torch refuses."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    declaration = entry["promotion"]
    operands = _operands(_operand_names(entry), value)
    if operands is UNKNOWN:
        return UNKNOWN
    rounding = value("rounding_mode") if entry["promotion"] == "true_divide" else None
    key = (declaration, tuple(operands), rounding)
    got = _PREDICTED.get(key)
    if got is None:
        try:
            got = P.predict(declaration, operands, rounding)
        except P.Refused as refused:
            got = refused
        got = UNKNOWN if got is None else got
        if len(_PREDICTED) < 65536:
            _PREDICTED[key] = got
    if isinstance(got, P.Refused):
        raise error(got.kind, got.message)
    return got


def check_overlap(entry: dict, args: tuple, kwargs: dict) -> None:
    """An in-place op's memory overlap errors (``_check_overlap``), which torch's TensorIterator raises before it
    compares the operands' shapes (so before the op's declared checks)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    target = args[0] if args else kwargs.get("self")
    if isinstance(target, _tensor_class()):
        _check_overlap(entry, target, [t for t in (*args[1:], *kwargs.values()) if isinstance(t, _tensor_class())])


def _check_inplace_broadcast(entry: dict, target, others: list) -> None:
    """torch's errors for an elementwise in-place op's target whose elements share memory (an expanded tensor),
    then for operands that broadcast to another shape than the target's."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    _check_overlap(entry, target, others, after_autograd=True)
    shape = peek(target, "shape")
    if _broadcasts_in_place(entry["name"]) and shape is not UNKNOWN:
        shapes = [shape, *(peek(t, "shape") for t in others)]
        if UNKNOWN not in shapes:
            out = broadcast(shapes, len(shapes) == 2)
            if out is not UNKNOWN and out != shape:
                raise error("RuntimeError", f"output with shape {list(shape)} doesn't match the broadcast shape "
                                            f"{list(out)}")


def _check_overlap(entry: dict, target, others: list, after_autograd: bool = False) -> None:
    """torch's errors for an elementwise in-place op's target whose elements share memory (an expanded tensor), or
    that partly overlaps an operand (``after_autograd``: the target's autograd checks, which torch makes first,
    passed)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    shape = peek(target, "shape")
    layout = L.of(target) if _broadcasts_in_place(entry["name"]) and shape is not UNKNOWN else None
    if layout is None:
        return
    internal = any(n > 1 and stride == 0 for n, stride in zip(shape, layout[0]))
    if internal or any(_partly_overlap(target, shape, layout, t) for t in others):
        # (under grad mode torch's leaf checks come first: decided here where the tensor does not require grad)
        if after_autograd or not is_grad_enabled() or (
                target.requires_grad if peek(target, "requires_grad") is UNKNOWN else peek(target, "requires_grad")) \
                is False:
            raise error("RuntimeError", INTERNAL_OVERLAP if internal else PARTIAL_OVERLAP)


def _partly_overlap(target, shape: tuple, layout: tuple, other) -> bool:
    """torch's partial overlap of an in-place op's target and an operand sharing its memory: both dense (else torch
    cannot tell, and lets it through), not the same elements in the same order, their ranges intersecting."""
    if not hasattr(other, "_storage") or other is target or (
            other._storage is not target._storage and other._storage.memory is not target._storage.memory):
        return False
    have, other_shape = L.of(other), peek(other, "shape")
    if have is None or other_shape is UNKNOWN or not L.dense(shape, layout[0]) or \
            not L.dense(other_shape, have[0]) or not _numel(shape) or not _numel(other_shape):
        return False
    if (shape, tuple(layout[0]), layout[1]) == (other_shape, tuple(have[0]), have[1]):
        return False  # (the very elements: torch allows x.add_(x))
    return layout[1] < have[1] + _numel(other_shape) and have[1] < layout[1] + _numel(shape)


def check_inplace_dtype(entry: dict, base: dict | None, args: tuple, kwargs: dict, others: list = ()) -> None:
    """An in-place op, by its out-of-place op's ``promotion`` (catalog ``base``), in torch's order: its refusal of
    the operands' dtypes (``-`` of bools), operands that do not broadcast to the target's shape (``others``: the
    tensors besides the target), and a result the target cannot hold (``result type Float can't be cast to the
    desired output type Long``), before anything runs."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    tensor = args[0] if args and isinstance(args[0], _tensor_class()) else None
    target = tensor._dtype if tensor is not None else None
    if not base or not base["promotion"] or target is None:
        if tensor is not None:
            _check_inplace_broadcast(entry, tensor, others)
        return
    positions = _positions(entry["name"])

    def value(param):
        i = positions.get(param)
        return args[i] if i is not None and i < len(args) else kwargs.get(param)

    result = predict(base, value)
    _check_inplace_broadcast(entry, tensor, others)
    if result is UNKNOWN or P.parse(base["promotion"])[0] in ("bool", "int64"):
        return
    if not P.can_hold(result, target):
        raise error("RuntimeError", f"result type {FACTS[result][2]} can't be cast to the desired output type "
                                    f"{FACTS[target][2]}")
