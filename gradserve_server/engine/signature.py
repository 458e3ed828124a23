"""Argument parsing with torch's own messages: one place for every op's argument checks.

torch's Python bindings parse a call against the op's signatures (``torch/csrc/utils/python_arg_parser.cpp``)
before any kernel runs; their messages are what a client of torch sees for a wrong argument:

* ``sub_(): argument 'other' (position 1) must be Tensor, not NoneType`` (a positional argument: its
  1-based position, counting ``input`` for a function and not ``self`` for a method);
* ``sub(): argument 'other' must be Tensor, not NoneType`` (the same by keyword);
* ``zeros() missing 1 required positional arguments: "size"`` (torch's wording, plural and all);
* ``exp() takes 1 positional argument but 2 were given``; ``sub() got an unexpected keyword argument 'foo'``;
* for ops with several visible overloads and no single plausible one (by argument count):
  ``eq() received an invalid combination of arguments - got (NoneType), but expected one of: ...``.

Every op gets a signature derived from its Python signature in the op table (tensor parameters are the
ones it declares with ``tensors=``); ops that torch binds with several overloads declare them (``overloads=``)
as torch prints them (read off torch 2.13 and checked live by ``tests/engine/test_conformance_ops.py``), and
every other parser fact (``method_only``, ``numbers_as_tensors``, ``message_name``, ``param_types`` ...) is
a field of the op's declaration too (``registry.OpSpec``): this module holds no per-op table. Only the
tensor-typed parameters, arity and keywords decide *whether* a call is refused here; other parameters are
checked by the op itself, so this layer never refuses a call the op would accept and torch accepts.

A program op is a function call (``torch.sub(x, y)``) unless the op only exists as a Tensor method (the
in-place ops ``sub_``, ``add_`` ... and ``view``, ``expand`` ...); ``Tensor.<op>`` calls are method calls.
"""

from __future__ import annotations

from . import torch_args
from .errors import TorchAttributeError, TorchRuntimeError, TorchTypeError, TorchValueError
from .torch_args import ArgumentError, Param, Signature, parse_signature


def _is_tensor(v) -> bool:
    return isinstance(v, _tensor_class())


def _tensor_class():
    global _TENSOR
    if _TENSOR is None:
        from .tensor import Tensor  # engine.tensor imports this module's users: bound on first use
        _TENSOR = Tensor
        torch_args.bind((Tensor,), _tensor_facts)
    return _TENSOR


def _tensor_facts(t) -> tuple:
    d = t.data
    return d.ndim == 0, bool(t.requires_grad), d.dtype.kind


_TENSOR = None


#: derived_signature's and parse_signature's results (pure functions of the op declarations)
_DERIVED: dict[tuple, Signature] = {}
_PARSED: dict[tuple, Signature] = {}


def derived_signature(spec, name: str, method: bool) -> Signature:
    """The single signature torch would print for an op bound with one overload, from the op's Python
    signature: tensor parameters typed ``Tensor`` (``input`` for the function form's first), others unchecked."""
    key = (id(spec), name, method)
    sig = _DERIVED.get(key)
    if sig is None:
        sig = _DERIVED[key] = _derive(spec, name, method)
    return sig


def _parsed(name: str, text: str, numbers: bool) -> Signature:
    key = (name, text, numbers)
    sig = _PARSED.get(key)
    if sig is None:
        sig = _PARSED[key] = parse_signature(name, text, numbers)
    return sig


def _derive(spec, name: str, method: bool) -> Signature:
    params = []
    numbers_ok = spec.numbers_as_tensors
    kw_only = varargs = False
    for i, p in enumerate(spec.params):
        if method and i == 0:
            continue
        if p.kind == p.VAR_KEYWORD:
            continue
        if p.kind == p.VAR_POSITIONAL:  # f(2, 3) or f((2, 3)): any number of positional values
            vname = spec.size_varargs or p.name
            # (zeros(*sizes, size=...): torch's size may also come by keyword, one parameter under one name)
            keyword = any(q.name == vname and q.kind == q.KEYWORD_ONLY for q in spec.params)
            params.append(Param(vname, vname if keyword else p.name, "", not spec.size_varargs, False, False))
            kw_only = varargs = True
            continue
        if varargs and p.kind == p.KEYWORD_ONLY and p.name == spec.size_varargs:
            continue  # (the varargs parameter's keyword form, above)
        kw_only = kw_only or p.kind == p.KEYWORD_ONLY
        shown = "input" if (i == 0 and p.name == "self" and not method) else p.name
        if p.name in spec.tensors:
            type_ = "Tensor"
        elif p.name in spec.tensor_lists:
            type_ = "tuple of Tensors"
        else:
            type_ = spec.param_types.get(p.name, "")
        optional = p.default is not p.empty
        params.append(Param(shown, p.name, type_, optional, optional and p.default is None, kw_only, numbers_ok))
    return Signature(name, tuple(params), varargs)


#: check_call's per-(op, name, form) facts, pure functions of the op declarations
_CALLS: dict[tuple, tuple] = {}

#: calls ``torch_args.parse`` accepted, by signature (one of the cached ones, so its id is stable) and argument classes
#: where the classes alone decide (``Signature.by_class``), else what it reads of each value
#: (``_value_facts``); bounded. The value: whether an int, list or tuple is among the key's classes (``check_call``'s
#: class key then looks for integers beyond 64 bits; decided once here, by identity, not on every call)
_ACCEPTED: dict = {}
_ACCEPTED_MAX = 65536


def _remember(key) -> None:
    if key is not None and len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED[key] = _with_ints(key)


def _with_ints(key: tuple) -> bool:
    for c in key:
        if c is int or c is list or c is tuple:
            return True
    return False


def _value_fact(v):
    """What ``torch_args.parse`` reads of a value beyond its class: of a tensor, whether it is 0-d, requires grad
    and its dtype's kind; of a list or tuple of ints, that (every int is read alike); of anything else its class.
    None for another list, tuple or dict (its items are read)."""
    c = v.__class__
    if c is _TENSOR:  # the common case first (bound by check_call's first call)
        d = v.data
        return c, d.ndim == 0, bool(v.requires_grad), d.dtype.kind
    if c is list or c is tuple:
        # a shape, dims: parse reads each item's class (an int is an int whatever its value; a huge one is refused
        # apart, ``_out_of_int64``); an empty one is told apart (a tensor list's parameter takes it)
        for x in v:
            if x.__class__ is not int:
                return None
        return (c, "ints") if v else (c, "empty")
    if c is dict or isinstance(v, (list, tuple, dict)):
        return None
    if _is_tensor(v):
        d = v.data
        return c, d.ndim == 0, bool(v.requires_grad), d.dtype.kind
    return c


def _value_facts(args: list, kwargs: dict) -> tuple | None:
    facts = []
    for a in args:
        f = _value_fact(a)
        if f is None:
            return None
        facts.append(f)
    kw = []
    for k, v in kwargs.items():
        f = _value_fact(v)
        if f is None:
            return None
        kw.append((k, f))
    return ("values", tuple(facts), tuple(kw))


def call_facts(spec, name: str, method: bool) -> tuple:
    """(exempt, shown name, derived signature, torch's overload texts or None, their parsed signatures)."""
    key = (id(spec), name, method)
    facts = _CALLS.get(key)
    if facts is None:
        if not spec.parsed or name.startswith("__"):
            facts = (True, None, None, None, None)
        else:
            shown = spec.message_name or name.replace(".", "_")  # (torch.linalg.det is linalg_det to its parser)
            options = spec.overloads.get("method" if method else "function")
            numbers_ok = spec.numbers_as_tensors
            sigs = None if options is None else tuple(_parsed(shown, o, numbers_ok) for o in options)
            facts = (False, shown, derived_signature(spec, shown, method), options, sigs)
        facts = _CALLS[key] = facts
    return facts


def check_call(spec, name: str, args, kwargs: dict, method: bool, facts: tuple | None = None) -> None:
    """Refuse a call the way torch's argument parser does, before the op runs. ``args`` excludes ``self``
    for a method call. Only tensor-typed parameters, arity and keywords decide; the op checks the rest, but
    for integers beyond 64 bits (``_refuse_out_of_range``). ``facts``: ``call_facts(spec, name, method)`` when
    the caller holds them."""
    if facts is None:
        facts = call_facts(spec, name, method)
    if facts[0]:
        return
    # (the common call: its classes accepted before, one lookup; a huge int only among ints). The key: the
    # positional arguments' classes, then the keywords and their classes (a keyword is a str, never a class)
    fast = (id(facts), *map(type, args), *kwargs, *map(type, kwargs.values())) if kwargs else \
        (id(facts), *map(type, args))
    ints = _ACCEPTED.get(fast)
    if ints is None:
        _check_classes(spec, name, args, kwargs, method, facts, fast)
        ints = _with_ints(fast)
    if ints and (_out_of_int64(args) or _out_of_int64(kwargs.values())):
        _refuse_out_of_range(spec, facts, list(args), kwargs)


# ----- integers beyond 64 bits ----------------------------------------------------------------------------
# torch matches a signature by the arguments' classes (any Python int is an int), then unpacks each: an int
# or int-list parameter (dim, size) to int64 (ValueError "Overflow when unpacking long long"; an element of a
# list or of varargs sizes: a TypeError naming its 1-based position), a Scalar (mul's other, full's
# fill_value, clamp's min) to int64 or, from 2**63 up, uint64 (OverflowError). A float parameter takes any int.

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1

#: parameters torch types int, SymInt or int[] (the op table does not type them: by name)
_INT_PARAMS = frozenset({
    "dim", "dim0", "dim1", "dims", "start_dim", "end_dim", "k", "chunks", "sections", "diagonal", "offset", "n",
    "num_classes", "groups", "index", "length", "repeats", "split_size", "split_size_or_sections",
    "indices_or_sections", "upscale_factor", "downscale_factor", "kernel_size", "stride", "padding", "dilation",
    "output_size", "output_padding", "num_samples", "size", "shape", "sizes", "source", "destination", "shifts",
    "ignore_index", "low", "high", "steps", "dimension", "pad", "start", "end", "step", "unbiased_dims"})
#: parameters torch types Scalar (the op table does not type them: by name)
_SCALAR_PARAMS = frozenset({"other", "alpha", "beta", "exponent", "fill_value", "min", "max", "value",
                            "negative_slope"})
#: (op, parameter) pairs of those names that torch types float: any int passes (F.pad's value)
_FLOAT_PARAMS = frozenset({("pad", "value")})
#: ops whose start, end and step are Scalars (elsewhere, narrow's start and unfold's step, ints)
_SCALAR_RANGES = frozenset({"arange", "range", "linspace", "logspace"})


def _huge(v) -> bool:
    return v.__class__ is int and not _INT64_MIN <= v <= _INT64_MAX


def _out_of_int64(values) -> bool:
    """Whether an argument (or an item of a list argument) is a Python int outside int64 (cheap: classes)."""
    for v in values:
        c = v.__class__
        if c is int:
            if not _INT64_MIN <= v <= _INT64_MAX:
                return True
        elif c is list or c is tuple:
            for x in v:
                if x.__class__ is int and not _INT64_MIN <= x <= _INT64_MAX:
                    return True
    return False


def _kind(op_name: str, p: Param) -> str | None:
    """'scalar', 'int' or None (a float, str... parameter: no integer range of torch's to check)."""
    t = p.type
    if t in ("Number", "Tensor"):  # a Python number where torch wants a Tensor is a Scalar
        return "scalar"
    if t in ("int", "tuple of ints"):
        return "int"
    if t or (op_name, p.key) in _FLOAT_PARAMS:
        return None
    if op_name in _SCALAR_RANGES and p.key in ("start", "end", "step"):
        return "scalar"
    if p.key in _INT_PARAMS:
        return "int"
    return "scalar" if p.key in _SCALAR_PARAMS else None


def _unpack_error(shown: str, p: Param, pos: int) -> TorchTypeError:
    # (torch's message then carries the C++ stack trace of THPUtils_unpackLong before its closing quote)
    return TorchTypeError(f"{shown}(): argument '{p.name}' failed to unpack the object at pos {pos} with error "
                          f"\"Overflow when unpacking long long\"", code="invalid_argument")


def _refuse_out_of_range(spec, facts: tuple, args: list, kwargs: dict) -> None:
    """Raise torch's error for the first integer argument torch cannot unpack (see above), in the order torch
    unpacks them (the signature's)."""
    _, shown, derived, _, sigs = facts
    sig = derived if not sigs else next((s for s in sigs if torch_args.parse(s, args, kwargs, False)), sigs[0])
    positional = [p for p in sig.params if not p.keyword_only]
    if sig.varargs_intlist and positional and len(args) >= len(positional) and (
            len(args) > len(positional) or not isinstance(args[-1], (list, tuple))):
        # sizes given as varargs (zeros(2, 3), x.view(1, -1)): the varargs parameter's list
        vi = len(positional) - 1
        bound = [(p, a) for p, a in zip(positional[:vi], args)] + [(positional[vi], list(args[vi:]))]
    else:
        bound = list(zip(positional, args))
    by_key = {p.key: p for p in sig.params}
    bound += [(by_key[k], v) for k, v in kwargs.items() if k in by_key]
    for p, v in bound:
        kind = _kind(spec.name, p)
        if kind is None:
            continue
        if isinstance(v, (list, tuple)):
            if kind == "int":
                for j, x in enumerate(v):
                    if _huge(x):
                        raise _unpack_error(shown, p, j + 1)
        elif v.__class__ is int:
            if kind == "int" and _huge(v):
                raise TorchValueError("Overflow when unpacking long long", code="invalid_argument")
            if kind == "scalar" and not _INT64_MIN <= v <= _UINT64_MAX:
                raise TorchRuntimeError("int too big to convert" if v > 0 else "can't convert negative int to "
                                        "unsigned", code="overflow", exception="OverflowError")


def _check_classes(spec, name: str, args, kwargs: dict, method: bool, facts: tuple, fast: tuple) -> None:
    exempt, shown, derived, options, sigs = facts
    # first-level memos keyed by the call's facts (any of its signatures accepting is all that matters; the
    # Python attribute check reads classes only): a call without keywords whose argument classes a signature
    # that reads classes alone accepted before, one lookup (``fast``, (id(facts), *classes), tried by
    # ``check_call``); else one whose values parse reads the same way (``_value_facts``, finer than classes) as
    # an accepted one
    if _TENSOR is None:
        _tensor_class()
    if args.__class__ is not list:
        args = list(args)
    values = _value_facts(args, kwargs)
    seen = None if values is None else (id(facts), *values)
    if seen is not None and seen in _ACCEPTED:
        return
    try:
        if not method and spec.python_attribute:
            torch_args.python_attribute(*spec.python_attribute, derived, args, kwargs)
        # the memo's key, made once for every signature: (id(sig), *classes) where the classes alone decide,
        # else (id(sig), *the facts parse reads of each value), or None (a list or tuple value: its items are read)
        classes = (tuple(map(type, args)), tuple([(k, v.__class__) for k, v in kwargs.items()])) if kwargs else \
            (tuple(map(type, args)),)
        if options is None:
            if derived.by_class:
                k = (id(derived), *classes)
            else:
                k = None if values is None else (id(derived), *values)
            if k is None or k not in _ACCEPTED:
                torch_args.refuse(shown, derived, None, None, False, args, kwargs, spec.no_argument_overloads)
                _remember(k)
            _remember(seen)
            if derived.decided_by(*classes):
                _remember(fast)
            return
        keys = []
        for s in sigs:  # a call like one accepted before, by any overload: the same facts decided
            if s.by_class:
                k = (id(s), *classes)
            else:
                k = None if values is None else (id(s), *values)
            if k is not None and k in _ACCEPTED:
                _remember(seen)
                if s.decided_by(*classes):
                    _remember(fast)
                return
            keys.append(k)
        for s, k in zip(sigs, keys):
            if torch_args.parse(s, args, kwargs, False):
                _remember(k)
                _remember(seen)
                if s.decided_by(*classes):
                    _remember(fast)
                return  # one of torch's overloads takes it: the op checks the rest
        torch_args.refuse(shown, derived, options, sigs, spec.hidden_overload, args, kwargs)
    except ArgumentError as e:
        error = TorchAttributeError if e.kind == "AttributeError" else TorchTypeError
        raise error(e.message, code="invalid_argument") from None


def call_form(name: str, spec) -> bool:
    """True when a program's op is a Tensor method call (``p.sub_(...)``), False for ``torch.<op>(...)``."""
    return spec.inplace or spec.method_only or name in spec.method_aliases

