"""Writes ``tests/fixtures/torch_checkpoint.pt`` and ``torch_half_checkpoint.pt`` (float16 and bfloat16
tensors, a half model's state dict) with real torch (2.13) and, beside each, what torch reads back from it
(``.json``), so that the client's ``torch.load`` is checked against a file torch wrote
where torch is not installed. Run it by hand: ``.venv/bin/python -m tests.client.checkpoint_fixture``."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHECKPOINT = FIXTURES / "torch_checkpoint.pt"
EXPECTED = FIXTURES / "torch_checkpoint.json"
HALF_CHECKPOINT = FIXTURES / "torch_half_checkpoint.pt"
HALF_EXPECTED = FIXTURES / "torch_half_checkpoint.json"
#: float16 and bfloat16 NaNs with payloads (torch wrote them; their bits are ``NAN_BITS``, as int16)
NAN_CHECKPOINT = FIXTURES / "torch_nan_payloads.pt"
NAN_BITS = {"float16": [0x7C01, 0x7E55, -0x01FF, 0x7FFF, 0x7E00, 0x3C00],
            "bfloat16": [0x7FC1, -0x007F, 0x7F81, 0x7FFF, 0x7FC0, 0x3F80]}


def describe(value):
    """A JSON description of a loaded value (tensors by dtype, shape, values and requires_grad)."""
    import gradserve.torch as gtorch

    tensor_types = [gtorch.Tensor]
    try:
        import torch

        tensor_types.append(torch.Tensor)
    except ImportError:
        pass
    if isinstance(value, tuple(tensor_types)):
        return {"tensor": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "values": value.detach().tolist(), "requires_grad": bool(value.requires_grad),
                "parameter": type(value).__name__ == "Parameter"}
    if isinstance(value, dict):
        return {"dict": type(value).__name__, "items": [[k, describe(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)) and type(value).__name__ not in ("Size",):
        return {type(value).__name__: [describe(v) for v in value]}
    if type(value).__name__ in ("Size", "dtype", "device"):
        return {type(value).__name__: str(value)}
    return value


def build():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randn(5, 3)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7, "loss": 0.25,
            "view": torch.arange(12).reshape(3, 4)[1:, ::2], "flags": torch.tensor([True, False]),
            "double": torch.tensor([[1.5, -2.0]], dtype=torch.float64), "param": torch.nn.Parameter(torch.ones(2)),
            "leaf": torch.zeros(2, requires_grad=True), "names": ["a", "b"], "shape": torch.Size([2, 3]),
            "dtype": torch.float64, "scalar": torch.tensor(3.0), "empty": torch.zeros(0, 2)}


def build_half():
    import torch

    torch.manual_seed(0)
    x = torch.randn(4, 3) * 100  # (values whose float16 and bfloat16 roundings differ from float32's)
    special = torch.tensor([0.0, -0.0, 1e-7, 65504.0, 1e5, float("inf"), -float("inf"), 2**-24, 3e38])
    half = torch.nn.Linear(3, 2).half()
    bf = torch.nn.Linear(3, 2).bfloat16()
    return {"f16": x.half(), "bf16": x.bfloat16(), "f16_view": x.half().t()[1:], "bf16_view": x.bfloat16()[:, 2],
            "f16_special": special.half(), "bf16_special": special.bfloat16(),
            "half_model": half.state_dict(), "bf16_model": bf.state_dict(),
            "bf16_param": torch.nn.Parameter(torch.tensor([1.5, -2.25]).bfloat16()),
            "f16_leaf": torch.tensor([0.1, 0.2], dtype=torch.float16, requires_grad=True),
            "bf16_scalar": torch.tensor(0.1, dtype=torch.bfloat16), "f16_empty": torch.zeros(0, 2).half(),
            "dtypes": [torch.float16, torch.bfloat16, torch.half]}


def build_nans():
    import torch

    out = {}
    for name, bits in NAN_BITS.items():
        t = torch.tensor(bits, dtype=torch.int16).view(getattr(torch, name))
        out[name] = t.clone()
        out[name + "_leaf"] = t.clone().requires_grad_()
        out[name + "_param"] = torch.nn.Parameter(t.clone())
    return out


def main() -> None:
    import torch

    assert torch.__version__.startswith("2.13"), torch.__version__
    for obj, path, expected in ((build(), CHECKPOINT, EXPECTED), (build_half(), HALF_CHECKPOINT, HALF_EXPECTED)):
        torch.save(obj, path)
        expected.write_text(json.dumps(describe(torch.load(path))) + "\n")
    torch.save(build_nans(), NAN_CHECKPOINT)
    for key, t in torch.load(NAN_CHECKPOINT).items():
        assert t.view(torch.int16).tolist() == NAN_BITS[key.split("_")[0]], key


if __name__ == "__main__":
    main()
