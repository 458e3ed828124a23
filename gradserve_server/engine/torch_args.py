"""torch's Python argument parser (``torch/csrc/utils/python_arg_parser.cpp``): signatures, the check of a call
against them and torch's messages, with no op table and nothing of the engine.

The server's ``engine.signature`` holds the op table's facts and memos and calls this module; the client
(``gradserve.torch``, which never imports the server) has the same file as ``gradserve/torch/_torch_args.py``,
a link to this one, and checks a call against the signatures the op catalog serves, so that a wrong argument
raises torch's TypeError at the torch line. Each side tells this module what a tensor is (``bind``); errors
are ``ArgumentError`` (torch's exception class name and message), which each side raises as its own.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

import numpy as np


class ArgumentError(Exception):
    """torch's exception for a call its parser refuses: ``kind`` is the class name (TypeError, AttributeError)."""

    def __init__(self, message: str, kind: str = "TypeError"):
        super().__init__(message)
        self.message, self.kind = message, kind


#: the tensor class(es) and what the parser reads of a tensor: (0-d, requires grad, dtype kind); ``bind`` sets them
TENSOR_TYPES: tuple = ()
DTYPE_TYPES: tuple = (str,)


def _no_facts(v):
    raise RuntimeError("torch_args.bind() was not called")


_facts = _no_facts


def bind(tensor_types: tuple, facts, dtype_types: tuple = (str,)) -> None:
    """Say what a tensor is: its classes and ``facts(t) -> (is 0-d, requires grad, dtype kind)``."""
    global TENSOR_TYPES, DTYPE_TYPES, _facts
    TENSOR_TYPES, DTYPE_TYPES, _facts = tuple(tensor_types), tuple(dtype_types), facts


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

    def decided_by(self, classes: tuple, keywords: tuple = ()) -> bool:
        """Whether a call whose positional arguments are of ``classes`` and whose keywords are ``keywords``
        ((key, class) pairs) is decided by these classes alone: no value-reading parameter (``_VALUE_TYPES``)
        receives a tensor (a 0-d one passes for a number) or, where it takes ints, a list or tuple (its items
        are read). ``add(x, y)`` so, though add's ``alpha`` is a Number: its tensors meet Tensor parameters."""
        if self.by_class:
            return True
        if self.varargs_intlist:
            return False
        by_key = {p.key: p for p in self.params}
        for p, c in (*zip((p for p in self.params if not p.keyword_only), classes),
                     *((by_key.get(k), c) for k, c in keywords)):
            t = "" if p is None else p.type
            if t in _VALUE_TYPES and (issubclass(c, TENSOR_TYPES)
                                      or (t == "tuple of ints" and issubclass(c, (list, tuple)))):
                return False
        return True


#: parameter types whose check looks at the value, not only its class (a 0-d tensor passes for a Number)
_VALUE_TYPES = frozenset({"Number", "int", "tuple of ints"})

def _tname(v) -> str:
    # a dtype object is torch's class (the engine's dtypes are names, str, and show as str)
    return "torch.dtype" if isinstance(v, DTYPE_TYPES) and not isinstance(v, str) else type(v).__name__


def _is_tensor(v) -> bool:
    return isinstance(v, TENSOR_TYPES)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not _is_tensor(v)


def _matches(type_: str, v, numbers_ok: bool = False) -> bool:
    """torch's parameter check, for the types the op table uses ('' and unknown types accept anything)."""
    if type_ == "Tensor":
        return _is_tensor(v) or (numbers_ok and _is_number(v))
    if type_ == "Number":
        return _is_number(v) or (_is_tensor(v) and _facts(v)[0] and not _facts(v)[1])
    if type_ == "int":
        return (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            _is_tensor(v) and _facts(v)[0] and _facts(v)[2] in "iu")
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
        return isinstance(v, DTYPE_TYPES)
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


# ----- torch's messages ---------------------------------------------------------------------------------

def _missing(sig: Signature, idx: int) -> ArgumentError:
    names = [f'"{p.name}"' for p in sig.params[idx:] if not p.optional]
    n = len(names)
    return ArgumentError(f"{sig.name}() missing {n} required positional argument{'s' if n == 1 else ''}: "
                          f"{', '.join(names)}")


def _extra(sig: Signature, nargs: int) -> ArgumentError:
    mx, mn = sig.max_pos, sig.min_args
    if mn != mx:
        return ArgumentError(f"{sig.name}() takes from {mn} to {mx} positional arguments but {nargs} were given")
    return ArgumentError(f"{sig.name}() takes {mx} positional argument{'' if mx == 1 else 's'} but {nargs} "
                          f"{'was' if nargs == 1 else 'were'} given")


def parse(sig: Signature, args: list, kwargs: dict, raise_: bool) -> bool:
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
                where = "" if is_kwd else f" (position {pos + 1})"
                raise ArgumentError(f"{sig.name}(): argument '{p.name}'{where} must be {p.type or 'tuple of ints'}, "
                                    f"not NoneType")
            return False
        elif not present:
            if raise_:
                raise _missing(sig, i)
            return False
        elif _matches(p.type, obj, p.numbers):
            if p.type == "tuple of Tensors":  # (torch's parser refuses an element at once, whatever the overloads)
                bad = next((j for j, x in enumerate(obj) if not _is_tensor(x)), None)
                if bad is not None:
                    raise ArgumentError(f"expected Tensor as element {bad} in argument {i}, but got "
                                        f"{_tname(obj[bad])}")
        elif raise_:
            if is_kwd:
                raise ArgumentError(f"{sig.name}(): argument '{p.name}' must be {p.type}, not {_tname(obj)}")
            raise ArgumentError(f"{sig.name}(): argument '{p.name}' (position {pos + 1}) must be {p.type}, not "
                                 f"{_tname(obj)}")
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
                    raise ArgumentError(f"{sig.name}() got an unexpected keyword argument '{k}'")
                idx = next(j for j, p in enumerate(sig.params) if p.key == k)
                if idx < nargs:
                    raise ArgumentError(f"{sig.name}() got multiple values for argument '{k}'")
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


def _invalid_combination(name: str, options: tuple[str, ...], args: list, kwargs: dict) -> ArgumentError:
    head = f"{name}() received an invalid combination of arguments - got "
    if len(options) == 1:
        msg = head + _arg_desc(_option_args(options[0]), args, kwargs) + ", but expected " + options[0]
        return ArgumentError(msg)
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
    return ArgumentError(msg)


def refuse(shown: str, derived: Signature, options, sigs, hidden: bool, args: list, kwargs: dict,
           no_argument_overloads: tuple = ()) -> None:
    """The parse of a call no memo has seen: returns when one of the op's signatures takes it (the op checks
    the rest), else raises torch's ArgumentError. ``options``: torch's overload texts (None: the op is bound
    with one signature, ``derived``), ``sigs`` their parsed signatures; ``hidden``: torch also has a hidden
    overload (even one visible signature takes the overload path)."""
    if options is None:
        if not args and not kwargs and no_argument_overloads:
            raise _invalid_combination(shown, no_argument_overloads, args, kwargs)
        parse(derived, args, kwargs, True)
        return
    for s in sigs:
        if parse(s, args, kwargs, False):
            return
    n = len(args) + len(kwargs)
    if len(sigs) == 1 and not hidden:
        parse(sigs[0], args, kwargs, True)
    plausible = [s for s in sigs if s.min_args <= n <= len(s.params)]
    if len(plausible) == 1:
        parse(plausible[0], args, kwargs, True)
    raise _invalid_combination(shown, options, args, kwargs)


def python_attribute(attribute: str, order: tuple, sig: Signature, args: list, kwargs: dict) -> None:
    """A torch function written in Python fails on its first attribute access of a non-tensor argument."""
    bound = {p.key: a for p, a in zip([p for p in sig.params if not p.keyword_only], args)}
    bound.update(kwargs)
    for key in order:
        if key in bound and not _is_tensor(bound[key]):
            raise ArgumentError(f"'{_tname(bound[key])}' object has no attribute '{attribute}'", "AttributeError")


def signature_json(sig: Signature) -> dict:
    """A signature as JSON (the op catalog's ``parser``)."""
    return {"name": sig.name, "varargs_intlist": sig.varargs_intlist,
            "params": [[p.name, p.key, p.type, p.optional, p.allow_none, p.keyword_only, p.numbers]
                       for p in sig.params]}


def signature_from_json(data: dict) -> Signature:
    return Signature(data["name"], tuple(Param(*p) for p in data["params"]), data["varargs_intlist"])
