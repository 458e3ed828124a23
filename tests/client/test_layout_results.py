"""The layouts of results the client lays out without following its inputs' (linear algebra's, nonzero's) and of
the pieces of split, chunk, unbind and tensor_split, against torch's, through a server: random inputs of random
layouts, every result's ``stride()``, ``storage_offset()``, ``is_contiguous()`` and whether ``view(-1)`` fails.
Without torch, ``scenarios/eager.txt``'s lines on these check the same."""

from __future__ import annotations

import random

import numpy as np
import pytest

import gradserve.torch as gtorch

torch = pytest.importorskip("torch")


def _pair(rng: random.Random, shape: tuple, spd: bool = False):
    """The same values as a torch tensor and a client one, laid out by the same random permutation."""
    a = np.random.default_rng(rng.randrange(10**6)).normal(size=shape)
    if spd:  # (symmetric positive definite, for cholesky)
        a = a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])
    perm = rng.sample(range(len(shape)), len(shape))
    back = [perm.index(d) for d in range(len(shape))]
    stored = np.ascontiguousarray(np.transpose(a, perm))
    want = torch.zeros(stored.shape, dtype=torch.float64).copy_(torch.from_numpy(stored))  # (row-major, empty too)
    return want.permute(back), gtorch.tensor(stored).permute(back)


def _views(r) -> list:
    """Whether ``r.view(-1)`` and ``r.transpose(-2, -1).view(-1)`` succeed (a view the client lets through and
    the server's layout refuses fails at the sync after it)."""
    out = []
    for t in (r, r.transpose(-2, -1)) if r.dim() >= 2 else (r,):
        try:
            t.view(-1)
            out.append(True)
        except RuntimeError as e:
            assert "view size is not compatible" in str(e)
            out.append(False)
    r.sum().item()
    return out


def _layouts(results) -> list:
    return [(tuple(r.shape), r.stride(), r.storage_offset(), r.is_contiguous(), _views(r))
            for r in (results if isinstance(results, tuple) else (results,))]


def _linalg_call(rng: random.Random):
    """(name, shapes, call, needs an spd input) of a random linear algebra call."""
    batch = rng.choice([(), (2,), (1,), (3, 2), (0,)])
    n = rng.choice([1, 2, 3])
    m = rng.choice([1, 2, 4])
    k = rng.choice([1, 3])
    left = rng.random() < 0.7
    calls = [
        ("inv", [(*batch, n, n)], lambda t, a: t.linalg.inv(a), False),
        ("inverse", [(*batch, n, n)], lambda t, a: t.inverse(a), False),
        ("cholesky", [(*batch, n, n)], lambda t, a: t.linalg.cholesky(a), True),
        ("solve", [(*batch, n, n), (*batch, n, k) if left else (*batch, k, n)],
         lambda t, a, b: t.linalg.solve(a + 3 * t.eye(n, dtype=t.float64), b, left=left), False),
        ("solve vector", [(*batch, n, n), (n,)], lambda t, a, b: t.linalg.solve(a + 3 * t.eye(n, dtype=t.float64), b),
         False),
        ("svd", [(*batch, m, n)], lambda t, a: tuple(t.linalg.svd(a, full_matrices=left)), False),
        ("torch.svd", [(*batch, m, n)], lambda t, a: tuple(t.svd(a, some=left)), False),
        ("torch.svd no uv", [(*batch, m, n)], lambda t, a: tuple(t.svd(a, compute_uv=False)), False),
        ("svdvals", [(*batch, m, n)], lambda t, a: t.linalg.svdvals(a), False),
        ("det", [(*batch, n, n)], lambda t, a: t.linalg.det(a), False),
        ("slogdet", [(*batch, n, n)], lambda t, a: tuple(t.linalg.slogdet(a)), False),
        ("matmul", [(*batch, m, n), (n, k)], lambda t, a, b: a @ b, False),
        ("nonzero", [(*batch, m, n)], lambda t, a: t.nonzero(a > 0.3), False),
        ("nonzero as_tuple", [(*batch, m, n)], lambda t, a: t.nonzero(a > 0.3, as_tuple=True), False),
    ]
    return rng.choice(calls)


@pytest.mark.parametrize("seed", range(60))
def test_linear_algebra_and_nonzero_results_are_laid_out_as_torchs(ctx, seed):
    rng = random.Random(seed)
    name, shapes, call, spd = _linalg_call(rng)
    pairs = [_pair(rng, s, spd) for s in shapes]
    want = _layouts(call(torch, *[p[0] for p in pairs]))
    got = _layouts(call(gtorch, *[p[1] for p in pairs]))
    assert got == want, (name, shapes)


@pytest.mark.parametrize("seed", range(40))
def test_matmul_of_a_matrix_that_requires_grad_by_a_batch_is_laid_out_as_torchs_transposed_fold(ctx, seed):
    rng = random.Random(seed)
    batch = rng.choice([(2,), (1,), (0,), (3, 2)])
    n, k, p = rng.choice([0, 1, 2, 3]), rng.choice([1, 3]), rng.choice([0, 1, 2, 4])
    grad, left = rng.random() < 0.7, rng.random() < 0.7
    shapes = [(n, k), (*batch, k, p)] if left else [(*batch, n, k), (k, p)]
    pairs = [_pair(rng, s) for s in shapes]
    results = []
    for i in range(2):  # (torch, the client)
        a, b = (pair[i].detach() for pair in pairs)
        (a if left else b).requires_grad_(grad)
        results.append(_layouts(a @ b))
    assert results[1] == results[0], (shapes, grad)


def _reduction_call(rng: random.Random, shape: tuple):
    """(name, call) of a reduction, scan, softmax, cat or flip of a tensor of ``shape`` (any layout)."""
    n = len(shape)
    d = rng.randrange(-n, n)
    dims = sorted(rng.sample(range(n), rng.randrange(1, n + 1)))
    keep = rng.random() < 0.5
    calls = [
        ("sum", lambda t, a: a.sum(dims, keepdim=keep)), ("mean", lambda t, a: t.mean(a, dims, keepdim=keep)),
        ("amax", lambda t, a: a.amax(dims, keepdim=keep)), ("var", lambda t, a: a.var(dims, keepdim=keep)),
        ("prod", lambda t, a: a.prod(d, keepdim=keep)), ("logsumexp", lambda t, a: a.logsumexp(dims, keepdim=keep)),
        ("max dim", lambda t, a: tuple(a.max(d, keepdim=keep))), ("argmax", lambda t, a: a.argmax(d, keepdim=keep)),
        ("median dim", lambda t, a: tuple(a.median(d, keepdim=keep))), ("sum all", lambda t, a: a.sum()),
        ("norm", lambda t, a: a.norm(dim=d, keepdim=keep)), ("std", lambda t, a: a.std(d, keepdim=keep)),
        ("softmax", lambda t, a: a.softmax(d)), ("log_softmax", lambda t, a: t.log_softmax(a, d)),
        ("cumsum", lambda t, a: a.cumsum(d)), ("cumprod", lambda t, a: t.cumprod(a, d)),
        ("logcumsumexp", lambda t, a: a.logcumsumexp(d)), ("flip", lambda t, a: a.flip(d)),
        ("cat", lambda t, a: t.cat([a, a], d)), ("cat of a copy", lambda t, a: t.cat([a, a.contiguous()], d)),
    ]
    return rng.choice(calls)


@pytest.mark.parametrize("seed", range(120))
def test_reductions_scans_softmax_and_cat_of_any_layout_are_laid_out_as_torchs(ctx, seed):
    rng = random.Random(seed)
    shape = tuple(rng.choice([1, 2, 3, 4]) for _ in range(rng.choice([1, 2, 3, 4, 4, 5])))
    want_t, got_t = _pair(rng, shape)
    name, call = _reduction_call(rng, shape)
    want = _layouts(call(torch, want_t))
    got = _layouts(call(gtorch, got_t))  # (stride() raised NotImplementedError here: no layout known)
    assert got == want, (name, shape, want_t.stride())


@pytest.mark.parametrize("dims", [4, 5])
def test_cat_of_channels_last_inputs_is_channels_last_as_torchs(ctx, dims):
    """torch's cat keeps its inputs' suggested memory format when they share one; the server's array agrees (a view
    of the result permuted to channels innermost succeeds there too)."""
    shape = (2, 3, 4, 5, 2)[:dims]
    inner = (0, *range(2, dims), 1)
    back = [inner.index(d) for d in range(dims)]
    outs = []
    for t in (torch, gtorch):
        a = t.ones([shape[d] for d in inner]).permute(back)  # (channels innermost)
        both, mixed = t.cat([a, a * 2], 0), t.cat([a, t.ones(shape)], 1)
        flat = both.permute(*inner).view(-1)
        outs.append([both.stride(), both.is_contiguous(), mixed.stride(), flat.shape, float(flat.sum())])
    assert outs[1] == outs[0] and outs[0][0] != outs[0][2]


def _pieces_call(rng: random.Random, shape: tuple):
    d = rng.randrange(-len(shape), len(shape))
    n = shape[d]
    sizes = [rng.randrange(n + 1)]
    sizes.append(n - sizes[0])
    rng_size = rng.randrange(1, 4)
    chunks = rng.randrange(1, 5)
    indices = [rng.randrange(-n - 2, n + 3) for _ in range(rng.randrange(4))]
    calls = [
        ("split", lambda t, a: t.split(a, rng_size, d)),
        ("split sections", lambda t, a: a.split(sizes, d)),
        ("chunk", lambda t, a: t.chunk(a, chunks, d)),
        ("unbind", lambda t, a: a.unbind(d)),
        ("tensor_split", lambda t, a: t.tensor_split(a, chunks, d)),
        ("tensor_split indices", lambda t, a: t.tensor_split(a, indices, d)),
    ]
    return rng.choice(calls)


@pytest.mark.parametrize("seed", range(60))
def test_pieces_of_split_chunk_unbind_tensor_split_are_views_laid_out_as_torchs(ctx, seed):
    rng = random.Random(seed)
    shape = tuple(rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randrange(1, 4)))
    want_t, got_t = _pair(rng, shape)
    if rng.random() < 0.4:  # (a view of a view: its offset carries on)
        key = tuple(slice(1, None) if n > 1 else slice(None) for n in shape)
        want_t, got_t = want_t[key], got_t[key]
    name, call = _pieces_call(rng, tuple(want_t.shape))
    want = _layouts(call(torch, want_t))
    got = _layouts(call(gtorch, got_t))
    assert got == want, (name, shape)


def test_layouts_of_linalg_results_and_pieces_need_no_request_where_the_input_shape_is_known(ctx):
    a = gtorch.eye(3).expand(2, 3, 3)
    pieces = gtorch.ones(4, 6).t().split(2)  # (split sends: its number of pieces is the server's)
    inv, det = gtorch.linalg.inv(a), gtorch.linalg.det(a)
    pending = len(ctx.recorder().pending)
    assert pieces[1].stride() == (1, 6) and pieces[1].storage_offset() == 2 and pieces[2].shape == (2, 4)
    assert inv.stride() == (9, 1, 3) and not inv.is_contiguous() and det.stride() == (1,)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        inv.view(18)
    assert len(ctx.recorder().pending) == pending
