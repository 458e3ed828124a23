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
ones it declares with ``tensors=``); ops that torch binds with several overloads list them below as torch
prints them (read off torch 2.13 and checked live by ``tests/engine/test_conformance_ops.py``). Only the
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

from .errors import TorchAttributeError, TorchRuntimeError, TorchTypeError, TorchValueError

# torch's allow_numbers_as_tensors list: a Python number passes where these ops want a Tensor
NUMBERS_AS_TENSORS = frozenset({
    "add", "add_", "div", "div_", "divide", "divide_", "mul", "mul_", "multiply", "multiply_", "sub", "sub_",
    "subtract", "subtract_", "true_divide", "true_divide_", "to", "copy_", "floor_divide", "floor_divide_"})

# the name torch's messages use when it differs from the op's name
MESSAGE_NAMES = {"logsigmoid": "log_sigmoid", "nll_loss": "nll_loss_nd", "cross_entropy": "cross_entropy_loss"}

# torch name of a varargs size parameter, and whether torch requires it
_VARARGS = {"zeros": "size", "ones": "size", "empty": "size", "rand": "size", "randn": "size", "view": "size",
            "reshape": "shape", "expand": "size", "repeat": "repeats", "permute": "dims"}

# torch's types of non-tensor parameters of ops bound with one signature (checked like a Tensor parameter:
# ``unsqueeze(): argument 'dim' (position 1) must be int, not float``); other parameters are the op's to check
PARAM_TYPES: dict[str, dict[str, str]] = {
    "unsqueeze": {"dim": "int"}, "transpose": {"dim0": "int", "dim1": "int"}, "select": {"dim": "int", "index": "int"},
    "index_select": {"dim": "int"}, "gather": {"dim": "int"}, "cumsum": {"dim": "int"},
    "chunk": {"chunks": "int", "dim": "int"}, "unbind": {"dim": "int"},
    "flatten": {"start_dim": "int", "end_dim": "int"}, "amax": {"dim": "tuple of ints", "keepdim": "bool"},
    "amin": {"dim": "tuple of ints", "keepdim": "bool"}, "logsumexp": {"dim": "tuple of ints", "keepdim": "bool"},
    "argmax": {"dim": "int", "keepdim": "bool"}, "argmin": {"dim": "int", "keepdim": "bool"},
}

# torch functions written in Python (torch.nn.functional, torch.functional): a non-tensor argument fails on
# its first attribute access, an AttributeError ('NoneType' object has no attribute 'size'); parameters in the
# order the Python code touches them
PYTHON_ATTRIBUTE = {op: ("size", ("target", "input")) for op in (
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits")}
PYTHON_ATTRIBUTE.update({"softmax": ("softmax", ("self",)), "log_softmax": ("log_softmax", ("self",)),
                         "split": ("split", ("self",)), "norm": ("layout", ("self",))})

# ops only bound as Tensor methods in torch: a program calls them as methods
METHOD_ONLY = frozenset({"view", "expand", "expand_as", "repeat", "contiguous", "float", "double", "long", "bool",
                         "to", "copy_", "fill_", "add_", "sub_", "mul_", "div_", "pow_", "masked_fill_",
                         "clamp_min_", "clamp_max_", "clamp_", "zero_", "abs_", "neg_", "exp_", "log_", "sqrt_",
                         "sigmoid_", "tanh_", "relu_", "scatter_", "scatter_add_", "index_add_", "index_copy_",
                         "index_fill_", "uniform_", "normal_", "bernoulli_", "random_",
                         "exponential_", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor",
                         "view_as", "reshape_as", "__radd__", "__rmul__"})

# ops torch binds with several overloads where our derived signature stands for them all: none of torch's is
# plausible for a call without any argument, which torch answers with the list of them (one argument, a
# keyword, makes one plausible and its own message, "missing ... size", is the derived signature's)
_RANDOM_OPTIONS = tuple(
    f"(tuple of ints size, *, {gen}Tensor out = None, torch.dtype dtype = None, torch.layout layout = None, "
    f"torch.device device = None, bool pin_memory = False, bool requires_grad = False)"
    for gen in ("torch.Generator generator, ", ""))
NO_ARGUMENT_OVERLOADS: dict[str, tuple[str, ...]] = {"rand": _RANDOM_OPTIONS, "randn": _RANDOM_OPTIONS}

# indexing and the reflected operators are not torch functions: no parsing beyond the op's own; torch.normal's
# four overloads take a number or a tensor for mean and std: the op tells them apart and checks them itself
_EXEMPT = frozenset({"getitem", "setitem", "rpow", "rtruediv", "rmatmul", "tensor", "normal"})

# torch's visible overloads of the ops bound with several signatures (``has_hidden``: torch also has a
# hidden, deprecated overload, so even one visible signature takes the overload path)
_HIDDEN = frozenset({"add", "sub", "add_", "sub_", "copy_"})
OVERLOADS: dict[str, dict[str, tuple[str, ...]]] = {
    "add": {"function": ("(Tensor input, Tensor other, *, Number alpha = 1, Tensor out = None)",),
            "method": ("(Tensor other, *, Number alpha = 1)",)},
    "sub": {"function": ("(Tensor input, Tensor other, *, Number alpha = 1, Tensor out = None)",),
            "method": ("(Tensor other, *, Number alpha = 1)",)},
    "add_": {"method": ("(Tensor other, *, Number alpha = 1)",)},
    "sub_": {"method": ("(Tensor other, *, Number alpha = 1)",)},
    "copy_": {"method": ("(Tensor other, bool non_blocking = False)",)},
    "floor_divide": {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                                  "(Tensor input, Number other)"),
                     "method": ("(Tensor other)", "(Number other)")},
    "pow": {"function": ("(Tensor input, Tensor exponent, *, Tensor out = None)",
                         "(Number self, Tensor exponent, *, Tensor out = None)",
                         "(Tensor input, Number exponent, *, Tensor out = None)"),
            "method": ("(Tensor exponent)", "(Number exponent)")},
    "pow_": {"method": ("(Tensor exponent)", "(Number exponent)")},
    "div": {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                         "(Tensor input, Tensor other, *, str rounding_mode, Tensor out = None)",
                         "(Tensor input, Number other, *, str rounding_mode)"),
            "method": ("(Tensor other)", "(Tensor other, *, str rounding_mode)",
                       "(Number other, *, str rounding_mode)")},
    "div_": {"method": ("(Tensor other)", "(Tensor other, *, str rounding_mode)",
                        "(Number other, *, str rounding_mode)")},
    "rsub": {"function": ("(Tensor input, Tensor other, *, Number alpha = 1)",
                          "(Tensor input, Number other, Number alpha = 1)")},
    "addmm": {"function": ("(Tensor input, Tensor mat1, Tensor mat2, *, Number beta = 1, Number alpha = 1, "
                           "Tensor out = None)",
                           "(Tensor input, Tensor mat1, Tensor mat2, torch.dtype out_dtype, *, Number beta = 1, "
                           "Number alpha = 1, Tensor out = None)"),
              "method": ("(Tensor mat1, Tensor mat2, *, Number beta = 1, Number alpha = 1)",)},
    "bmm": {"function": ("(Tensor input, Tensor mat2, *, Tensor out = None)",
                         "(Tensor input, Tensor mat2, torch.dtype out_dtype, *, Tensor out = None)")},
    "mm": {"function": ("(Tensor input, Tensor mat2, *, Tensor out = None)",
                        "(Tensor input, Tensor mat2, torch.dtype out_dtype, *, Tensor out = None)")},
    "clamp": {"function": ("(Tensor input, Tensor min = None, Tensor max = None, *, Tensor out = None)",
                           "(Tensor input, Number min = None, Number max = None, *, Tensor out = None)"),
              "method": ("(Tensor min = None, Tensor max = None)", "(Number min = None, Number max = None)")},
    "clamp_": {"method": ("(Tensor min = None, Tensor max = None)", "(Number min = None, Number max = None)")},
    "clamp_max": {"function": ("(Tensor input, Tensor max, *, Tensor out = None)",
                               "(Tensor input, Number max, *, Tensor out = None)"),
                  "method": ("(Tensor max)", "(Number max)")},
    "clamp_max_": {"method": ("(Tensor max)", "(Number max)")},
    "clamp_min": {"function": ("(Tensor input, Tensor min, *, Tensor out = None)",
                               "(Tensor input, Number min, *, Tensor out = None)"),
                  "method": ("(Tensor min)", "(Number min)")},
    "clamp_min_": {"method": ("(Tensor min)", "(Number min)")},
    "fill_": {"method": ("(Tensor value)", "(Number value)")},
    "bernoulli_": {"method": ("(Tensor p, *, torch.Generator generator = None)",
                              "(float p = 0.5, *, torch.Generator generator = None)")},
    "lerp": {"function": ("(Tensor input, Tensor end, Tensor weight, *, Tensor out = None)",
                          "(Tensor input, Tensor end, Number weight, *, Tensor out = None)"),
             "method": ("(Tensor end, Tensor weight)", "(Tensor end, Number weight)")},
    "lerp_": {"method": ("(Tensor end, Tensor weight)", "(Tensor end, Number weight)")},
    "masked_fill": {"function": ("(Tensor input, Tensor mask, Tensor value)",
                                 "(Tensor input, Tensor mask, Number value)"),
                    "method": ("(Tensor mask, Tensor value)", "(Tensor mask, Number value)")},
    "masked_fill_": {"method": ("(Tensor mask, Tensor value)", "(Tensor mask, Number value)")},
    "max": {"function": ("(Tensor input, *, Tensor out = None)", "(Tensor input, Tensor other, *, Tensor out = None)",
                         "(Tensor input, int dim, bool keepdim = False, *, tuple of Tensors out = None)"),
            "method": ("()", "(Tensor other)", "(int dim, bool keepdim = False)")},
    "min": {"function": ("(Tensor input, *, Tensor out = None)", "(Tensor input, Tensor other, *, Tensor out = None)",
                         "(Tensor input, int dim, bool keepdim = False, *, tuple of Tensors out = None)"),
            "method": ("()", "(Tensor other)", "(int dim, bool keepdim = False)")},
    "where": {"function": ("(Tensor condition)",
                           "(Tensor condition, Tensor input, Tensor other, *, Tensor out = None)",
                           "(Tensor condition, Number self, Tensor other)",
                           "(Tensor condition, Tensor input, Number other)",
                           "(Tensor condition, Number self, Number other)"),
              "method": ("(Tensor condition, Tensor other)", "(Tensor condition, Number other)")},
    "view": {"method": ("(torch.dtype dtype)", "(tuple of ints size)")},
    "sum": {"function": ("(Tensor input, *, torch.dtype dtype = None)",
                         "(Tensor input, tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None, "
                         "Tensor out = None)"),
            "method": ("(*, torch.dtype dtype = None)",
                       "(tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None)")},
}
OVERLOADS.update({
    "mean": {"function": ("(Tensor input, *, torch.dtype dtype = None, Tensor out = None)",
                          "(Tensor input, tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None, "
                          "Tensor out = None)"),
             "method": ("(*, torch.dtype dtype = None)",
                        "(tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None)")},
    "prod": {"function": ("(Tensor input, *, torch.dtype dtype = None)",
                          "(Tensor input, int dim, bool keepdim = False, *, torch.dtype dtype = None, "
                          "Tensor out = None)"),
             "method": ("(*, torch.dtype dtype = None)",
                        "(int dim, bool keepdim = False, *, torch.dtype dtype = None)")},
    "sort": {"function": ("(Tensor input, *, bool stable, int dim = -1, bool descending = False, "
                          "tuple of Tensors out = None)",
                          "(Tensor input, int dim = -1, bool descending = False, *, tuple of Tensors out = None)"),
             "method": ("(*, bool stable, int dim = -1, bool descending = False)",
                        "(int dim = -1, bool descending = False)")},
    "squeeze": {"function": ("(Tensor input)", "(Tensor input, int dim)", "(Tensor input, tuple of ints dim)"),
                "method": ("()", "(int dim)", "(tuple of ints dim)")},
    "round": {"function": ("(Tensor input, *, Tensor out = None)",
                           "(Tensor input, *, int decimals, Tensor out = None)"),
              "method": ("()", "(*, int decimals)")},
    "narrow": {"function": ("(Tensor input, int dim, Tensor start, int length)",
                            "(Tensor input, int dim, int start, int length)"),
               "method": ("(int dim, Tensor start, int length)", "(int dim, int start, int length)")},
})
_LINSPACE_KW = ("*, Tensor out = None, torch.dtype dtype = None, torch.layout layout = None, torch.device device = "
                "None, bool pin_memory = False, bool requires_grad = False)")
OVERLOADS["linspace"] = {"function": tuple(f"({a} start, {b} end, int steps, {_LINSPACE_KW}" for a, b in (
    ("Tensor", "Tensor"), ("Number", "Tensor"), ("Tensor", "Number"), ("Number", "Number")))}
OVERLOADS.update({
    "xlogy": {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                           "(Number self, Tensor other, *, Tensor out = None)",
                           "(Tensor input, Number other, *, Tensor out = None)"),
              "method": ("(Tensor other)", "(Number other)")},
    "scatter": {"function": ("(Tensor input, int dim, Tensor index, Tensor src, *, Tensor out = None)",
                             "(Tensor input, int dim, Tensor index, Tensor src, *, str reduce, Tensor out = None)",
                             "(Tensor input, int dim, Tensor index, Number value, *, Tensor out = None)",
                             "(Tensor input, int dim, Tensor index, Number value, *, str reduce, Tensor out = None)"),
                "method": ("(int dim, Tensor index, Tensor src)", "(int dim, Tensor index, Tensor src, *, str reduce)",
                           "(int dim, Tensor index, Number value)",
                           "(int dim, Tensor index, Number value, *, str reduce)")},
})
OVERLOADS["scatter_"] = {"method": OVERLOADS["scatter"]["method"]}
OVERLOADS["remainder"] = {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                                       "(Number self, Tensor other)",
                                       "(Tensor input, Number other, *, Tensor out = None)"),
                          "method": ("(Tensor other)", "(Number other)")}
for _q in ("quantile", "nanquantile"):
    OVERLOADS[_q] = {
        "function": ('(Tensor input, Tensor q, int dim = None, bool keepdim = False, *, str interpolation = "linear", '
                     'Tensor out = None)',
                     '(Tensor input, float q, int dim = None, bool keepdim = False, *, str interpolation = "linear", '
                     'Tensor out = None)'),
        "method": ('(Tensor q, int dim = None, bool keepdim = False, *, str interpolation = "linear")',
                   '(float q, int dim = None, bool keepdim = False, *, str interpolation = "linear")')}
OVERLOADS["tensor_split"] = {
    "function": ("(Tensor input, tuple of ints indices, int dim = 0)",
                 "(Tensor input, Tensor tensor_indices_or_sections, int dim = 0)",
                 "(Tensor input, int sections, int dim = 0)"),
    "method": ("(tuple of ints indices, int dim = 0)", "(Tensor tensor_indices_or_sections, int dim = 0)",
               "(int sections, int dim = 0)")}
OVERLOADS["repeat_interleave"] = {
    "function": ("(Tensor input, Tensor repeats, int dim = None, *, int output_size = None)",
                 "(Tensor repeats, *, int output_size = None)",
                 "(Tensor input, int repeats, int dim = None, *, int output_size = None)"),
    "method": ("(Tensor repeats, int dim = None, *, int output_size = None)",
               "(int repeats, int dim = None, *, int output_size = None)")}
OVERLOADS["index_fill"] = {"function": ("(Tensor input, int dim, Tensor index, Tensor value)",
                                        "(Tensor input, int dim, Tensor index, Number value)"),
                           "method": ("(int dim, Tensor index, Tensor value)", "(int dim, Tensor index, Number value)")}
OVERLOADS["index_fill_"] = {"method": OVERLOADS["index_fill"]["method"]}
for _red in ("std", "var"):
    OVERLOADS[_red] = {
        "function": ("(Tensor input, tuple of ints dim, bool unbiased = True, bool keepdim = False, *, "
                     "Tensor out = None)",
                     "(Tensor input, tuple of ints dim = None, *, Number correction = None, bool keepdim = False, "
                     "Tensor out = None)",
                     "(Tensor input, bool unbiased = True)"),
        "method": ("(tuple of ints dim, bool unbiased = True, bool keepdim = False)",
                   "(tuple of ints dim = None, *, Number correction = None, bool keepdim = False)",
                   "(bool unbiased = True)")}
for _cmp in ("eq", "ne", "gt", "ge", "lt", "le"):
    OVERLOADS[_cmp] = {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                                    "(Tensor input, Number other, *, Tensor out = None)"),
                       "method": ("(Tensor other)", "(Number other)")}


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


#: derived_signature's and parse_signature's results (pure functions of the static op tables)
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
    numbers_ok = name in NUMBERS_AS_TENSORS
    kw_only = varargs = False
    for i, p in enumerate(spec.params):
        if method and i == 0:
            continue
        if p.kind == p.VAR_KEYWORD:
            continue
        if p.kind == p.VAR_POSITIONAL:  # f(2, 3) or f((2, 3)): any number of positional values
            vname = _VARARGS.get(spec.name, p.name)
            # (zeros(*sizes, size=...): torch's size may also come by keyword, one parameter under one name)
            keyword = any(q.name == vname and q.kind == q.KEYWORD_ONLY for q in spec.params)
            params.append(Param(vname, vname if keyword else p.name, "", spec.name not in _VARARGS, False, False))
            kw_only = varargs = True
            continue
        if varargs and p.kind == p.KEYWORD_ONLY and p.name == _VARARGS.get(spec.name):
            continue  # (the varargs parameter's keyword form, above)
        kw_only = kw_only or p.kind == p.KEYWORD_ONLY
        shown = "input" if (i == 0 and p.name == "self" and not method) else p.name
        if p.name in spec.tensors:
            type_ = "Tensor"
        elif p.name in spec.tensor_lists:
            type_ = "tuple of Tensors"
        else:
            type_ = PARAM_TYPES.get(spec.name, {}).get(p.name, "")
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
                where = "" if is_kwd else f" (position {pos + 1})"
                raise TorchTypeError(f"{sig.name}(): argument '{p.name}'{where} must be {p.type or 'tuple of ints'}, "
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


#: check_call's per-(op, name, form) facts, pure functions of the static op tables
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
        if name in _EXEMPT or spec.name in _EXEMPT or name.startswith("__"):
            facts = (True, None, None, None, None)
        else:
            shown = MESSAGE_NAMES.get(name, name)
            options = OVERLOADS.get(spec.name, {}).get("method" if method else "function")
            numbers_ok = name in NUMBERS_AS_TENSORS
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
    _check_classes(spec, name, args, kwargs, method, facts)
    if _out_of_int64(args) or (kwargs and _out_of_int64(kwargs.values())):
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
    sig = derived if not sigs else next((s for s in sigs if _parse(s, args, kwargs, False)), sigs[0])
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


def _check_classes(spec, name: str, args, kwargs: dict, method: bool, facts: tuple) -> None:
    exempt, shown, derived, options, sigs = facts
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
    if not method and spec.name in PYTHON_ATTRIBUTE:
        _python_attribute(spec, derived, args, kwargs)
    # the memo's key, made once for every signature: (id(sig), *classes) where the classes alone decide, else
    # (id(sig), *the facts _parse reads of each value), or None (a list or tuple value: its items are read)
    classes = (tuple(map(type, args)), tuple([(k, v.__class__) for k, v in kwargs.items()])) if kwargs else \
        (tuple(map(type, args)),)
    if options is None:
        if not args and not kwargs and spec.name in NO_ARGUMENT_OVERLOADS:
            raise _invalid_combination(shown, NO_ARGUMENT_OVERLOADS[spec.name], args, kwargs)
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
    if len(sigs) == 1 and spec.name not in _HIDDEN:
        _parse(sigs[0], args, kwargs, True)
    plausible = [s for s in sigs if s.min_args <= n <= len(s.params)]
    if len(plausible) == 1:
        _parse(plausible[0], args, kwargs, True)
    raise _invalid_combination(shown, options, args, kwargs)


def _python_attribute(spec, sig: Signature, args: list, kwargs: dict) -> None:
    attr, order = PYTHON_ATTRIBUTE[spec.name]
    bound = {p.key: a for p, a in zip([p for p in sig.params if not p.keyword_only], args)}
    bound.update(kwargs)
    for key in order:
        if key in bound and not _is_tensor(bound[key]):
            raise TorchAttributeError(f"'{_tname(bound[key])}' object has no attribute '{attr}'",
                                      code="invalid_argument")


def call_form(name: str, spec) -> bool:
    """True when a program's op is a Tensor method call (``p.sub_(...)``), False for ``torch.<op>(...)``."""
    return spec.inplace or name in METHOD_ONLY or spec.name in METHOD_ONLY

