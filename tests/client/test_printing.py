"""The client prints tensors as torch does, with the server's own formatter (one file, two copies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gradserve.torch._printing import format_tensor

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    (np.float32(2.0), "float32", None, True, "tensor(2., requires_grad=True)"),
    (np.array([4.0, 6.0], np.float32), "float32", None, False, "tensor([4., 6.])"),
    (np.array([8.0, 12.0], np.float32), "float32", None, False, "tensor([ 8., 12.])"),
    (np.array([9.0], np.float32), "float32", "PowBackward0", True, "tensor([9.], grad_fn=<PowBackward0>)"),
    (np.array([[2.0, 4.0], [6.0, 8.0]], np.float32), "float32", None, False, "tensor([[2., 4.],\n        [6., 8.]])"),
    (np.array([0.5, 1.25], np.float64), "float64", None, False, "tensor([0.5000, 1.2500], dtype=torch.float64)"),
    (np.array([1, 2, 3]), "int64", None, False, "tensor([1, 2, 3])"),
    (np.array([True, False]), "bool", None, False, "tensor([ True, False])"),
    (np.array([1e-5, 1.0], np.float32), "float32", None, False, "tensor([1.0000e-05, 1.0000e+00])"),
    (np.zeros((0, 2), np.float32), "float32", None, False, "tensor([], size=(0, 2))"),
]


def test_the_client_formatter_is_the_server_formatter():
    """One file: the client's _printing.py is a link to the engine's printing.py (packaged as a real file, see
    tests/deploy/test_packages.py), which imports nothing of either package."""
    engine = ROOT / "gradserve_server" / "engine" / "printing.py"
    client = ROOT / "client" / "gradserve" / "torch" / "_printing.py"
    assert client.is_symlink() and client.resolve() == engine.resolve()
    imports = [line for line in engine.read_text().splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations", "import math", "import numpy as np"]


@pytest.mark.parametrize(("a", "dtype", "grad_fn", "requires_grad", "want"), CASES)
def test_repr_strings_are_torch_s(a, dtype, grad_fn, requires_grad, want):
    assert format_tensor(np.asarray(a), dtype, grad_fn, requires_grad) == want


def test_repr_agrees_with_torch_on_many_values():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np.float32) * scale for s in [(), (3,), (2, 3), (4, 5, 2), (1200,)]
              for scale in (1, 1e-6, 1e6)]
    arrays += [rng.integers(-50, 50, size=(3, 4)), np.array([np.nan, np.inf, -1.0], np.float32),
               rng.normal(size=(3,)), np.round(rng.normal(size=(5,)) * 10).astype(np.float32)]
    for a in arrays:
        t = torch.from_numpy(np.array(a))
        dtype = str(t.dtype).removeprefix("torch.")
        assert format_tensor(np.asarray(a), dtype, None, False) == repr(t), a
