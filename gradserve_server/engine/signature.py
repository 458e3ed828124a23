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

import functools
import numbers
from dataclasses import dataclass

import numpy as np

from .errors import TorchAttributeError, TorchTypeError


@dataclass(frozen=True)
class Param:
    name: str             # the name torch's messages use
    key: str              # the op function's parameter name (keyword lookup)
    type: str             # torch's type name: Tensor, Number, int, bool, str, tuple of ints, ... ('' = unchecked)
    optional: bool
    allow_none: bool
    keyword_only: bool
    numbers: bool = False  # a Python number passes for this Tensor


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Param, ...]
    varargs_intlist: bool = False

    @functools.cached_property
    def max_pos(self) -> int:
        return sum(1 for p in self.params if not p.keyword_only)

    @functools.cached_property
    def min_args(self) -> int:
        return sum(1 for p in self.params if not p.optional)

    @functools.cached_property
    def by_class(self) -> bool:
        """Whether the arguments' classes alone decide ``_parse`` (no parameter whose check reads a value)."""
        return not self.varargs_intlist and not any(p.type in _VALUE_TYPES for p in self.params)


#: parameter types whose check looks at the value, not only its class (a 0-d tensor passes for a Number)
_VALUE_TYPES = frozenset({"Number", "int", "tuple of ints"})


def _tname(v) -> str:
    return type(v).__name__


def _is_tensor(v) -> bool:
    return isinstance(v, _tensor_class())


def _tensor_class():
    global _TENSOR
    if _TENSOR is None:
        from .tensor import Tensor  # engine.tensor imports this module's users: bound on first use
        _TENSOR = Tensor
    return _TENSOR


_TENSOR = None


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not _is_tensor(v)


def _matches(type_: str, v, numbers_ok: bool = False) -> bool:
    """torch's parameter check, for the types the op table uses ('' and unknown types accept anything)."""
    if type_ == "Tensor":
        return _is_tensor(v) or (numbers_ok and _is_number(v))
    if type_ == "Number":
        return _is_number(v) or (_is_tensor(v) and v.data.ndim == 0 and not v.requires_grad)
    if type_ == "int":
        return (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            _is_tensor(v) and v.data.ndim == 0 and v.data.dtype.kind in "iu")
    if type_ == "bool":
        return isinstance(v, bool)
    if type_ == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if type_ == "str":
        return isinstance(v, str)
    if type_ == "tuple of ints":
        if v is None or _matches("int", v):  # torch's int[]? prints as 'tuple of ints' too
            return True
        return isinstance(v, (list, tuple)) and all(_matches("int", x) for x in v)
    if type_ == "tuple of Tensors":
        return isinstance(v, (list, tuple))
    if type_ == "torch.dtype":
        return isinstance(v, str)
    return True


def parse_signature(name: str, text: str, numbers: bool = False) -> Signature:
    """``(Tensor input, Tensor other, *, Number alpha = 1)`` -> Signature."""
    inner = text.strip()[1:-1].strip()
    params, kw_only = [], False
    for tok in [t.strip() for t in inner.split(", ")] if inner else []:
        if tok == "*":
            kw_only = True
            continue
        decl, _, default = tok.partition(" = ")
        type_, _, pname = decl.rpartition(" ")
        params.append(Param(pname, pname, type_, bool(default), default == "None", kw_only, numbers))
    varargs = sum(1 for p in params if not p.keyword_only) == 1 and params[0].type == "tuple of ints"
    return Signature(name, tuple(params), varargs)


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
            params.append(Param(spec.size_varargs or p.name, p.name, "", not spec.size_varargs, False, False))
            kw_only = varargs = True
            continue
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


# ----- torch's messages ---------------------------------------------------------------------------------

def _missing(sig: Signature, idx: int) -> TorchTypeError:
    names = [f'"{p.name}"' for p in sig.params[idx:] if not p.optional]
    n = len(names)
    return TorchTypeError(f"{sig.name}() missing {n} required positional argument{'s' if n == 1 else ''}: "
                          f"{', '.join(names)}", code="invalid_argument")


def _extra(sig: Signature, nargs: int) -> TorchTypeError:
    mx, mn = sig.max_pos, sig.min_args
    if mn != mx:
        return TorchTypeError(f"{sig.name}() takes from {mn} to {mx} positional arguments but {nargs} were given",
                              code="invalid_argument")
    return TorchTypeError(f"{sig.name}() takes {mx} positional argument{'' if mx == 1 else 's'} but {nargs} "
                          f"{'was' if nargs == 1 else 'were'} given", code="invalid_argument")


def _parse(sig: Signature, args: list, kwargs: dict, raise_: bool) -> bool:
    """torch's FunctionSignature::parse; True when the call fits (raises torch's message when asked)."""
    nargs = len(args)
    if nargs > sig.max_pos and not sig.varargs_intlist:
        if raise_:
            raise _extra(sig, nargs)
        return False
    remaining = len(kwargs)
    pos = 0
    for i, p in enumerate(sig.params):
        is_kwd = False
        if sig.varargs_intlist and pos == 0 and i == 0 and p.type != "Tensor" and nargs > 1 \
                and all(_matches("int", a) for a in args):
            pos = nargs  # permute(1, 0) is permute((1, 0))
            continue
        if pos < nargs:
            if p.keyword_only:
                if raise_:
                    raise _extra(sig, nargs)
                return False
            obj, present = args[pos], True
        else:
            present = p.key in kwargs
            obj = kwargs.get(p.key)
            is_kwd = True
        if (not present and p.optional) or (present and obj is None and p.allow_none):
            pass
        elif present and obj is None and sig.varargs_intlist and i == 0:  # view(None): a size is not optional
            if raise_:
                raise TorchTypeError(f"{sig.name}(): argument '{p.name}' (position {pos + 1}) must be {p.type}, "
                                     f"not NoneType", code="invalid_argument")
            return False
        elif not present:
            if raise_:
                raise _missing(sig, i)
            return False
        elif _matches(p.type, obj, p.numbers):
            pass
        elif raise_:
            if is_kwd:
                raise TorchTypeError(f"{sig.name}(): argument '{p.name}' must be {p.type}, not {_tname(obj)}",
                                     code="invalid_argument")
            raise TorchTypeError(f"{sig.name}(): argument '{p.name}' (position {pos + 1}) must be {p.type}, not "
                                 f"{_tname(obj)}", code="invalid_argument")
        else:
            return False
        if not is_kwd:
            pos += 1
        elif present:
            remaining -= 1
    if remaining > 0:
        if raise_:
            known = {p.key for p in sig.params}
            for k in kwargs:
                if k not in known:
                    raise TorchTypeError(f"{sig.name}() got an unexpected keyword argument '{k}'",
                                         code="invalid_argument")
                idx = next(j for j, p in enumerate(sig.params) if p.key == k)
                if idx < nargs:
                    raise TorchTypeError(f"{sig.name}() got multiple values for argument '{k}'",
                                         code="invalid_argument")
        return False
    return True


def _option_args(text: str) -> list[tuple[str, str, bool, bool, bool]]:
    """(name, type, keyword_only, nullable) per comma-separated token; torch counts ``*`` (and ``()``'s empty
    token) as an argument when it compares argument counts."""
    inner = text.strip()[1:-1]
    out, kw = [], False
    for tok in inner.split(", "):
        if tok == "*":
            kw = True
            out.append(("*", "", True, False, False))
            continue
        decl, eq, default = tok.partition(" = ")
        type_, _, name = decl.rpartition(" ")
        out.append((name, type_, kw, default == "None", bool(eq)))
    return out


def _desc_match(arg, v) -> bool:
    """torch's invalid_arguments type check: only plain Tensor/int/bool/float/str arguments without a default
    ever match ('Number' and defaulted arguments are always marked)."""
    name, type_, _kw, _nullable, has_default = arg
    if not name or has_default or type_ not in ("Tensor", "int", "bool", "float", "str"):
        return False
    return _matches(type_, v)


def _seq_name(v) -> str:
    """torch's description of a list or tuple argument: ``list of [int, float]``, ``tuple of (int, int)``."""
    if isinstance(v, list):
        return "list of [" + ", ".join(_tname(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "tuple of (" + ", ".join(_tname(x) for x in v) + ")"
    return _tname(v)


def _arg_desc(option, args: list, kwargs: dict) -> str:
    """torch's _formattedArgDesc: each argument's type, ``!marked!`` where this option does not take it."""
    positional = [a for a in option if not a[2]] if option is not None else []
    parts = []
    for i, v in enumerate(args):
        ok = True
        name = _tname(v) if option is None else _seq_name(v)
        if option is not None:
            ok = i < len(positional) and _desc_match(positional[i], v)
        parts.append(name if ok else f"!{name}!")
    for k, v in reversed(kwargs.items()):  # torch's unordered_map of keywords gives them back in reverse
        ok = True
        name = _tname(v) if option is None else _seq_name(v)
        if option is not None:
            match = [a for a in option if a[0] == k]
            ok = bool(match) and _desc_match(match[0], v)
        parts.append(f"{k}={name}" if ok else f"!{k}={name}!")
    s = "".join(p + ", " for p in parts)
    if args:
        s = s[:-2]
    return f"({s})"


def _invalid_combination(name: str, options: tuple[str, ...], args: list, kwargs: dict) -> TorchTypeError:
    head = f"{name}() received an invalid combination of arguments - got "
    if len(options) == 1:
        msg = head + _arg_desc(_option_args(options[0]), args, kwargs) + ", but expected " + options[0]
        return TorchTypeError(msg, code="invalid_argument")
    msg = head + _arg_desc(None, args, kwargs) + ", but expected one of:\n"
    for text in options:
        msg += f" * {text}\n"
        option = _option_args(text)
        if len(args) + len(kwargs) == len(option):  # torch counts every token, '*' and 'out' included
            keyword_only = {a[0] for a in option if a[2]}
            wrong = [k for k in kwargs if k not in keyword_only]
            if wrong:
                msg += f"      didn't match because some of the keywords were incorrect: {', '.join(wrong)}\n"
            else:
                msg += "      didn't match because some of the arguments have invalid types: "
                msg += _arg_desc(option, args, kwargs) + "\n"
    return TorchTypeError(msg, code="invalid_argument")


#: check_call's per-(op, name, form) facts, pure functions of the op declarations
_CALLS: dict[tuple, tuple] = {}

#: calls ``_parse`` accepted, by signature (one of the cached ones, so its id is stable) and argument classes
#: where the classes alone decide (``Signature.by_class``), else what ``_parse`` reads of each value
#: (``_value_facts``); bounded
_ACCEPTED: set = set()
_ACCEPTED_MAX = 65536


def _remember(key) -> None:
    if key is not None and len(_ACCEPTED) < _ACCEPTED_MAX:
        _ACCEPTED.add(key)


def _value_fact(v):
    """What ``_parse`` reads of a value beyond its class (``_matches``): of a tensor, whether it is 0-d, requires
    grad and its dtype's kind; of anything else its class. None for a list, tuple or dict (its items are read)."""
    c = v.__class__
    if c is _TENSOR:  # the common case first (bound by check_call's first call)
        d = v.data
        return c, d.ndim == 0, bool(v.requires_grad), d.dtype.kind
    if c is list or c is tuple or c is dict or isinstance(v, (list, tuple, dict)):
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
            shown = spec.message_name or name
            options = spec.overloads.get("method" if method else "function")
            numbers_ok = spec.numbers_as_tensors
            sigs = None if options is None else tuple(_parsed(shown, o, numbers_ok) for o in options)
            facts = (False, shown, derived_signature(spec, shown, method), options, sigs)
        facts = _CALLS[key] = facts
    return facts


def check_call(spec, name: str, args, kwargs: dict, method: bool, facts: tuple | None = None) -> None:
    """Refuse a call the way torch's argument parser does, before the op runs. ``args`` excludes ``self``
    for a method call. Only tensor-typed parameters, arity and keywords decide; the op checks the rest.
    ``facts``: ``call_facts(spec, name, method)`` when the caller holds them."""
    if facts is None:
        facts = call_facts(spec, name, method)
    exempt, shown, derived, options, sigs = facts
    if exempt:
        return
    # first-level memos keyed by the call's facts (any of its signatures accepting is all that matters; the
    # Python attribute check reads classes only): a call without keywords whose argument classes a signature
    # that reads classes alone accepted before, one lookup; else one whose values _parse reads the same way
    # (``_value_facts``, finer than classes) as an accepted one
    fast = (id(facts), *map(type, args)) if not kwargs else None
    if fast is not None and fast in _ACCEPTED:
        return
    if _TENSOR is None:
        _tensor_class()
    if args.__class__ is not list:
        args = list(args)
    values = _value_facts(args, kwargs)
    seen = None if values is None else (id(facts), *values)
    if seen is not None and seen in _ACCEPTED:
        return
    if not method and spec.python_attribute:
        _python_attribute(spec, derived, args, kwargs)
    # the memo's key, made once for every signature: (id(sig), *classes) where the classes alone decide, else
    # (id(sig), *the facts _parse reads of each value), or None (a list or tuple value: its items are read)
    classes = (tuple(map(type, args)), tuple([(k, v.__class__) for k, v in kwargs.items()])) if kwargs else \
        (tuple(map(type, args)),)
    if options is None:
        if not args and not kwargs and spec.no_argument_overloads:
            raise _invalid_combination(shown, spec.no_argument_overloads, args, kwargs)
        if derived.by_class:
            k = (id(derived), *classes)
        else:
            k = None if values is None else (id(derived), *values)
        if k is None or k not in _ACCEPTED:
            _parse(derived, args, kwargs, True)
            _remember(k)
        _remember(seen)
        if derived.by_class:
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
            if s.by_class:
                _remember(fast)
            return
        keys.append(k)
    for s, k in zip(sigs, keys):
        if _parse(s, args, kwargs, False):
            _remember(k)
            _remember(seen)
            if s.by_class:
                _remember(fast)
            return  # one of torch's overloads takes it: the op checks the rest
    n = len(args) + len(kwargs)
    if len(sigs) == 1 and not spec.hidden_overload:
        _parse(sigs[0], args, kwargs, True)
    plausible = [s for s in sigs if s.min_args <= n <= len(s.params)]
    if len(plausible) == 1:
        _parse(plausible[0], args, kwargs, True)
    raise _invalid_combination(shown, options, args, kwargs)


def _python_attribute(spec, sig: Signature, args: list, kwargs: dict) -> None:
    attr, order = spec.python_attribute
    bound = {p.key: a for p, a in zip([p for p in sig.params if not p.keyword_only], args)}
    bound.update(kwargs)
    for key in order:
        if key in bound and not _is_tensor(bound[key]):
            raise TorchAttributeError(f"'{_tname(bound[key])}' object has no attribute '{attr}'",
                                      code="invalid_argument")


def call_form(name: str, spec) -> bool:
    """True when a program's op is a Tensor method call (``p.sub_(...)``), False for ``torch.<op>(...)``."""
    return spec.inplace or spec.method_only or name in spec.method_aliases

