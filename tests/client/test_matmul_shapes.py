"""``matmul``'s result shape and its shape errors, decided by the client at the line (``_meta.matmul_shape``),
against torch's for random operand shapes of one to four dimensions (batched, folded, broadcast, empty). Without
torch, ``scenarios/eager.txt``'s matmul lines check the same through a server."""

from __future__ import annotations

import random

import pytest

from gradserve.torch import _meta

torch = pytest.importorskip("torch")


def _outcome(fn, *args):
    try:
        return tuple(fn(*args))
    except RuntimeError as e:
        return str(e)


def _torch_shape(fn, *args):
    return fn(*args).shape


@pytest.mark.parametrize("seed", range(20))
def test_matmul_shapes_and_errors_are_torchs(seed):
    rng = random.Random(seed)
    for _ in range(100):
        a, b = (tuple(rng.choice([0, 1, 2, 3]) if rng.random() < 0.15 else rng.choice([1, 2, 3])
                      for _ in range(rng.randrange(1, 5))) for _ in range(2))
        ta, tb = torch.ones(a), torch.ones(b)
        if rng.random() < 0.3 and len(b) >= 2:  # (a transposed batch of matrices: folding it would copy)
            tb = torch.ones((*b[:-2], b[-1], b[-2])).transpose(-1, -2)
        grads = (rng.random() < 0.2, rng.random() < 0.2)
        ta.requires_grad_(grads[0])
        tb.requires_grad_(grads[1])
        want = _outcome(_torch_shape, torch.matmul, ta, tb)
        got = _outcome(_meta.matmul_shape, a, b, True, (ta.stride(), tb.stride()), grads)
        assert got == want, (a, b, tb.stride(), grads)
        if len(a) == 2 and len(b) == 2:
            assert _outcome(_meta.matmul_shape, a, b, False) == _outcome(_torch_shape, torch.mm, ta, tb)
