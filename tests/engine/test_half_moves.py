"""Ops that only move elements (copies, joins, slices, gathers) keep a float16/bfloat16 element's bits, NaN payloads
included, as torch's do: the engine runs them on the half arrays as they are (``kernel.MOVES``), not through
float32 (ml_dtypes' rounding from float32 makes a bfloat16 NaN the canonical one). A move is checked against the
same move of the bits as int16: ``op(h).view(int16) == op(h.view(int16))``; with torch installed, against torch."""

from __future__ import annotations

import pytest

from gradserve_server.engine.torch_compat import torch as etorch

#: NaNs with payloads (quiet and signalling, both signs), 1.0, a subnormal, an infinity's neighbours
BITS = [0x7FA1, -0x004D, 0x7F81, 0x3F80, -0x003F, 0x0001, 0x7C01, -0x01FF]

MOVES = {
    "clone": "r = h.clone()",
    "contiguous_of_transposed": "r = h.reshape(2, 4).t().contiguous()",
    "reshape_copy": "r = h.reshape(2, 4).t().reshape(8)",
    "setitem": "r = torch.zeros(8, dtype=h.dtype)\nr[:] = h",
    "copy_": "r = torch.zeros(8, dtype=h.dtype)\nr.copy_(h)",
    "cat": "r = torch.cat([h, h.flip(0)])",
    "stack": "r = torch.stack([h, h], 1)",
    "index_select": "r = h.index_select(0, torch.tensor([1, 0, 3]))",
    "advanced_index": "r = h[torch.tensor([2, 1, 7])]",
    "gather": "r = h.gather(0, torch.tensor([2, 1]))",
    "repeat": "r = h.repeat(2)",
    "roll": "r = h.roll(1)",
    "expand_clone": "r = h[:1].expand(3).clone()",
    "split_clone": "r = h.split(3)[1].clone()",
    "movedim": "r = h.reshape(2, 4).movedim(0, 1).contiguous()",
}


def _run(torch_mod, dtype: str, code: str, as_bits: bool):
    h = torch_mod.tensor(BITS, dtype=torch_mod.int16)
    ns = {"torch": torch_mod, "h": h if as_bits else h.view(getattr(torch_mod, dtype))}
    exec(code, ns)  # noqa: S102 - the table's torch code
    r = ns["r"]
    return (r if as_bits or r.dtype == torch_mod.bool else r.contiguous().view(torch_mod.int16)).tolist()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(MOVES))
def test_a_move_keeps_every_bit_of_a_half_element(name, dtype):
    got = _run(etorch, dtype, MOVES[name], False)
    assert got == _run(etorch, dtype, MOVES[name], True)
    torch = pytest.importorskip("torch")
    assert got == _run(torch, dtype, MOVES[name], False)
