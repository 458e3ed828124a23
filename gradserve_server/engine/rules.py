"""torch's refusals that depend on arguments' metadata only: the evaluator of the op table's ``checks``
declarations, shared by the engine (``registry.broken_check`` raises them where an op detects a refusal) and the
client (``gradserve.torch._checks`` raises them at the line that made the call; the client links this file, as it
links ``printing`` and ``torch_args``, so it imports nothing). Each side binds what it knows of a tensor (``bind``):
the client leaves a check whose facts it does not know (a shape or dtype the server has not said) to the server,
which raises the same error; the engine knows every fact.

A declaration is ``"rule(arguments)[=value][ if|unless names] | ExceptionClass: message"``; ``if a,b``: only when
one of them is given (not None); ``unless a,b``: only when none is; an argument written as a number is that number.
``{...}`` in the message stands for what the rule fills in. The rules (a failure fills ``{dtype}`` etc. as listed):

    dtype(a)=d1,d2,...       a tensor ``a`` has one of these dtypes (``floating``: any float; ``=!d1,...``: none of
                             them) -> {dtype} (ScalarType name), {cpp} (C++ type name), {tensor_type} (legacy)
    index_dtype(a)=d1,...    the same when ``a`` has elements (torch checks no dtype of an empty index)
    dtype_lastdim(a,dim)=... the same when ``dim`` is ``a``'s last dimension (softmax's kernels are named so)
    dtype_innerdim(a,dim)=.. the same when it is another
    class_target(input,target)  a loss's target is class indices (int64, uint8) or probabilities (a float tensor
                             of the input's shape) -> {dtype}
    same_dtype(a,b)          tensors ``a`` and ``b`` have one dtype -> {a}, {b} (ScalarType names)
    same_cpp_dtype(a,b)      the same -> {a}, {b} (C++ type names: ``long int``)
    matmul_dtype(a,b)=form   a matrix product's operands have one dtype (form ``mm``, ``linear``: {a}, {b} as C++
                             type names; ``dot``, ``mv`` (a matrix by a vector), ``batched`` (by a stack of
                             matrices), ``bmm`` (stacks of one size), ``linear_batched``: ScalarType names), when
                             their shapes multiply; of mixed ranks (3+ dimensions by 1 or 2), the route torch's
                             matmul takes (``_matmul_route``: folded into ``mv``/``mm``, the operands swapped where
                             the right one is the larger, or ``batched``), which reads requires_grad and strides
    bool_product(a,b)=form   not two bool tensors of a matrix product of that form (as matmul_dtype's) whose sizes
                             multiply: torch's CPU kernels (dot, addmv, addmm, bmm) have none for bool; ``batched``:
                             not a bool left operand (bmm's kernel is chosen by it, before the dtypes are compared)
    min_dims(a)=n            ``a`` has at least n dimensions
    max_dims(a)=n            ``a`` has at most n dimensions -> {dims} (its number)
    square(a)                ``a``'s last two dimensions are equal -> {rows}, {cols}
    given(a,b)               one of them is given
    number_bounds_cast(a,b,...)  each Python number among b... gives a result type ``a`` can hold (clamp_) ->
                             {result}, {cpp}
    bool_bounds(a,min,max)=form  not a bool ``a`` clamped by bool bounds (form: ``min``/``max`` a number alone,
                             ``both`` numbers, ``tensors``)
    nonempty(a)              ``a`` has elements
    nonempty_dim(a,dim)      ``a`` has elements along ``dim`` (an int) -> {dim}
    k_in_range(a,k,dim)      0 <= k <= a.size(dim) (dim: -1 when not given)
    conv_input(input)=n      an n-d convolution's input has n+1 (unbatched) or n+2 dimensions -> {unbatched},
                             {batched}, {shape}
    padding_mode(padding)    a convolution's padding, when a string, is ``same`` or ``valid`` -> {padding}
    conv_same_weight(input,weight,padding)=n  padding ``same``: the input (as batched) has the weight's dimensions
                                         -> {dims}, {weight}, {got}, {input}
    conv_same_broadcast(weight,a,padding)  padding ``same``: ``a`` (stride, dilation) is an int, or one or
                                         weight.dim() - 2 ints -> {dims}
    conv_same_strided(stride,padding)    padding ``same``: every stride is 1
    conv_stride(weight,stride,padding)=n an n-d convolution's stride (an int, or n ints) fits the weight's
                                         dimensions -> {k} (the weight's spatial dimensions), {stride} (as n ints)
    conv_weight(input,weight,padding)=n  the input (as batched) has the weight's dimensions -> {dims}, {weight},
                                         {got}, {input}
    conv_kernel(input,weight,padding,dilation,stride)=n  the (padded) input is no smaller than the (dilated) kernel ->
                                         {input}, {kernel} (the sizes joined by `` x ``)
    nonempty_list(tensors)   a list of tensors is not empty
    dim_range(a,dim)         ``dim`` (an int, or None: not given) indexes ``a`` (a 0-d tensor as one dimension),
                             for an op that checks it before its other checks -> {low}, {high}, {dim}
    list_dim(tensors,dim)    ``dim`` indexes the first tensor of the list (one with elements, as torch.cat skips
                             1-d empty ones) -> {low}, {high}, {dim}
    cat_zero_dim(tensors)    no tensor of the list is 0-d -> {i} (the first's place)
    cat_ranks(tensors)       the first tensor that does not fit the first does not have its dimensions -> {a}, {b}
    cat_sizes(tensors,dim)   ... nor its sizes but along ``dim`` -> {dim}, {want}, {got}, {i} (the tensor's number)
    stack_shapes(tensors)    the tensors have one shape -> {first}, {other}, {i}
    zero_dim_index(a,index)=zero|int|slice  a 0-d ``a`` is not indexed by one int (0; another -> {index}) or one
                             slice, not in a tuple
    index_count(a,index)     an index (the client's wraps its ``key``) names at most ``a``'s dimensions (an int,
                             a slice, an int list or tensor one each; a bool tensor its dimensions) -> {dims}
    index_bounds(a,index)    each int of an index is in range of the dimension it selects (an int tensor or list
                             spans one, a bool one its dimensions, Ellipsis what the others leave) -> {index}, {dim}
                             (its place in the index: every item counts one, Ellipsis and None too), {size}
    index_masks(a,index)     each bool (or uint8) mask of an index has the sizes of the dimensions it covers, in
                             ``a`` as the index's ints, slices and Nones leave it -> {mask}, {i} (the mask's
                             dimension), {shape} (that tensor's), {dim} (its dimension)
    index_in_dim(a,dim,index)  an int ``index`` is in range of ``a``'s (at least 1-d) dimension ``dim`` -> {index},
                             {shape}, {dim} (wrapped)
    narrow_bounds(a,dim,start,length)=part  narrow's: ``length`` (part) is not negative; ``start`` in range of the
                             dimension (part ``start``: {low}, {high}, {start}); and ``end``: start + length fits in it
                             -> {start} (wrapped), {length}, {size}
    gather_shapes(a,dim,index)=part  a non-empty ``index`` has ``a``'s dimensions (part ``ranks``; 0-d counts as 1-d)
                             and (``sizes``) no larger sizes but along ``dim`` -> {dim}, {index}, {self}, {along}
    zero_dim_dims(a,dims)=given|wrapped  a 0-d ``a`` is given no dimension (roll's, unflatten's) -> {dim} (the first
                             as given, or as wrapped when in range)
    index_tensor_dtypes(index)  the tensors of an index are int64, int32, uint8 or bool
    expand_rank(a,size)      ``size`` (a list, or a tensor's shape) has at least ``a``'s dimensions -> {tensor_type},
                             {shape}, {size} (joined by ``, ``), {n} (the sizes' number), {dims}
    expand_size(a,size)      ``a`` expands to ``size`` (a -1 keeps a size) -> {want}, {have}, {dim}, {target},
                             {shape}
    permute_rank(a,dims)     ``dims`` has ``a``'s dimensions -> {rank}, {n}
    permute_unique(a,dims)   ``dims`` has each dimension once
    reduce_dims_unique(a,dim)   a reduction's dims (a list) name each dimension once -> {dim}
    unflatten_sizes(a,dim,sizes)  ``sizes`` (one -1 at most) multiply up to ``a``'s size along ``dim`` -> {sizes},
                             {dim}, {size}
    dim_order(a,start,end)   dimension ``start`` of ``a`` does not come after ``end`` (as wrapped)
    broadcasts(a,b)          the shapes of ``a`` and ``b`` broadcast, in that order -> {a}, {b}, {dim}
    dims(a)=n                ``a`` has n dimensions -> {dims} (its number)
    ranks(a,b)=n,m           ``a`` has n dimensions and ``b`` m -> {a}, {b} (their numbers)
    min_ranks(a,b)=n         ``a`` and ``b`` have at least n dimensions each -> {a}, {b} (their numbers)
    repeats_cover(a,repeats) ``repeats`` has at least ``a``'s dimensions
    linear_shapes(input,weight)[=batched]  the input's last size is the weight's (2-d) second -> {rows}, {k}, {wk},
                             {out}; ``batched``: where matmul's route is bmm -> {batch}, {k}, {got}
    bmm_shapes(a,b)          3-d ``b`` is [a.size(0), a.size(2), ...] -> {batch}, {k}, {got}
    batch_sizes(input,target)    a target has the (batched) input's batch size (a 0-d one: 0) -> {a}, {b}
    multi_target(input,target)[=probabilities]  a target for a 2-d input has one dimension (``probabilities``: or
                             the input's shape, which cross_entropy reads as class probabilities)
    spatial_target(input,target)=part  the target of an input of 3 or more dimensions (N, C, d1...) is (N, d1...)
                             (part ``size`` -> {want}, {got}; of 4: ``rank4`` 3-d -> {dims}, ``size4`` -> {input},
                             {target})
    probability_target(input,target)  a target of the input's shape (probabilities) is floating -> {dtype}
    same_size(input,target)  ``target`` has ``input``'s shape -> {a}, {b}
    probability_ignore(input,target,ignore_index)  a target of the input's shape (probabilities) comes with no
                             ``ignore_index`` (a negative one: none)
    class_dim(input,target)=part  cross_entropy's class dimension (1, of a 0-d input too; 0 of a 1-d one) is there:
                             part ``probabilities``, a 0-d input and target; ``scalar``, a 0-d input and a target of
                             another shape; ``vector``: a 1-d input takes a 1-d target of one element (or of its
                             shape: probabilities) -> {size}
    not_zero(a)              a number ``a`` (when given) is not 0
    scalar_index(a,index)    a 0-d ``a`` is indexed by one element (index_select's) -> {n} (the index's elements)
    conv_groups(weight,groups,...)       the weight's out channels (at least groups) divide by groups -> {groups},
                                         {weight}
    conv_channels(input,weight,groups,...)  the input has weight.size(1) * groups channels -> {groups}, {weight},
                                         {input} (as batched), {expected}, {got}
    conv_bias(weight,bias,...)  a bias is 1-d with weight.size(0) elements -> {weight}, {out}, {bias}
                             (``...``: ``stride,padding,dilation``, which torch checks first: a non-positive
                             stride or dilation, a negative padding leave the call to the op's own checks)
"""

from __future__ import annotations

from collections.abc import Callable

#: per dtype: its kind ("b", "u", "i", "f") and torch's ScalarType name (``Long``)
FACTS = {"bool": ("b", "Bool"), "uint8": ("u", "Byte"), "int8": ("i", "Char"), "int16": ("i", "Short"),
         "int32": ("i", "Int"), "int64": ("i", "Long"), "float32": ("f", "Float"), "float64": ("f", "Double"),
         "float16": ("f", "Half"), "bfloat16": ("f", "BFloat16")}
#: a check's verdict when a fact it reads is not known here
UNKNOWN = object()
_PARSED: dict[str, tuple] = {}


def parse(declaration: str) -> tuple[str, tuple[str, ...], str, str, tuple[str, ...], str, str]:
    """(rule, arguments, value, ``if``/``unless``/"", its names, exception class, message)."""
    got = _PARSED.get(declaration)
    if got is None:
        head, _, tail = declaration.partition(" | ")
        kind, _, message = tail.partition(": ")
        head, when, names = _split_when(head.strip())
        call, _, value = head.partition("=")
        rule, _, rest = call.partition("(")
        arguments = tuple(a.strip() for a in rest.rstrip(")").split(",") if a.strip())
        got = _PARSED[declaration] = (rule.strip(), arguments, value.strip(), when, names, kind.strip(), message)
    return got


def _split_when(head: str) -> tuple[str, str, tuple[str, ...]]:
    for word in (" if ", " unless "):
        before, sep, names = head.partition(word)
        if sep:
            return before, word.strip(), tuple(n.strip() for n in names.split(","))
    return head, "", ()


def failure(declaration: str, value) -> tuple[str, str] | None:
    """(exception class, message) when the call breaks the declared rule, else None (kept, or not known here).
    ``value(name)``: the call's argument ``name`` (None when not given)."""
    rule, arguments, setting, when, names, kind, message = parse(declaration)
    if when:
        given = any(value(n) is not None for n in names)
        if given != (when == "if"):
            return None
    given = [int(a) if a.lstrip("-").isdigit() else value(a) for a in arguments]  # (a number: itself)
    filled = RULES[rule](*given, setting) if rule in RULES else UNKNOWN
    if filled is None or filled is UNKNOWN:
        return None
    return kind, message.format_map(filled)


def first_failure(declarations, value) -> tuple[str, str] | None:
    for declaration in declarations:
        got = failure(declaration, value)
        if got is not None:
            return got
    return None


# ----- the rules: None (kept), UNKNOWN, or the message's fields (broken) -----------------------------------------
def _no_facts(t):
    return None, None


def _unbound(*args):
    raise RuntimeError("rules.bind was not called")


#: (dtype name or None, shape tuple or None) of an argument ((None, None): not a tensor, or not known): bound
_tensor_facts: Callable = _no_facts
#: (tensor dtype, Python number) -> torch.result_type of the two; (result, target) -> whether target holds result
_number_result: Callable = _unbound
_can_hold: Callable = _unbound
#: (requires_grad or None, strides or None) of a tensor argument: what decides matmul's route (``matmul_route``)
_route_facts: Callable = _no_facts


def bind(tensor_facts: Callable, number_result: Callable, can_hold: Callable, route_facts: Callable = _no_facts) \
        -> None:
    """Give the rules what this side knows: ``tensor_facts(value)`` -> (dtype name or None, shape tuple or None);
    ``number_result(dtype, number)`` -> the result type of a tensor of ``dtype`` with a Python number;
    ``can_hold(result, target)`` -> whether an in-place target of dtype ``target`` holds a ``result``;
    ``route_facts(value)`` -> (requires_grad or None, strides or None) of a tensor."""
    global _tensor_facts, _number_result, _can_hold, _route_facts
    _tensor_facts, _number_result, _can_hold, _route_facts = tensor_facts, number_result, can_hold, route_facts


def _dtype(t, allowed: str):
    dtype, _ = _tensor_facts(t)
    if dtype is None:
        return UNKNOWN
    refused = allowed.startswith("!")
    listed = set(allowed.lstrip("!").split(","))
    inside = dtype in listed or "floating" in listed and FACTS[dtype][0] == "f"
    return None if inside != refused else {"dtype": FACTS[dtype][1], "cpp": CPP_NAMES[dtype],
                                           "tensor_type": TENSOR_TYPES[dtype]}


def _index_dtype(t, allowed: str):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    return _dtype(t, allowed) if _numel(shape) else None


def _is_last_dim(t, dim) -> bool | None:
    """Is ``dim`` ``t``'s last dimension (a 0-d tensor's only one)? None: not known, or not a valid dim."""
    _, shape = _tensor_facts(t)
    if shape is None or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    rank = max(len(shape), 1)
    return dim % rank == rank - 1 if -rank <= dim < rank else None


def _dtype_lastdim(t, dim, allowed: str):
    return _dtype(t, allowed) if _is_last_dim(t, dim) is True else None


def _dtype_innerdim(t, dim, allowed: str):
    return _dtype(t, allowed) if _is_last_dim(t, dim) is False else None


def _class_target(inp, target, _):
    """A loss's target: class indices (int64 or uint8), or probabilities (a float target of the input's shape)."""
    (_, x), (dtype, y) = _tensor_facts(inp), _tensor_facts(target)
    if dtype is None:
        return UNKNOWN
    if dtype in ("int64", "uint8"):
        return None
    if FACTS[dtype][0] == "f":
        if x is None or y is None:
            return UNKNOWN
        if x == y:
            return None
    return {"dtype": FACTS[dtype][1]}


def _same_cpp_dtype(a, b, _):
    (da, _), (db, _) = _tensor_facts(a), _tensor_facts(b)
    if da is None or db is None:
        return UNKNOWN
    return None if da == db else {"a": CPP_NAMES[da], "b": CPP_NAMES[db]}


def _same_dtype(a, b, _):
    (da, _), (db, _) = _tensor_facts(a), _tensor_facts(b)
    if da is None or db is None:
        return UNKNOWN
    return None if da == db else {"a": FACTS[da][1], "b": FACTS[db][1]}


#: the C++ type names torch's matrix-product messages use (``expected m1 and m2 to have the same dtype, but got:
#: float != double``)
CPP_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "int32": "int", "int16": "short int",
             "int8": "signed char", "uint8": "unsigned char", "bool": "bool", "float16": "c10::Half",
             "bfloat16": "c10::BFloat16"}


#: the legacy tensor type names some of torch's argument checks print (embedding's indices)
TENSOR_TYPES = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "float16": "torch.HalfTensor",
                "bfloat16": "CPUBFloat16Type", "uint8": "torch.ByteTensor", "int8": "torch.CharTensor",
                "int16": "torch.ShortTensor", "int32": "torch.IntTensor", "int64": "torch.LongTensor",
                "bool": "CPUBoolType"}


def _product_form(x: tuple, y: tuple, form: str) -> bool:
    """Do shapes ``x`` and ``y`` make a matrix product of ``form`` whose sizes multiply: ``mm`` (the second is a
    matrix), ``linear`` (the same, the second transposed: linear's weight), ``dot`` (two vectors, any sizes: torch
    checks their dtypes first), ``mv`` (2+ by 1 dimensions), ``batched`` (any by 3+ dimensions, batches
    broadcast), ``bmm`` (batches of one size)?"""
    if not x:
        return False
    if form == "dot":
        return len(x) == 1 and len(y) == 1
    if form == "mv":
        return len(x) >= 2 and len(y) == 1 and x[-1] == y[0]
    if form in ("batched", "bmm"):  # (bmm: one batch size, not broadcast)
        batches = x[:-2] == y[:-2] if form == "bmm" else _broadcasts(x[:-2], y[:-2])
        return len(y) >= 3 and x[-1] == y[-2] and batches
    if form == "linear" and len(y) == 2:
        y = (y[1], y[0])
    return len(y) == 2 and x[-1] == y[0]


def matmul_folds(shape: tuple, strides, small: int, small_grad, left: int) -> bool | None:
    """Does torch's matmul fold the operand of more dimensions (``shape``, ``strides``, transposed when it is the
    right one) into one matrix for the other (of ``small`` dimensions, requiring grad or not; the left operand
    has ``left``)? Where the other requires grad, always; where the left operand is a matrix, never; else where
    the fold is a view (its leading dimensions nested). None: what decides is not known."""
    if len(shape) < 3 or small > 2:
        return False
    if small_grad is None:
        return None
    if small_grad:
        return True
    if left == 2:
        return False
    if _numel(shape) == 0:
        return True
    if strides is None:
        return None
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))


def swap_last(strides):
    return None if strides is None else (*strides[:-2], strides[-1], strides[-2])


def _mixed(x: tuple, y: tuple) -> bool:
    """One operand of 3 or more dimensions, the other of 1 or 2: matmul's route depends on whether it folds."""
    return min(len(x), len(y)) >= 1 and (len(x) >= 3) != (len(y) >= 3)


def _matmul_route(x: tuple, y: tuple, fa: tuple, fb: tuple):
    """(form, swapped) of a product of shapes ``x`` and ``y`` of mixed ranks (``_mixed``; ``fa``, ``fb``: the
    operands' ``_route_facts``) as torch's matmul runs it: the larger folded into one matrix for ``mv`` or ``mm``
    (the right operand transposed, and so the operands swapped, where it is the larger), else ``batched`` (bmm);
    UNKNOWN where what decides is not known here."""
    left = len(x) >= len(y)
    big = x if left else (*y[:-2], y[-1], y[-2])
    small = len(y) if left else len(x)
    fold = matmul_folds(big, fa[1] if left else swap_last(fb[1]), small, fb[0] if left else fa[0], len(x))
    if fold is None:
        return UNKNOWN
    return ("mv" if small == 1 else "mm", not left) if fold else ("batched", False)


def _multiplies(x: tuple, y: tuple) -> bool:
    return x[-1] == (y[0] if len(y) == 1 else y[-2])


def _squeezed(x: tuple, y: tuple, fa: tuple, fb: tuple):
    """torch's matmul of two stacks of matrices whose batches differ drops a batch of one that requires grad (the
    left one's first): the shapes and facts it goes on with, or UNKNOWN."""
    if len(x) != 3 or len(y) != 3 or x[0] == y[0]:
        return x, y, fa, fb
    for one in (0, 1):
        shape, (grad, strides) = (x, fa) if one == 0 else (y, fb)
        if shape[0] != 1:
            continue
        if grad is None:
            return UNKNOWN
        if grad:
            facts = (grad, None if strides is None else tuple(strides[1:]))
            return (x[1:], y, facts, fb) if one == 0 else (x, y[1:], fa, facts)
    return x, y, fa, fb


def _product(a, b, form: str):
    """The operands' (dtypes, swapped) where ``a``, ``b`` make a matrix product of ``form`` whose sizes multiply
    (``_product_form``; of mixed ranks, where matmul takes that route: ``linear``, ``linear_batched`` as linear
    takes it, its weight transposed), None where they do not; UNKNOWN where not known here."""
    (da, x), (db, y) = _tensor_facts(a), _tensor_facts(b)
    if da is None or db is None or x is None or y is None:
        return UNKNOWN
    transposed = form.startswith("linear")
    routed = {"linear": "mm", "linear_batched": "batched"}.get(form, form)
    fa, fb = _route_facts(a), _route_facts(b)
    if transposed and len(y) == 2:
        y, fb = (y[1], y[0]), (fb[0], swap_last(fb[1]))
    if routed in ("mm", "mv", "batched") and not transposed:
        squeezed = _squeezed(x, y, fa, fb)
        if squeezed is UNKNOWN:
            return UNKNOWN
        x, y, fa, fb = squeezed
    if routed in ("mm", "mv", "batched") and _mixed(x, y):
        route = _matmul_route(x, y, fa, fb)
        if route is UNKNOWN:
            return UNKNOWN
        return ((da, db), route[1]) if route[0] == routed and _multiplies(x, y) else None
    if form == "linear_batched" or not _product_form(x, y, "mm" if transposed else form):
        return None
    return (da, db), False


def _matmul_dtype(a, b, form: str):
    """Operands of a matrix product of ``form`` (``_product``) of different dtypes, where torch's message is known
    (``mm``, ``linear``: C++ type names). Shapes that do not multiply are left to the shape check, which torch makes
    first."""
    got = _product(a, b, form)
    if got is None or got is UNKNOWN or got[0][0] == got[0][1]:
        return None if got is None else UNKNOWN
    da, db = reversed(got[0]) if got[1] else got[0]
    if form in ("mm", "linear"):
        return {"a": CPP_NAMES[da], "b": CPP_NAMES[db]}
    return {"a": FACTS[da][1], "b": FACTS[db][1]}


def _bool_product(a, b, form: str):
    """Bool operands of a matrix product of ``form`` (``_product``; ``dot``: of one size): torch's CPU kernels
    have none for them; ``batched``: a bool left operand (bmm's kernel is chosen by it, before the dtypes are
    compared). ``mm`` of ranks not mixed: a left operand of at most two dimensions."""
    got = _product(a, b, form)
    if got is None or got is UNKNOWN:
        return got
    (da, db), _ = got
    x, y = _tensor_facts(a)[1], _tensor_facts(b)[1]
    if (da, db) != ("bool", "bool") and not (form.endswith("batched") and da == "bool") or \
            form == "dot" and x != y or form == "mm" and len(x) > 2 and not _mixed(x, y):
        return None
    return {}


def _broadcasts(x: tuple, y: tuple) -> bool:
    return all(m == n or m == 1 or n == 1 for m, n in zip(reversed(x), reversed(y)))


def _number_bounds_cast(t, *bounds_and_setting):
    """clamp_'s Scalar overload: each number bound's result type with the target fits the target -> {result}
    (ScalarType name), {cpp} (the target's C++ type name)."""
    dtype, _ = _tensor_facts(t)
    if dtype is None:
        return UNKNOWN
    for bound in bounds_and_setting[:-1]:
        if isinstance(bound, (bool, int, float)):
            result = _number_result(dtype, bound)
            if not _can_hold(result, dtype):
                return {"result": FACTS[result][1], "cpp": CPP_NAMES[dtype]}
    return None


def _bool_bounds(t, low, high, form: str):
    """clamp of a bool tensor by bool bounds, which torch's kernels refuse: ``min``, ``max`` (that number bound
    alone), ``both`` (two numbers), ``tensors`` (two bool tensors)."""
    dtype, _ = _tensor_facts(t)
    if dtype != "bool":
        return UNKNOWN if dtype is None else None
    number = {name: isinstance(v, bool) for name, v in (("min", low), ("max", high))}
    if form in ("min", "max"):
        other = high if form == "min" else low
        return {} if number[form] and other is None else None
    if form == "both":
        return {} if number["min"] and number["max"] else None
    dtypes = (_tensor_facts(low)[0], _tensor_facts(high)[0])
    return {} if dtypes == ("bool", "bool") else None


def _min_dims(t, n: str):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    return None if len(shape) >= int(n) else {}


def _max_dims(t, n: str):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    return None if len(shape) <= int(n) else {"dims": len(shape)}


def _square(t, _):
    _, shape = _tensor_facts(t)
    if shape is None or len(shape) < 2:
        return UNKNOWN
    return None if shape[-1] == shape[-2] else {"rows": shape[-2], "cols": shape[-1]}


def _given(*values):
    return None if any(v is not None for v in values[:-1]) else {}


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _nonempty(t, _):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    return None if _numel(shape) else {}


def _dim_size(shape: tuple, dim):
    """``shape``'s size along ``dim`` (a 0-d tensor has one element along 0 and -1), or None when out of range."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        return None
    sizes = shape or (1,)
    return sizes[dim] if -len(sizes) <= dim < len(sizes) else None


def _nonempty_dim(t, dim, _):
    _, shape = _tensor_facts(t)
    if shape is None or dim is None:
        return UNKNOWN
    size = _dim_size(shape, dim)
    if size is None:
        return UNKNOWN  # (the dimension check's IndexError comes first)
    return None if size else {"dim": dim % max(len(shape), 1)}


def _k_in_range(t, k, dim, _):
    _, shape = _tensor_facts(t)
    if shape is None or not isinstance(k, int) or isinstance(k, bool):
        return UNKNOWN
    size = _dim_size(shape, -1 if dim is None else dim)
    if size is None:
        return UNKNOWN
    return None if 0 <= k <= size else {}


def _conv_input(t, n: str):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    n = int(n)
    return None if len(shape) in (n + 1, n + 2) else {"unbatched": n + 1, "batched": n + 2, "shape": list(shape)}


def _conv_shapes(inp, weight):
    """(input's shape as batched, weight's shape) when both are known and fit an n-d convolution, else None."""
    (_, x), (_, w) = _tensor_facts(inp), _tensor_facts(weight)
    if x is None or w is None or len(w) < 3 or len(x) not in (len(w) - 1, len(w)):
        return None
    return (x if len(x) == len(w) else (1, *x)), w


def _ints(value, n: int) -> list | None:
    """A convolution's int-or-ints argument as a list (an int: n of it); None when it is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * n
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _padding_mode(padding, _):
    return {"padding": padding} if isinstance(padding, str) and padding not in ("same", "valid") else None


def _conv_same_weight(inp, weight, padding, n: str):
    if padding != "same":
        return None
    (_, x), (_, w) = _tensor_facts(inp), _tensor_facts(weight)
    if x is None or w is None:
        return UNKNOWN
    b = _batched(x, int(n))
    return None if len(b) == len(w) else {"dims": len(w), "weight": list(w), "got": len(b), "input": list(b)}


def _conv_same_broadcast(weight, value, padding, _):
    if padding != "same":
        return None
    _, w = _tensor_facts(weight)
    given = _ints(1 if value is None else value, 1)
    if w is None or given is None:
        return UNKNOWN
    return None if len(given) in (1, len(w) - 2) else {"dims": len(w) - 2}


def _conv_same_strided(stride, padding, _):
    if padding != "same":
        return None
    given = _ints(1 if stride is None else stride, 1)
    if given is None:
        return UNKNOWN
    return None if all(s == 1 for s in given) else {}


def _conv_stride(weight, stride, padding, n: str):
    _, w = _tensor_facts(weight)
    given = _ints(1 if stride is None else stride, int(n))
    if w is None or len(w) < 3 or given is None or padding not in ("same", "valid") and isinstance(padding, str):
        return UNKNOWN  # (a padding mode's string is checked before)
    k = len(w) - 2
    return None if len(given) in (1, k) else {"k": k, "stride": given}


def _batched(x: tuple, n: int) -> tuple:
    return (1, *x) if len(x) == n + 1 else x


def _conv_weight(inp, weight, padding, n: str):
    (_, x), (_, w) = _tensor_facts(inp), _tensor_facts(weight)
    if x is None or w is None or len(w) < 3 or padding not in ("same", "valid") and isinstance(padding, str):
        return UNKNOWN
    b = _batched(x, int(n))
    return None if len(b) == len(w) else {"dims": len(w), "weight": list(w), "got": len(b), "input": list(b)}


def _conv_params(stride, padding, dilation) -> bool:
    """A convolution's stride, padding and dilation pass torch's checks of their signs (made before the shapes')."""
    strides, dils = _ints(1 if stride is None else stride, 1), _ints(1 if dilation is None else dilation, 1)
    pads = [0] if padding in ("valid", "same") else _ints(0 if padding is None else padding, 1)
    return (strides is not None and dils is not None and pads is not None and all(s > 0 for s in strides)
            and all(d > 0 for d in dils) and all(p >= 0 for p in pads))


def _conv_kernel(inp, weight, padding, dilation, stride, n: str):
    if not _conv_params(stride, padding, dilation):
        return UNKNOWN
    (_, x), (_, w) = _tensor_facts(inp), _tensor_facts(weight)
    n = int(n)
    pads = [0] * n if padding == "valid" else _spatial(padding, n, 0)
    dils = _spatial(dilation, n, 1)
    if x is None or w is None or pads is None or dils is None or len(w) != n + 2:
        return UNKNOWN  # (padding="same" pads the input to fit)
    b = _batched(x, n)
    if len(b) != n + 2:
        return UNKNOWN
    padded = [b[2 + i] + 2 * pads[i] for i in range(n)]
    kernel = [dils[i] * (w[2 + i] - 1) + 1 for i in range(n)]
    if all(p >= k for p, k in zip(padded, kernel)):
        return None
    return {"input": " x ".join(map(str, padded)), "kernel": " x ".join(map(str, kernel))}


def _groups(groups) -> int | None:
    if groups is None:
        return 1
    return groups if isinstance(groups, int) and not isinstance(groups, bool) and groups > 0 else None


def _conv_groups(weight, groups, stride, padding, dilation, _):
    _, w = _tensor_facts(weight)
    g = _groups(groups)
    if w is None or g is None or len(w) < 3 or w[0] < g or not _conv_params(stride, padding, dilation):
        return UNKNOWN  # (fewer out channels than groups: the op's own check, first)
    return None if w[0] % g == 0 else {"groups": g, "weight": list(w)}


def _conv_channels(inp, weight, groups, stride, padding, dilation, _):
    shapes, g = _conv_shapes(inp, weight), _groups(groups)
    if shapes is None or g is None or shapes[1][0] < g or not _conv_params(stride, padding, dilation):
        return UNKNOWN
    x, w = shapes
    expected = w[1] * g
    return None if x[1] == expected else {"groups": g, "weight": list(w), "input": list(x), "expected": expected,
                                          "got": x[1]}


def _conv_bias(weight, bias, stride, padding, dilation, _):
    (_, w), (_, b) = _tensor_facts(weight), _tensor_facts(bias)
    if w is None or b is None or not w or not _conv_params(stride, padding, dilation):
        return UNKNOWN
    return None if b == (w[0],) else {"weight": list(w), "out": w[0], "bias": list(b)}


def _shapes(tensors) -> list | None:
    """The shapes of a list of tensors, when every one is known."""
    if not isinstance(tensors, (list, tuple)):
        return None
    shapes = [_tensor_facts(t)[1] for t in tensors]
    return None if any(sh is None for sh in shapes) else shapes


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _nonempty_list(tensors, _):
    if not isinstance(tensors, (list, tuple)):
        return UNKNOWN
    return None if tensors else {}


def _cat_first(shapes: list):
    """The first shape torch.cat reads (a 1-d empty tensor is skipped), or None; None too when a tensor is 0-d
    (torch refuses it first, a check of the op's own)."""
    if any(sh == () for sh in shapes):
        return None
    return next((sh for sh in shapes if sh != (0,)), None)


def channels_last_like(shape: tuple, strides: tuple) -> bool:
    """torch's suggest_memory_format (a layout fact, not a rule: the engine's cat and the client's layouts read it):
    are a 4-d (5-d) tensor's strides those of channels_last (channels_last_3d)? Dimension 1 innermost, then the last
    ones backwards, then 0; ambiguous cases (a trivial channel dimension, an N111 tensor) are row-major."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(shape))
    if order is None or strides[1] == 0:
        return False
    low = 0
    for d in order:
        if shape[d] == 0 or strides[d] < low or d == 0 and low == strides[1]:
            return False
        low = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def _dim_range(t, dim, _):
    _, shape = _tensor_facts(t)
    if dim is None:
        return None
    if shape is None or not _int(dim):
        return UNKNOWN
    rank = max(len(shape), 1)
    return None if -rank <= dim < rank else {"low": -rank, "high": rank - 1, "dim": dim}


def _list_dim(tensors, dim, _):
    shapes = _shapes(tensors)
    first = _cat_first(shapes) if shapes else None
    dim = 0 if dim is None else dim
    if first is None or not _int(dim):
        return UNKNOWN
    rank = max(len(first), 1)
    return None if -rank <= dim < rank else {"low": -rank, "high": rank - 1, "dim": dim}


def _cat_scan(tensors, dim):
    """(kind, fields) of the first tensor torch.cat refuses (``rank`` or ``size``), None, or UNKNOWN."""
    shapes = _shapes(tensors)
    first = _cat_first(shapes) if shapes else None
    dim = 0 if dim is None else dim
    if first is None or not _int(dim) or not -len(first) <= dim < max(len(first), 1):
        return UNKNOWN
    d = dim % len(first)
    for i, sh in enumerate(shapes):
        if sh == (0,):
            continue
        if len(sh) != len(first):
            return "rank", {"a": len(first), "b": len(sh)}
        for j, (m, n) in enumerate(zip(first, sh)):
            if j != d and m != n:
                return "size", {"dim": d, "want": m, "got": n, "i": i}
    return None


def _cat_zero_dim(tensors, _):
    shapes = _shapes(tensors)
    if shapes is None:
        return UNKNOWN
    i = next((i for i, sh in enumerate(shapes) if sh == ()), None)
    return None if i is None else {"i": i}


def _cat_ranks(tensors, _):
    got = _cat_scan(tensors, 0) if _shapes(tensors) and _cat_first(_shapes(tensors)) else UNKNOWN
    if got is UNKNOWN or got is None:
        return got
    return got[1] if got[0] == "rank" else None


def _cat_sizes(tensors, dim, _):
    got = _cat_scan(tensors, dim)
    if got is UNKNOWN or got is None:
        return got
    return got[1] if got[0] == "size" else None


def _stack_shapes(tensors, _):
    shapes = _shapes(tensors)
    if not shapes:
        return UNKNOWN
    i = next((i for i, sh in enumerate(shapes) if sh != shapes[0]), None)
    return None if i is None else {"first": list(shapes[0]), "other": list(shapes[i]), "i": i}


def _index_items(index) -> list:
    key = getattr(index, "key", index)  # (the client's index argument holds the key)
    return list(key) if isinstance(key, tuple) else [key]


def _list_dims(v) -> int | None:
    """The dimensions a list index spans: one for ints (nested too), a nested list of bools its depth; None: not
    known here."""
    if all(_int(x) for x in v) or _all_ints(v):
        return 1
    if all(isinstance(x, bool) for x in v):
        return 1
    if v and all(isinstance(x, list) for x in v):
        inner = {_list_dims(x) for x in v}
        return None if len(inner) != 1 or None in inner or not all(
            isinstance(y, bool) for x in v for y in x) else 1 + inner.pop()
    return None


def _all_ints(v) -> bool:
    """A nested list of ints (not bools), at least one."""
    return bool(v) and all(_all_ints(x) if isinstance(x, list) else _int(x) for x in v)


def _zero_dim_index(t, index, form: str):
    _, shape = _tensor_facts(t)
    key = getattr(index, "key", index)
    if shape is None:
        return UNKNOWN
    if shape or isinstance(key, tuple):
        return None
    if form == "slice":
        return {} if isinstance(key, slice) else None
    if not _int(key) or (key == 0) != (form == "zero"):
        return None
    return {"index": key}


def _index_count(t, index, _):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    key = getattr(index, "key", index)
    if not shape and not isinstance(key, tuple) and (_int(key) or isinstance(key, slice)):
        return None  # (zero_dim_index's)
    consumed = 0
    for k in _index_items(index):
        if k is None or k is Ellipsis:
            continue
        if _int(k) or isinstance(k, slice):
            consumed += 1
        elif isinstance(k, list):
            n = _list_dims(k)
            if n is None:
                return UNKNOWN
            consumed += n
        else:
            dtype, sh = _tensor_facts(k)
            if dtype is None or sh is None:
                return UNKNOWN
            consumed += len(sh) if dtype == "bool" else 1  # (a 0-d bool mask adds a dimension, consuming none)
    return None if consumed <= len(shape) else {"dims": len(shape)}


def _index_bounds(t, index, _):
    _, shape = _tensor_facts(t)
    items = _index_items(index)
    if not shape or sum(1 for k in items if k is Ellipsis) > 1:
        return UNKNOWN
    spans = []
    for k in items:
        if k is None or k is Ellipsis:
            spans.append(0)
        elif _int(k) or isinstance(k, slice):
            spans.append(1)
        elif isinstance(k, list):
            n = _list_dims(k)
            if n is None:
                return UNKNOWN
            spans.append(n)
        else:
            dtype, sh = _tensor_facts(k)
            if dtype is None or sh is None:
                return UNKNOWN
            spans.append(max(len(sh), 1) if dtype == "bool" else 1)
    consumed = sum(spans)
    if consumed > len(shape):
        return UNKNOWN
    source = 0
    for place, (k, span) in enumerate(zip(items, spans)):
        if k is Ellipsis:
            source += len(shape) - consumed
            continue
        if _int(k) and not -shape[source] <= k < shape[source]:
            return {"index": k, "dim": place, "size": shape[source]}
        source += span
    return None


def _index_tensor_dtypes(index, _):
    for k in _index_items(index):
        dtype, _shape = _tensor_facts(k)
        if dtype is None and _shape is not None:
            return UNKNOWN
        if dtype is not None and dtype not in ("int64", "int32", "uint8", "bool"):
            return {}
    return None


def _mask_shape(k) -> tuple | None:
    """The shape of a bool mask among an index's items (a bool or uint8 tensor, a list of bools, nested alike),
    None when ``k`` is no mask; UNKNOWN when it is a tensor whose facts are not known here."""
    if isinstance(k, list):
        if k and all(isinstance(x, bool) for x in k):
            return (len(k),)
        inner = [_mask_shape(x) if isinstance(x, list) else None for x in k]
        return (len(k), *inner[0]) if k and None not in inner and UNKNOWN not in inner and len(set(inner)) == 1 \
            else None
    if k is None or k is Ellipsis or isinstance(k, (int, float, slice)):
        return None
    dtype, shape = _tensor_facts(k)
    if dtype is None or shape is None:
        return UNKNOWN
    return shape if dtype in ("bool", "uint8") else None


def _index_masks(t, index, _):
    _, shape = _tensor_facts(t)
    key = getattr(index, "key", index)
    if shape is None:
        return UNKNOWN
    # (a list holding a list is read as a tuple of indices, as numpy once did)
    items = key if isinstance(key, list) and any(isinstance(x, list) for x in key) else _index_items(index)
    masks = [_mask_shape(k) for k in items]
    if all(m is None for m in masks):
        return None
    if UNKNOWN in masks or sum(1 for k in items if k is Ellipsis) > 1:
        return UNKNOWN
    spans = []
    for k, mask in zip(items, masks):
        if mask is not None:
            spans.append(len(mask))
        elif k is None or k is Ellipsis:
            spans.append(0)
        elif _int(k) or isinstance(k, slice) or isinstance(k, list) or _tensor_facts(k)[1] is not None:
            spans.append(1)
        else:
            return UNKNOWN
    rest = len(shape) - sum(spans)
    if rest < 0:
        return UNKNOWN  # (index_count's)
    indexed, places, source = [], [], 0  # (the tensor as the index's ints, slices and Nones leave it)
    for k, mask, span in zip(items, masks, spans):
        if k is Ellipsis:
            indexed += shape[source:source + rest]
            source += rest
        elif k is None or mask == ():
            indexed.append(1)  # (a 0-d mask: a new dimension of one, which it keeps)
        elif _int(k):
            source += 1
        elif isinstance(k, slice):
            if not all(v is None or _int(v) for v in (k.start, k.stop, k.step)) or (k.step or 1) <= 0:
                return UNKNOWN
            indexed.append(len(range(*k.indices(shape[source]))))
            source += 1
        else:
            if mask is not None:
                places.append((mask, len(indexed)))
            indexed += shape[source:source + span]
            source += span
    indexed += shape[source:]
    for mask, at in places:
        j = next((j for j, m in enumerate(mask) if m != indexed[at + j]), None)
        if j is not None:
            return {"mask": list(mask), "i": j, "shape": indexed, "dim": at + j}
    return None


def _index_in_dim(t, dim, index, _):
    _, shape = _tensor_facts(t)
    if shape is None or not shape or not _int(index):
        return UNKNOWN
    size = _dim_size(shape, dim)
    if size is None:
        return None  # (the dimension's own error)
    return None if -size <= index < size else {"index": index, "shape": list(shape), "dim": dim % len(shape)}


def _narrow_bounds(t, dim, start, length, part: str):
    _, shape = _tensor_facts(t)
    if shape is None or not shape or not _int(start) or not _int(length):
        return UNKNOWN
    n = _dim_size(shape, dim)
    if n is None or length < 0:
        return {} if n is not None and part == "length" else None
    if part == "start":
        return None if -n <= start <= n else {"low": -n, "high": n, "start": start}
    start = start + n if start < 0 else start
    return None if part != "end" or start <= n - length else {"start": start, "length": length, "size": n}


def _gather_shapes(t, dim, index, part: str):
    (_, x), (_, y) = _tensor_facts(t), _tensor_facts(index)
    if x is None or y is None:
        return UNKNOWN
    if not _numel(y) or _dim_size(x, dim) is None:
        return None  # (an empty index gathers nothing; a dimension out of range: its own error)
    if max(len(x), 1) != max(len(y), 1):
        return {} if part == "ranks" else None
    d = dim % max(len(x), 1)
    k = next((k for k in range(len(x)) if k != d and y[k] > x[k]), None)
    return None if part != "sizes" or k is None else {"dim": k, "index": list(y), "self": list(x), "along": d}


def _zero_dim_dims(t, dims, form: str):
    _, shape = _tensor_facts(t)
    first = dims[0] if isinstance(dims, (list, tuple)) and dims else dims
    if shape is None or not _int(first):
        return UNKNOWN if shape is None else None
    if shape:
        return None
    if form == "wrapped":
        return {"dim": 0} if -1 <= first <= 0 else None  # (out of range: the dimension's own error)
    return {"dim": first}


def _target_size(size):
    """A size argument as a list of ints (a tensor: its shape, as expand_as reads it), or None."""
    if isinstance(size, (list, tuple)):
        return list(size) if all(_int(d) for d in size) else None
    _, shape = _tensor_facts(size)
    return None if shape is None else list(shape)


def _expand_rank(t, size, _):
    dtype, shape = _tensor_facts(t)
    size = _target_size(size)
    if shape is None or dtype is None or size is None:
        return UNKNOWN
    return None if len(size) >= len(shape) else {
        "tensor_type": TENSOR_TYPES[dtype], "shape": ", ".join(map(str, shape)), "size": ", ".join(map(str, size)),
        "n": len(size), "dims": len(shape)}


def _expand_size(t, size, _):
    _, shape = _tensor_facts(t)
    size = _target_size(size)
    if shape is None or size is None or len(size) < len(shape):
        return UNKNOWN
    for i in range(len(size) - 1, -1, -1):
        j = i - (len(size) - len(shape))
        have = shape[j] if j >= 0 else None
        want = size[i]
        if have is not None and want != -1 and have != want and have != 1:
            return {"want": want, "have": have, "dim": i, "target": list(size), "shape": list(shape)}
    return None


def _dims_list(dims):
    if _int(dims):
        return [dims]
    return list(dims) if isinstance(dims, (list, tuple)) and all(_int(d) for d in dims) else None


def _permute_rank(t, dims, _):
    _, shape = _tensor_facts(t)
    dims = _dims_list(dims)
    if shape is None or dims is None:
        return UNKNOWN
    return None if len(dims) == len(shape) else {"rank": len(shape), "n": len(dims)}


def _permute_unique(t, dims, _):
    _, shape = _tensor_facts(t)
    dims = _dims_list(dims)
    if shape is None or dims is None or not all(-max(len(shape), 1) <= d < max(len(shape), 1) for d in dims):
        return UNKNOWN
    wrapped = [d % max(len(shape), 1) for d in dims]
    return None if len(set(wrapped)) == len(wrapped) else {}


def _reduce_dims_unique(t, dim, _):
    _, shape = _tensor_facts(t)
    if shape is None or not isinstance(dim, (list, tuple)) or not all(_int(d) for d in dim):
        return UNKNOWN
    rank = max(len(shape), 1)
    if not all(-rank <= d < rank for d in dim):
        return UNKNOWN
    seen = set()
    for d in dim:
        if d % rank in seen:
            return {"dim": d % rank}
        seen.add(d % rank)
    return None


def _unflatten_sizes(t, dim, sizes, _):
    _, shape = _tensor_facts(t)
    if shape is None or not _int(dim) or not isinstance(sizes, (list, tuple)) or not all(_int(d) for d in sizes) \
            or not sizes or list(sizes).count(-1) > 1:
        return UNKNOWN
    size = _dim_size(shape, dim)  # (a 0-d tensor: one element along dim 0 or -1)
    if size is None:
        return UNKNOWN
    known = _numel(tuple(d for d in sizes if d != -1))
    fits = (known != 0 and size % known == 0) if -1 in sizes else known == size
    return None if fits else {"sizes": list(sizes), "dim": dim % max(len(shape), 1), "size": size}


def _broadcasts_rule(a, b, _):
    (_, x), (_, y) = _tensor_facts(a), _tensor_facts(b)
    if x is None or y is None:
        return UNKNOWN
    n = max(len(x), len(y))
    for off in range(n):
        m = x[len(x) - 1 - off] if off < len(x) else 1
        k = y[len(y) - 1 - off] if off < len(y) else 1
        if m != k and m != 1 and k != 1:
            return {"a": m, "b": k, "dim": n - 1 - off}
    return None


def _dim_order(t, start, end, _):
    _, shape = _tensor_facts(t)
    start, end = 0 if start is None else start, -1 if end is None else end
    rank = max(len(shape), 1) if shape is not None else 0
    if shape is None or not _int(start) or not _int(end) or not (-rank <= start < rank and -rank <= end < rank):
        return UNKNOWN
    return None if start % rank <= end % rank else {}


def _dims(t, n: str):
    _, shape = _tensor_facts(t)
    if shape is None:
        return UNKNOWN
    return None if len(shape) == int(n) else {"dims": len(shape)}


def _min_ranks(a, b, n: str):
    (_, x), (_, y) = _tensor_facts(a), _tensor_facts(b)
    if x is None or y is None:
        return UNKNOWN
    return None if len(x) >= int(n) and len(y) >= int(n) else {"a": len(x), "b": len(y)}


def _ranks(a, b, ns: str):
    (_, x), (_, y) = _tensor_facts(a), _tensor_facts(b)
    if x is None or y is None:
        return UNKNOWN
    n, m = (int(v) for v in ns.split(","))
    return None if (len(x), len(y)) == (n, m) else {"a": len(x), "b": len(y)}


def _repeats_cover(t, repeats, _):
    _, shape = _tensor_facts(t)
    given = _dims_list(repeats)
    if shape is None or given is None:
        return UNKNOWN
    return None if len(given) >= len(shape) else {}


def _linear_shapes(inp, weight, part: str):
    (_, x), (_, w) = _tensor_facts(inp), _tensor_facts(weight)
    if x is None or w is None or not x or len(w) != 2:
        return UNKNOWN
    if x[-1] == w[1]:
        return None
    batched = False
    if len(x) >= 3:  # (matmul's route with the weight transposed: folded into mm, or bmm)
        fa, fb = _route_facts(inp), _route_facts(weight)
        route = _matmul_route(x, (w[1], w[0]), fa, (fb[0], swap_last(fb[1])))
        if route is UNKNOWN:
            return UNKNOWN
        batched = route[0] == "batched"
    if part == "batched":
        return {"batch": _numel(x[:-2]), "k": x[-1], "got": w[1]} if batched else None
    return None if batched else {"rows": _numel(x[:-1]), "k": x[-1], "wk": w[1], "out": w[0]}  # (1-d: a row)


def _bmm_shapes(a, b, _):
    (_, x), (_, y) = _tensor_facts(a), _tensor_facts(b)
    if x is None or y is None or len(x) != 3 or len(y) != 3:
        return UNKNOWN
    return None if (y[0], y[1]) == (x[0], x[2]) else {"batch": x[0], "k": x[2], "got": [y[0], y[1]]}


def _batch_sizes(inp, target, _):
    (_, x), (dt, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None or dt is None:
        return UNKNOWN
    if len(x) < 2:
        return None
    b = y[0] if y else 0  # (torch counts a 0-d target as a batch of 0)
    return None if x[0] == b else {"a": x[0], "b": b}


def _multi_target(inp, target, setting):
    (_, x), (dt, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None or dt is None:
        return UNKNOWN
    probabilities = setting == "probabilities" and x == y  # (cross_entropy: a target of the input's shape)
    return {} if 1 <= len(x) <= 2 and len(y) >= 2 and not probabilities else None


def _spatial_target(inp, target, part: str):
    (_, x), (_, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None or len(x) < 3 or x == y:  # (x == y: cross_entropy's probabilities)
        return UNKNOWN if x is None or y is None else None
    if len(x) != 4:
        want = [x[0], *x[2:]]
        return {"want": want, "got": list(y)} if part == "size" and list(y) != want else None
    if part == "rank4":
        return {"dims": len(y)} if len(y) != 3 else None
    return {"input": list(x), "target": list(y)} if part == "size4" and len(y) == 3 and y[1:] != x[2:] else None


def _probability_target(inp, target, _):
    (_, x), (dt, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None or dt is None:
        return UNKNOWN
    return {"dtype": FACTS[dt][1]} if x == y and FACTS[dt][0] != "f" else None


def _same_size(inp, target, _):
    (_, x), (_, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None:
        return UNKNOWN
    return None if x == y else {"a": list(x), "b": list(y)}


def _probability_ignore(inp, target, ignore_index, _):
    (_, x), (_, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None:
        return UNKNOWN
    return {} if x == y and _int(ignore_index) and ignore_index >= 0 else None


def _class_dim(inp, target, part: str):
    (_, x), (dt, y) = _tensor_facts(inp), _tensor_facts(target)
    if x is None or y is None or dt is None:
        return UNKNOWN
    if part == "probabilities":
        return {} if x == y == () else None
    if part == "scalar":
        return {} if x == () and y != () else None
    return {"size": y[0]} if len(x) == 1 and len(y) == 1 and y[0] != 1 and x != y else None


def _scalar_index(t, index, _):
    (_, x), (_, y) = _tensor_facts(t), _tensor_facts(index)
    if x is None or y is None:
        return UNKNOWN
    return {"n": _numel(y)} if not x and _numel(y) != 1 else None


def _not_zero(a, _):
    return {} if a is not None and not isinstance(a, bool) and isinstance(a, (int, float)) and a == 0 else None


RULES = {"dtype": _dtype, "index_dtype": _index_dtype, "dtype_lastdim": _dtype_lastdim,
         "dtype_innerdim": _dtype_innerdim,
         "class_target": _class_target, "matmul_dtype": _matmul_dtype, "bool_product": _bool_product,
         "number_bounds_cast": _number_bounds_cast,
         "bool_bounds": _bool_bounds, "same_dtype": _same_dtype, "same_cpp_dtype": _same_cpp_dtype,
         "min_dims": _min_dims, "max_dims": _max_dims, "square": _square,
         "given": _given,
         "nonempty": _nonempty, "nonempty_dim": _nonempty_dim, "k_in_range": _k_in_range,
         "conv_input": _conv_input, "padding_mode": _padding_mode, "conv_same_weight": _conv_same_weight,
         "conv_same_broadcast": _conv_same_broadcast, "conv_same_strided": _conv_same_strided,
         "conv_stride": _conv_stride, "conv_weight": _conv_weight,
         "conv_kernel": _conv_kernel, "conv_groups": _conv_groups, "conv_channels": _conv_channels,
         "conv_bias": _conv_bias, "nonempty_list": _nonempty_list, "list_dim": _list_dim, "cat_ranks": _cat_ranks,
         "cat_zero_dim": _cat_zero_dim,
         "cat_sizes": _cat_sizes, "stack_shapes": _stack_shapes, "expand_rank": _expand_rank,
         "index_count": _index_count, "dim_range": _dim_range, "index_bounds": _index_bounds,
         "zero_dim_index": _zero_dim_index, "index_tensor_dtypes": _index_tensor_dtypes,
         "index_in_dim": _index_in_dim, "narrow_bounds": _narrow_bounds, "gather_shapes": _gather_shapes,
         "zero_dim_dims": _zero_dim_dims,
         "expand_size": _expand_size,
         "permute_rank": _permute_rank, "permute_unique": _permute_unique,
         "reduce_dims_unique": _reduce_dims_unique, "unflatten_sizes": _unflatten_sizes,
         "broadcasts": _broadcasts_rule, "dims": _dims, "ranks": _ranks, "min_ranks": _min_ranks,
         "repeats_cover": _repeats_cover,
         "linear_shapes": _linear_shapes, "bmm_shapes": _bmm_shapes, "batch_sizes": _batch_sizes,
         "same_size": _same_size, "dim_order": _dim_order, "multi_target": _multi_target,
         "spatial_target": _spatial_target, "probability_target": _probability_target, "class_dim": _class_dim,
         "probability_ignore": _probability_ignore,
         "index_masks": _index_masks, "not_zero": _not_zero, "scalar_index": _scalar_index}


# ----- result shapes: the op table's ``shape`` declarations --------------------------------------------------------
# A declaration is ``"rule(arguments)[=setting]"``, the arguments read as a check's are; a rule gives the result's
# shape (a tuple) for a call whose checks passed, or UNKNOWN where a fact it reads is not known here (or the call
# is one the rule does not cover: the server's result says). The rules:
#
#     same(a)                          ``a``'s shape (softmax, dropout, layer_norm, cumsum...)
#     loss(input,target,reduction)=kind  () for a reduction; for ``none``, kind ``pointwise``: the two broadcast,
#                                      ``class``: an integer target's shape
#     linear(input,weight)             input's shape with the last size ``weight.size(0)`` (a matrix weight)
#     conv(input,weight,stride,padding,dilation)=n   an n-d convolution's output ((unbatched) input's batch, the
#                                      weight's out channels, the spatial sizes; padding ``same``/``valid`` too)
#     pool(input,kernel_size,stride,padding,dilation,ceil_mode,return_indices)=n  an n-d max/avg pool's output
#     adaptive_pool(input,output_size)=n  the input's leading sizes and ``output_size`` (None: the input's size)
#     embedding(input,weight)          input's shape and ``weight.size(1)``
#     cat(tensors,dim)                 the tensors' shape (the first torch reads) with ``dim`` summed
#     stack(tensors,dim)               their one shape with a new dimension of their number at ``dim``
#     index_shape(index)               the index tensor's shape (gather)
#     index_select(input,dim,index)    input's shape with ``dim`` the index's number of elements
#     pad(input,pad)                   the last dimensions grown by ``pad``'s pairs (last dimension first)
#     interpolate(input,size,scale_factor)  the leading two sizes and ``size``, or each spatial size times its
#                                      scale, floored
#     bmm(a,b)                         ``[a.size(0), a.size(1), b.size(2)]``
#     sizes(size)                      the size given (ints, or one list of them: ``new_zeros``)
#     repeat(a,repeats)                ``a``'s shape, 1s in front to ``repeats``' length, times ``repeats``
#     one_hot(a,num_classes)           ``a``'s shape and ``num_classes`` (-1: the data's maximum, not known)
#     einsum(equation,operands)        the output subscripts' sizes (implicit: the ellipsis, then the labels met
#                                      once, upper case first), an ellipsis broadcast, a size 1 broadcast
def result_shape(declaration: str, value):
    """The result's shape by the declared rule, or UNKNOWN. ``value(name)``: the call's argument (None: not
    given)."""
    rule, arguments, setting, _, _, _, _ = parse(declaration)
    given = [int(a) if a.lstrip("-").isdigit() else value(a) for a in arguments]
    try:
        shape = SHAPES[rule](*given, setting)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):  # (an argument of a form no rule reads)
        return UNKNOWN
    return shape


def _shape_of(t):
    shape = _tensor_facts(t)[1]
    return UNKNOWN if shape is None else tuple(shape)


def _same_shape(a, _):
    return _shape_of(a)


def _loss_shape(inp, target, reduction, kind: str):
    if reduction in (None, "mean", "sum", "batchmean"):
        return ()
    if reduction != "none":
        return UNKNOWN
    x, (dtype, y) = _shape_of(inp), _tensor_facts(target)
    if kind == "class":
        return UNKNOWN if y is None or dtype is None or FACTS.get(dtype, ("f",))[0] == "f" else tuple(y)
    if x is UNKNOWN or y is None:
        return UNKNOWN
    return _broadcast_shape(x, tuple(y))


def _broadcast_shape(x: tuple, y: tuple):
    if not _broadcasts(x, y):
        return UNKNOWN
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    return tuple(b if a == 1 else a for a, b in zip(x, y))


def _linear_shape(inp, weight, _):
    x, w = _shape_of(inp), _shape_of(weight)
    if x is UNKNOWN or w is UNKNOWN or not x or len(w) != 2 or x[-1] != w[-1]:
        return UNKNOWN  # (a vector weight: matmul's rules, with their errors)
    return (*x[:-1], w[0])


def _spatial(value, n: int, default: int):
    """An int-or-ints argument of an n-d convolution or pooling (None: ``default``) as n ints (one int given as a
    list of one: that int n times), or None."""
    got = _ints(default if value is None else value, n)
    if got is not None and len(got) == 1:
        got = got * n
    return got if got is not None and len(got) == n else None


def _conv_shape(inp, weight, stride, padding, dilation, n: str):
    k = int(n)
    x, w = _shape_of(inp), _shape_of(weight)
    if x is UNKNOWN or w is UNKNOWN or len(w) != k + 2 or len(x) not in (k + 1, k + 2):
        return UNKNOWN
    strides, dilations = _spatial(stride, k, 1), _spatial(dilation, k, 1)
    if strides is None or dilations is None or min(strides) < 1 or min(dilations) < 1:
        return UNKNOWN
    sizes = x[-k:]
    kernel = w[2:]
    if padding == "same":
        out = list(sizes)
    else:
        pads = [0] * k if padding == "valid" else _spatial(padding, k, 0)
        if pads is None or min(pads) < 0:
            return UNKNOWN
        out = [(s + 2 * p - d * (q - 1) - 1) // st + 1
               for s, p, d, q, st in zip(sizes, pads, dilations, kernel, strides)]
    if min(out) < 1:
        return UNKNOWN
    return (*x[:-k - 1], w[0], *out)


def _pool_shape(inp, kernel_size, stride, padding, dilation, ceil_mode, return_indices, n: str):
    k = int(n)
    x = _shape_of(inp)
    if x is UNKNOWN or return_indices or len(x) not in (k + 1, k + 2):
        return UNKNOWN
    kernel = _spatial(kernel_size, k, 1)
    strides = kernel if stride is None or isinstance(stride, (list, tuple)) and not stride else _spatial(stride, k, 1)
    pads, dilations = _spatial(padding, k, 0), _spatial(dilation, k, 1)
    if None in (kernel, strides, pads, dilations) or min(kernel) < 1 or min(strides) < 1 or min(pads) < 0 or \
            min(dilations) < 1 or any(2 * p > q for p, q in zip(pads, kernel)):
        return UNKNOWN
    out = []
    for size, q, st, p, d in zip(x[-k:], kernel, strides, pads, dilations):
        span = size + 2 * p - d * (q - 1) - 1
        o = (span + (st - 1 if ceil_mode else 0)) // st + 1
        if ceil_mode and (o - 1) * st >= size + p:
            o -= 1
        out.append(o)
    if min(out) < 1:
        return UNKNOWN
    return (*x[:-k], *out)


def _adaptive_pool_shape(inp, output_size, n: str):
    k = int(n)
    x = _shape_of(inp)
    if x is UNKNOWN or len(x) not in (k + 1, k + 2):
        return UNKNOWN
    sizes = [output_size] * k if _int(output_size) or output_size is None else list(output_size)
    if len(sizes) != k or any(s is not None and (not _int(s) or s < 0) for s in sizes):
        return UNKNOWN
    return (*x[:-k], *(s if s is not None else own for s, own in zip(sizes, x[-k:])))


def _embedding_shape(inp, weight, _):
    x, w = _shape_of(inp), _shape_of(weight)
    return UNKNOWN if x is UNKNOWN or w is UNKNOWN or len(w) != 2 else (*x, w[1])


def _cat_shape(tensors, dim, _):
    shapes = _shapes(tensors)
    first = _cat_first(shapes) if shapes else None
    dim = 0 if dim is None else dim
    if first is None or not _int(dim) or not -len(first) <= dim < len(first):
        return UNKNOWN
    d = dim % len(first)
    parts = [sh for sh in shapes if sh != (0,)]
    if any(len(sh) != len(first) or any(a != b for i, (a, b) in enumerate(zip(sh, first)) if i != d)
           for sh in parts):
        return UNKNOWN
    return (*first[:d], sum(sh[d] for sh in parts), *first[d + 1:])


def _stack_shape(tensors, dim, _):
    shapes = _shapes(tensors)
    dim = 0 if dim is None else dim
    if not shapes or any(sh != shapes[0] for sh in shapes) or not _int(dim):
        return UNKNOWN
    first = tuple(shapes[0])
    if not -len(first) - 1 <= dim <= len(first):
        return UNKNOWN
    d = dim % (len(first) + 1)
    return (*first[:d], len(shapes), *first[d:])


def _index_shape(index, _):
    return _shape_of(index)


def _index_select_shape(inp, dim, index, _):
    x, i = _shape_of(inp), _shape_of(index)
    if x is UNKNOWN or i is UNKNOWN or not _int(dim) or len(i) > 1:
        return UNKNOWN
    if not x:
        return () if _numel(i) == 1 and dim in (0, -1) else UNKNOWN
    if not -len(x) <= dim < len(x):
        return UNKNOWN
    d = dim % len(x)
    return (*x[:d], _numel(i), *x[d + 1:])


def _pad_shape(inp, pad, _):
    x = _shape_of(inp)
    if x is UNKNOWN or not isinstance(pad, (list, tuple)) or len(pad) % 2 or len(pad) // 2 > len(x) or \
            not all(_int(p) for p in pad):
        return UNKNOWN
    out = list(x)
    for i in range(len(pad) // 2):
        out[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    return UNKNOWN if min(out, default=1) < 0 else tuple(out)


def _interpolate_shape(inp, size, scale_factor, _):
    x = _shape_of(inp)
    if x is UNKNOWN or len(x) < 3 or (size is None) == (scale_factor is None):
        return UNKNOWN
    k = len(x) - 2
    if size is not None:
        sizes = [size] * k if _int(size) else list(size)
        if len(sizes) != k or not all(_int(s) and s > 0 for s in sizes):
            return UNKNOWN
        return (*x[:2], *sizes)
    scales = [scale_factor] * k if isinstance(scale_factor, (int, float)) and not isinstance(scale_factor, bool) \
        else list(scale_factor)
    if len(scales) != k or not all(isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0 for s in scales):
        return UNKNOWN
    out = [int(float(s) * float(c) // 1) for s, c in zip(x[2:], scales)]
    return UNKNOWN if min(out) < 1 else (*x[:2], *out)


def _bmm_shape(a, b, _):
    x, y = _shape_of(a), _shape_of(b)
    if x is UNKNOWN or y is UNKNOWN or len(x) != 3 or len(y) != 3 or x[0] != y[0] or x[2] != y[1]:
        return UNKNOWN
    return (x[0], x[1], y[2])


def _sizes_shape(size, _):
    sizes = list(size) if isinstance(size, (list, tuple)) else [size]
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = list(sizes[0])
    return tuple(sizes) if all(_int(s) and s >= 0 for s in sizes) else UNKNOWN


def _repeat_shape(a, repeats, _):
    x = _shape_of(a)
    reps = list(repeats) if isinstance(repeats, (list, tuple)) else [repeats]
    if len(reps) == 1 and isinstance(reps[0], (list, tuple)):
        reps = list(reps[0])
    if x is UNKNOWN or len(reps) < len(x) or not all(_int(r) and r >= 0 for r in reps):
        return UNKNOWN
    x = (1,) * (len(reps) - len(x)) + x
    return tuple(s * r for s, r in zip(x, reps))


def _one_hot_shape(a, num_classes, _):
    x = _shape_of(a)
    return UNKNOWN if x is UNKNOWN or not _int(num_classes) or num_classes < 0 else (*x, num_classes)


def _einsum_terms(text: str):
    """A side of an einsum equation as a list of labels and None for its ellipsis, or None when malformed."""
    out, i = [], 0
    text = text.replace(" ", "")
    while i < len(text):
        if text.startswith("...", i):
            if None in out:
                return None
            out.append(None)
            i += 3
        elif text[i].isascii() and text[i].isalpha():
            out.append(text[i])
            i += 1
        else:
            return None
    return out


def _einsum_shape(equation, operands, _):
    if not isinstance(equation, str) or not isinstance(operands, (list, tuple)):
        return UNKNOWN
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    shapes = [_shape_of(t) for t in operands]
    lhs, arrow, rhs = equation.partition("->")
    terms = [_einsum_terms(t) for t in lhs.split(",")]
    if UNKNOWN in shapes or not shapes or len(terms) != len(shapes) or any(t is None for t in terms):
        return UNKNOWN
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipsis: tuple = ()
    for term, shape in zip(terms, shapes):
        labels = [c for c in term if c is not None]
        extra = len(shape) - len(labels)
        if extra < 0 or extra and None not in term:
            return UNKNOWN
        dims, at = [], 0
        for c in term:
            if c is None:
                got = _broadcast_shape(ellipsis, tuple(shape[at:at + extra]))
                if got is UNKNOWN:
                    return UNKNOWN
                ellipsis, at = got, at + extra
            else:
                dims.append((c, shape[at]))
                at += 1
        for c, n in dims:
            counts[c] = counts.get(c, 0) + 1
            have = sizes.get(c, n)
            if have != n and have != 1 and n != 1:
                return UNKNOWN
            sizes[c] = n if have == 1 else have
    if not arrow:
        once = sorted((c for c, k in counts.items() if k == 1), key=lambda c: (c.islower(), c))
        return (*ellipsis, *(sizes[c] for c in once))
    out = _einsum_terms(rhs)
    if out is None or any(c is not None and (c not in sizes or out.count(c) > 1) for c in out):
        return UNKNOWN
    shape: list = []
    for c in out:
        shape.extend(ellipsis if c is None else (sizes[c],))
    return tuple(shape)


SHAPES = {"same": _same_shape, "loss": _loss_shape, "linear": _linear_shape, "conv": _conv_shape,
          "pool": _pool_shape, "adaptive_pool": _adaptive_pool_shape, "embedding": _embedding_shape,
          "cat": _cat_shape, "stack": _stack_shape, "index_shape": _index_shape,
          "index_select": _index_select_shape, "pad": _pad_shape, "interpolate": _interpolate_shape,
          "bmm": _bmm_shape, "sizes": _sizes_shape, "repeat": _repeat_shape, "one_hot": _one_hot_shape,
          "einsum": _einsum_shape}
