"""The engine's fast paths (same-dtype operands, float tensor with a Python number, where without
promotion, stack of one dtype, softplus with beta=1, matmul results) give what the general paths give."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine import backward
from gradserve_server.engine.ops import elementwise as EW
from gradserve_server.engine.ops import linalg as L
from gradserve_server.engine.ops import shape as S
from gradserve_server.engine.ops.common import binary_operands
from gradserve_server.engine.tensor import Tensor, tensor, wrapped_number


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("number", [0.1, 2, -3.5])
def test_float_tensor_with_python_number_keeps_the_tensor_dtype(dtype, number):
    for shape in ((), (3,)):
        t = Tensor(np.ones(shape, dtype))
        name, a, b = binary_operands(t, number)
        assert a.dtype == dtype and np.asarray(b).dtype == dtype and name == np.dtype(dtype).name
        assert b == dtype(number)


def test_wrapped_number_with_python_number_promotes_as_torch_does():
    w = wrapped_number(2.5)  # float64 0-d, but a wrapped scalar: float32 with another Python float
    name, a, b = binary_operands(w, 0.5)
    assert name == "float32" and a.dtype == np.float32


def test_int_tensor_with_python_float_still_promotes():
    name, _, _ = binary_operands(tensor([1, 2]), 0.5)
    assert name == "float32"


@pytest.mark.parametrize("other", [0.0, 1.5])
def test_where_fast_path_matches_numpy_and_keeps_nan_out_of_masked_positions(other):
    cond = tensor([True, False, True])
    x = Tensor(np.array([np.nan, 2.0, np.inf], np.float32))
    out = EW.where(cond, other, x)
    np.testing.assert_array_equal(out.data, np.where(cond.data, np.float32(other), x.data))
    assert out.data.dtype == np.float32
    out = EW.where(cond, x, other)
    np.testing.assert_array_equal(out.data, np.where(cond.data, x.data, np.float32(other)))


def test_where_with_mixed_dtypes_or_broadcast_takes_the_general_path():
    cond = tensor([True, False])
    a = Tensor(np.array([1.0, 2.0], np.float32))
    b = Tensor(np.array([3.0, 4.0], np.float64))
    assert EW.where(cond, a, b).data.dtype == np.float64
    assert EW.where(tensor([[True], [False]]), a, 0.0).shape == (2, 2)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack_of_one_dtype_matches_np_stack(dim):
    ts = [Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) + i) for i in range(3)]
    out = S.stack(ts, dim)
    np.testing.assert_array_equal(out.data, np.stack([t.data for t in ts], axis=dim))
    assert out.data.flags.c_contiguous


def test_stack_of_scalars_has_the_torch_graph_and_gradients():
    xs = [tensor(float(i), requires_grad=True) for i in range(4)]
    s = S.stack(xs)
    assert s.grad_fn.name == "StackBackward0" and s.shape == (4,)
    backward((s * tensor([1.0, 2.0, 3.0, 4.0])).sum())
    assert [x.grad.item() for x in xs] == [1.0, 2.0, 3.0, 4.0]


def test_softplus_beta_one_equals_the_general_formula():
    x = Tensor(np.array([-30.0, -1.0, 0.0, 1e-3, 5.0, 19.9, 20.0, 25.0, 100.0, np.nan], np.float32),
               requires_grad=True)
    out = EW.softplus(x)
    with np.errstate(over="ignore"):
        ref = np.where(x.data > 20, x.data, np.log1p(np.exp(x.data * np.float32(1))) / np.float32(1))
    np.testing.assert_array_equal(out.data, ref.astype(np.float32))
    backward(out.sum())
    sig = 1 / (1 + np.exp(-x.data.astype(np.float64)))
    np.testing.assert_allclose(x.grad.data[:-1], np.where(x.data > 20, 1.0, sig)[:-1], rtol=1e-6)


def test_mm_result_owns_its_data_so_a_leaf_grad_is_not_copied():
    a = tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = tensor(np.ones((3, 4), np.float32), requires_grad=True)
    out = L.mm(a, b)
    assert out.data.flags.owndata and out.data.flags.c_contiguous
    backward(out.sum())
    assert b.grad.data.flags.owndata
    np.testing.assert_array_equal(b.grad.data, np.full((3, 4), 2.0, np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("number", [2.5, 3, True])
@pytest.mark.parametrize("shape", [(), (3,), (2, 1)])
def test_float_tensor_with_wrapped_number_matches_the_general_result_type(dtype, number, shape):
    from gradserve_server.engine import dtypes as D
    t = Tensor(np.full(shape, 1.5, dtype))
    w = wrapped_number(number)
    name, a, b = binary_operands(t, w)
    assert name == D.result_type(t, w) == np.dtype(dtype).name
    assert a is t.data and b.dtype == dtype and b == np.asarray(w.data).astype(dtype)


def test_signature_memo_accepts_by_argument_classes_only():
    """A call accepted once does not let a call of other argument classes through: torch's message still."""
    from gradserve_server.engine.errors import TorchTypeError
    from gradserve_server.engine.program import State, run_program
    st = State()
    st.tensors = {"x": tensor([1.0, 2.0], requires_grad=True)}
    for _ in range(2):  # the second time from the remembered classes
        run_program(st, [{"op": "mul", "args": ["x", 2.0], "out": "y"}, {"op": "exp", "args": ["x"]},
                         {"op": "add", "args": ["x", "x"], "kwargs": {"alpha": 2}}])
    refused = [([{"op": "mul", "args": ["x", [2.0]]}], "mul(): argument 'other' (position 2) must be Tensor, not list"),
               ([{"op": "add", "args": ["x", "x"], "kwargs": {"beta": 2}}],
                "add() got an unexpected keyword argument 'beta'"),
               ([{"op": "exp", "args": ["x", "x"]}], "exp() takes 1 positional argument but 2 were given"),
               ([{"op": "exp", "args": [2.0]}], "exp(): argument 'input' (position 1) must be Tensor, not float")]
    names = dict(st.tensors)
    for ops, message in refused:
        with pytest.raises(TorchTypeError) as err:
            run_program(st, ops)
        assert str(err.value).startswith(message)
    assert st.tensors == names  # nothing bound by a refused program


def test_signature_memo_by_value_facts_tells_tensors_apart():
    """Where a parameter's check reads the value (a 0-d tensor passes for a Number unless it requires grad, an
    int 0-d tensor for an int), a call accepted once does not let a tensor of other facts through."""
    from gradserve_server.engine.errors import TorchTypeError
    x = tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):  # the second time from the memo
        x.add(x, alpha=tensor(2.0))
        x.add(x, alpha=tensor(2))
    for alpha in (tensor(2.0, requires_grad=True), tensor([2.0])):
        with pytest.raises(TorchTypeError) as err:
            x.add(x, alpha=alpha)
        assert str(err.value).startswith("add(): argument 'alpha' must be Number, not Tensor")
    from gradserve_server.engine.errors import EngineError
    with pytest.raises(EngineError):
        x.unsqueeze(tensor(1))  # the signature takes an int 0-d tensor; the op refuses it after
    with pytest.raises(TorchTypeError) as err:
        x.unsqueeze(tensor(1.0))
    assert str(err.value).startswith("unsqueeze(): argument 'dim' (position 1) must be int, not Tensor")


def test_program_ops_keep_grad_mode_per_op():
    """no_grad ops (per op and for the whole list) and grad ops in one list, in either order."""
    from gradserve_server.engine.program import State, run_program
    st = State()
    st.tensors = {"x": tensor([1.0, 2.0], requires_grad=True)}
    run_program(st, [{"op": "mul", "args": ["x", 2.0], "out": "a", "no_grad": True},
                     {"op": "mul", "args": ["x", 2.0], "out": "b"},
                     {"op": "exp", "args": ["x"], "out": "c", "no_grad": True}])
    assert not st.tensors["a"].requires_grad and st.tensors["b"].grad_fn.name == "MulBackward0"
    assert not st.tensors["c"].requires_grad
    run_program(st, [{"op": "mul", "args": ["x", 2.0], "out": "d"}], no_grad=True)
    assert not st.tensors["d"].requires_grad


def test_signature_memo_by_value_facts_for_positional_arguments():
    """A positional argument whose check reads the value (sum's dim: an int, or an int 0-d tensor): the memo of
    accepted calls without keywords tells a float or a float 0-d tensor apart, the second time as the first."""
    from gradserve_server.engine.errors import EngineError, TorchTypeError
    x = tensor([1.0, 2.0], requires_grad=True)
    for _ in range(2):
        assert x.sum(0).data == 3.0
        with pytest.raises(EngineError) as err:  # torch takes it; the engine's op refuses a tensor dim after
            x.sum(tensor(0))
        assert not isinstance(err.value, TorchTypeError)
        for dim, got in ((0.5, "float"), (tensor(0.0), "Tensor")):
            with pytest.raises(TorchTypeError) as err:
                x.sum(dim)
            assert str(err.value).startswith(f"sum() received an invalid combination of arguments - got ({got})")


def test_signature_memo_by_classes_where_tensors_meet_tensor_parameters(monkeypatch):
    """add(x, y): add's overloads have a Number parameter (alpha), but positional tensors meet Tensor parameters
    only, so the classes decide the call (``Signature.decided_by``): the second call reads no value facts. A
    positional tensor that meets an int parameter (sum's dim) is still told apart by its facts."""
    from gradserve_server.engine import signature as SG
    from gradserve_server.engine.errors import TorchTypeError
    from gradserve_server.engine.program import State, run_program
    st = State()
    st.tensors = {"x": tensor([1.0, 2.0], requires_grad=True), "y": tensor([3.0, 4.0]), "z": tensor(0.0)}
    keyed = [{"op": "add", "args": ["x", "y"], "kwargs": {"alpha": 2}, "out": "c"},
             {"op": "sum", "args": ["x"], "kwargs": {"dim": 0, "keepdim": True}, "out": "d"}]
    run_program(st, [{"op": "add", "args": ["x", "y"], "out": "a"}, *keyed])
    read = []
    real = SG._value_facts
    monkeypatch.setattr(SG, "_value_facts", lambda *a: read.append(a) or real(*a))
    run_program(st, [{"op": "add", "args": ["x", "y"], "out": "a"}, {"op": "add", "args": ["y", "x"], "out": "b"}])
    assert st.tensors["a"].data.tolist() == st.tensors["b"].data.tolist() == [4.0, 6.0]
    run_program(st, keyed)  # (keywords too: their names and classes are part of the key)
    assert st.tensors["c"].data.tolist() == [7.0, 10.0] and st.tensors["d"].data.tolist() == [3.0]
    assert not read
    with pytest.raises(TorchTypeError) as err:
        run_program(st, [{"op": "add", "args": ["x", "y"], "kwargs": {"alpha": "z"}}])  # another class: parsed
    assert read and "argument 'alpha' must be Number, not str" in str(err.value)
    read.clear()
    run_program(st, [{"op": "sum", "args": ["x", 0]}])
    with pytest.raises(TorchTypeError):
        run_program(st, [{"op": "sum", "args": ["x", "z"]}])
    assert read  # (sum(x, tensor) is decided by the tensor's facts)


def test_nodes_of_one_input_and_of_many_inputs_keep_their_metadata_and_needs():
    """record()'s shared tuples (0-d input metadata, needs by mask) and its one-input path: the same
    input_meta, needs, edges and gradients as for any other node."""
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    a = tensor(1.5, requires_grad=True)
    c = tensor([1.0, -2.0], dtype="float64", requires_grad=True)
    s = EW.softplus(a)
    assert s.grad_fn.input_meta == (((), f32),) and s.grad_fn.needs == (True,)
    assert s.grad_fn.next_functions[0][0].name == "AccumulateGrad"
    e = EW.exp(c)
    assert e.grad_fn.input_meta == (((2,), f64),) and e.grad_fn.next_functions[0][0].variable is c
    xs = [tensor(float(i), requires_grad=i % 2 == 0) for i in range(6)]  # six inputs: past the needs table
    st = S.stack(xs)
    assert st.grad_fn.needs == (True, False, True, False, True, False)
    assert st.grad_fn.input_meta == tuple(((), f32) if i % 2 == 0 else None for i in range(6))
    assert [nf[0] is None for nf in st.grad_fn.next_functions] == [i % 2 == 1 for i in range(6)]
    st3 = S.stack(xs[1:4])
    assert st3.grad_fn.needs == (False, True, False) and st3.grad_fn.input_meta[0] is None
    m = EW.mul(xs[1], 2.0)  # one input, no grad: no node
    assert m.grad_fn is None and not m.requires_grad
    w = tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    backward(EW.mul(st, w).sum() + EW.mul(st3, w[:3]).sum() + s)
    assert [None if x.grad is None else float(x.grad.data) for x in xs] == [1.0, None, 3.0 + 2.0, None, 5.0, None]
    assert np.isclose(float(a.grad.data), 1 / (1 + np.exp(-1.5)))


def test_a_stale_multi_output_view_in_a_tensor_list_is_refused_and_nothing_is_applied():
    """Tensor lists are converted inline; a view among the names is still looked at: torch's refusal of an
    output of unbind whose base was modified in place, the op's index, nothing bound."""
    from gradserve_server.engine.errors import TorchRuntimeError
    from gradserve_server.engine.program import State, run_program
    st = State()
    st.tensors = {"x": tensor([1.0, 2.0], requires_grad=True)}
    ops = [{"op": "mul", "args": ["x", 1.0], "out": "a"}, {"op": "unbind", "args": ["a"], "out": ["u0", "u1"]},
           {"op": "mul_", "args": ["a", 2.0]}, {"op": "stack", "args": [["u1", "u0", "u1"]], "out": "s"}]
    with pytest.raises(TorchRuntimeError) as err:
        run_program(st, ops)
    assert str(err.value).startswith("Output 1 of Unbind is a view and its base or another view of its base has "
                                     "been modified inplace. This view is the output of a function that returns "
                                     "multiple views.")
    assert err.value.op_index == 3 and sorted(st.tensors) == ["x"]
    res = run_program(st, ops[:2] + [{"op": "stack", "args": [["u1", "u0", "u1"]], "out": "s"}])
    assert res.changed == ["a", "u0", "u1", "s"] and st.tensors["s"].grad_fn.name == "StackBackward0"


# ----- the backward pass's fast paths (gradserve_server/engine/autograd.py _run_all,
# gradserve_server/engine/ops/shape.py _broadcast_to) -------------

_BROADCASTS = [((), (4,)), ((), ()), ((), (2, 3)), ((1,), (5,)), ((3, 1), (3, 4)), ((1, 3), (2, 1, 3)),
               ((1, 1), (1, 1)), ((1,), (1,)), ((2, 1, 1), (2, 1, 5)), ((3,), (0, 3)), ((1,), (0,)), ((0,), (3, 0)),
               ((4,), (4,)), ((2, 3), (5, 2, 3)), ((0, 1), (0, 4))]


@pytest.mark.parametrize("src, shape", _BROADCASTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_expand_kernel_is_np_broadcast_to_exactly(src, shape, dtype):
    """The same view: values, strides (0 along every new or size-1 dimension), flags (read-only), base."""
    base = np.arange(int(np.prod(src)) + 3).astype(dtype)
    arrays = [base[:int(np.prod(src))].reshape(src), base[3:].reshape(src)]  # a base array's view, an offset view
    ro = arrays[0].copy()
    ro.flags.writeable = False
    arrays.append(ro)
    if src and src[-1] > 1:
        arrays.append(np.arange(2 * int(np.prod(src))).astype(dtype).reshape(*src[:-1], 2 * src[-1])[..., ::2])
    for a in arrays:
        want, got = np.broadcast_to(a, shape), S._broadcast_to(a, shape)
        assert got.shape == want.shape and got.dtype == want.dtype and got.strides == want.strides
        assert got.flags == want.flags and got.base is want.base
        assert np.array_equal(got, want)


def _graph(n_groups: int = 6):
    """A graph with shared subexpressions (nodes of several consumers), a multi-output node (unbind) and a
    leaf reached along several paths, whose gradient sums contributions in the order the nodes ran."""
    rng = np.random.default_rng(0)
    leaves = [tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True) for _ in range(4)]
    outs = []
    for g in range(n_groups):
        a = EW.mul(leaves[g % 4], float(g + 1))
        b = EW.tanh(EW.add(a, leaves[(g + 1) % 4]))
        parts = S.unbind(S.stack([a, b]), 0)
        outs.append(EW.mul(parts[0], parts[1]))
        outs.append(EW.sin(a))
    from gradserve_server.engine.ops.reduction import sum as sum_
    return leaves, sum_(S.stack(outs))


def test_backward_runs_nodes_in_the_topological_order(monkeypatch):
    """A backward without ``inputs`` runs nodes as they become ready: the order ``_topological`` gives (the
    order decides how several contributions to one gradient are summed, and which error comes first)."""
    from gradserve_server.engine import autograd as A
    leaves, root = _graph()
    want = [n for n in A._topological([root.grad_fn]) if n.prim != "AccumulateGrad"]
    ran = []
    monkeypatch.setattr(A, "release_all", lambda nodes: ran.extend(nodes))
    backward(root, retain_graph=False)
    assert ran == want and len(ran) > 30
    # the general loop (the pass pruned to ``inputs``, here every leaf) runs them in that order too
    leaves, root = _graph()
    ran.clear()
    backward(root, inputs=leaves)
    assert ran == [n for n in A._topological([root.grad_fn]) if n.prim != "AccumulateGrad"]


def test_backward_fast_path_matches_the_pruned_pass_bit_for_bit():
    leaves, root = _graph()
    backward(root)
    fast = [x.grad.data.copy() for x in leaves]
    leaves2, root2 = _graph()
    backward(root2, inputs=leaves2)  # every leaf asked for: the general loop, the same values
    for a, x in zip(fast, leaves2):
        assert a.tobytes() == x.grad.data.tobytes()


def _lanes(roots_of):
    """A graph through each of ``_run_all``'s lanes: a multi-output node whose one edge delivers (a chunk of which
    one piece is used), one that gets its gradients over several edges (an unbind whose pieces are used twice),
    a leaf reached along several paths, and the roots ``roots_of(root, mid, pieces)`` picks: ``mid`` is reached
    from ``root`` (a root whose gradient is a partial sum), ``pieces`` are two outputs of one node."""
    rng = np.random.default_rng(1)
    leaves = [tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True) for _ in range(4)]
    from gradserve_server.engine.ops.reduction import sum as sum_
    c = S.chunk(EW.mul(leaves[0], leaves[1]), 2)
    w = EW.sin(c[1])
    pieces = S.unbind(EW.mul(leaves[2], leaves[3]), 0)
    mid = sum_(EW.mul(w, pieces[0]))
    root = sum_(S.stack([EW.mul(mid, 2.0), EW.mul(pieces[0], pieces[2]), EW.sin(pieces[2]),
                         sum_(EW.mul(leaves[1], 3.0))]))
    roots = roots_of(root, mid, pieces)
    return leaves, roots, [Tensor(np.ones(r.data.shape, np.float32)) for r in roots]


@pytest.mark.parametrize("roots_of", [lambda root, mid, pieces: [root], lambda root, mid, pieces: [root, mid],
                                      lambda root, mid, pieces: [mid, root, mid],
                                      lambda root, mid, pieces: [pieces[2], pieces[0]]],
                         ids=["one", "reached", "reached_twice", "one_node"])
def test_backward_fast_path_lanes_match_the_pruned_pass(roots_of, monkeypatch):
    from gradserve_server.engine import autograd as A
    leaves, roots, seeds = _lanes(roots_of)
    want = [n for n in A._topological([r.grad_fn for r in roots]) if n.prim != "AccumulateGrad"]
    ran = []
    monkeypatch.setattr(A, "release_all", lambda nodes: ran.extend(nodes))
    backward(roots, seeds)
    assert ran == want
    fast = [None if x.grad is None else x.grad.data.copy() for x in leaves]
    leaves2, roots2, seeds2 = _lanes(roots_of)
    backward(roots2, seeds2, inputs=leaves2)  # the general loop
    for a, x in zip(fast, leaves2):
        assert (a is None) == (x.grad is None) and (a is None or a.tobytes() == x.grad.data.tobytes())
    assert sum(a is not None for a in fast) >= 2


@pytest.mark.parametrize("pruned", [False, True])
def test_a_leaf_that_no_longer_requires_grad_gets_no_grad(pruned):
    """torch's AccumulateGrad skips a leaf whose requires_grad was turned off after the graph saw it: no .grad,
    no accumulation; the other leaves get theirs, in the full pass as in the one pruned to ``inputs``."""
    from gradserve_server.engine.ops.reduction import sum as sum_
    x = tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    w = tensor(np.array([0.5, -1.0, 2.0], np.float32), requires_grad=True)
    loss = sum_(EW.add(EW.mul(x, w), EW.sin(x)))
    x.requires_grad_(False)
    backward(loss, inputs=[w] if pruned else None)
    assert x.grad is None and x.grad_accumulations == 0
    assert w.grad is not None and w.grad_accumulations == 1
    assert w.grad.data.tobytes() == np.array([1.0, 2.0, 3.0], np.float32).tobytes()


def test_signature_memo_of_a_list_of_ints_reads_its_classes_not_its_values():
    """A shape or dims given as a list or tuple of ints is remembered as such (``x.reshape((2, 3))`` again: no
    parse), a huge int in it is still refused, an empty list is told apart from one of ints (a tensor list's
    parameter takes the one, refuses the other with torch's message), and a list of floats is parsed anew."""
    import gradserve_server.engine.torch_args as TA
    from gradserve_server.engine.errors import EngineError, TorchTypeError, TorchValueError
    from gradserve_server.engine.program import State, run_program
    st = State()
    st.tensors = {"x": tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])}
    run_program(st, [{"op": "reshape", "args": ["x", [2, 3]], "out": "y"}])
    parsed = []
    real = TA.parse
    TA.parse = lambda *a: parsed.append(a[0].name) or real(*a)
    try:
        run_program(st, [{"op": "reshape", "args": ["x", [3, 2]], "out": "y"}])
        assert st.tensors["y"].data.shape == (3, 2) and not parsed
        with pytest.raises((TorchTypeError, TorchValueError)):
            run_program(st, [{"op": "reshape", "args": ["x", [2, 1 << 70]]}])
        with pytest.raises(EngineError):
            run_program(st, [{"op": "reshape", "args": ["x", [2.0, 3.0]]}])
    finally:
        TA.parse = real
    with pytest.raises(Exception) as err:  # noqa: PT011 - the empty list is the op's to refuse
        run_program(st, [{"op": "cat", "args": [[]]}])
    with pytest.raises(EngineError) as err:
        run_program(st, [{"op": "cat", "args": [[1, 2]]}])
    assert "expected Tensor as element 0" in str(err.value)
