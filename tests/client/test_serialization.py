"""torch.save / torch.load in torch's file format (issue 23 item 4), against a real server: a file torch 2.13
wrote (committed, with what torch read from it) loads in the client; the client's files load back; loading runs
no code from the file; modules' and optimizers' state dicts. Live torch comparisons: test_serialization_torch.py."""

from __future__ import annotations

import io
import json
import pickle
import zipfile

import pytest

import gradserve.torch as torch
from gradserve.torch import nn, optim
from tests.client.checkpoint_fixture import (
    CHECKPOINT,
    EXPECTED,
    HALF_CHECKPOINT,
    HALF_EXPECTED,
    NAN_BITS,
    NAN_CHECKPOINT,
    describe,
)


def test_a_file_torch_wrote_loads_with_torch_s_values(ctx):
    loaded = torch.load(CHECKPOINT)
    assert describe(loaded) == json.loads(EXPECTED.read_text())
    assert loaded["model"]._metadata[""] == {"version": 1}
    assert isinstance(loaded["param"], nn.Parameter) and loaded["leaf"].is_leaf
    assert loaded["view"].tolist() == [[4, 6], [8, 10]]  # a view (offset 4, strides 4 and 2) of its storage


def test_a_file_torch_wrote_loads_into_a_model_and_optimizer(ctx):
    ckpt = torch.load(CHECKPOINT, map_location="cpu", weights_only=True)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert repr(model.load_state_dict(ckpt["model"])) == "<All keys matched successfully>"
    assert list(model.parameters())[0].tolist() == ckpt["model"]["0.weight"].tolist()
    opt = optim.Adam(model.parameters(), lr=0.5)
    opt.load_state_dict(ckpt["optimizer"])
    assert opt.param_groups[0]["lr"] == 0.01 and opt.state[list(model.parameters())[0]]["step"] == 2
    before = list(model.parameters())[0].tolist()
    opt.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert list(model.parameters())[0].tolist() != before


def test_a_half_precision_file_torch_wrote_loads_with_torch_s_values(ctx):
    loaded = torch.load(HALF_CHECKPOINT)
    assert describe(loaded) == json.loads(HALF_EXPECTED.read_text())  # float16/bfloat16 values exactly
    assert loaded["f16"].dtype is torch.float16 and loaded["bf16_view"].dtype is torch.bfloat16
    assert loaded["dtypes"] == [torch.float16, torch.bfloat16, torch.float16]
    assert isinstance(loaded["bf16_param"], nn.Parameter) and loaded["f16_leaf"].is_leaf
    # the loaded tensors compute in their dtype on the server
    assert (loaded["bf16"] * 2).dtype is torch.bfloat16
    assert (loaded["f16"] * 2).tolist() == [[2 * v for v in row] for row in loaded["f16"].tolist()]


def test_a_half_model_loads_torch_s_half_state_dict(ctx):
    ckpt = torch.load(HALF_CHECKPOINT)
    for key, dtype in (("half_model", torch.float16), ("bf16_model", torch.bfloat16)):
        model = nn.Linear(3, 2).to(dtype)
        assert repr(model.load_state_dict(ckpt[key])) == "<All keys matched successfully>"
        assert model.weight.dtype is dtype and model.weight.tolist() == ckpt[key]["weight"].tolist()


def _storage_bits(data: bytes) -> dict:
    """A file's storages' bytes, by the key under ``data/``."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n.rsplit("/", 1)[1]: z.read(n) for n in z.namelist() if n.rsplit("/", 2)[-2] == "data"}


def test_half_nans_load_and_save_bit_for_bit(ctx):
    """float16 and bfloat16 NaNs (both signs, quiet and signalling, with payloads) that torch wrote load with their
    bits, as leaves and parameters, and the client's file holds the same bytes (torch reads it: the bits of
    test_serialization_torch.py's round trip)."""
    loaded = torch.load(NAN_CHECKPOINT)
    for key, t in loaded.items():
        name = key.split("_")[0]
        assert t.dtype is getattr(torch, name) and t.view(torch.int16).tolist() == NAN_BITS[name], key
        assert t.is_leaf and t.requires_grad == (not key.endswith(name)), key
    assert isinstance(loaded["bfloat16_param"], nn.Parameter)
    out = io.BytesIO()
    torch.save(loaded, out)
    with open(NAN_CHECKPOINT, "rb") as f:
        assert sorted(_storage_bits(out.getvalue()).values()) == sorted(_storage_bits(f.read()).values())


def _round_trip(obj, path=None):
    if path is not None:
        torch.save(obj, path)
        return torch.load(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf)


def test_the_client_s_files_load_back(ctx, tmp_path):
    obj = {"x": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "ids": torch.tensor([3, 1]), "mask": torch.tensor([True]),
           "d": torch.tensor([0.1], dtype=torch.float64), "nested": [torch.zeros(0), (1, "a", None)],
           "p": nn.Parameter(torch.ones(2)), "size": torch.Size([1, 2]), "dtype": torch.int64, "scalar": 2.5}
    for back in (_round_trip(obj), _round_trip(obj, tmp_path / "ckpt.pt")):
        assert back["x"].tolist() == [[1.0, 2.0], [3.0, 4.0]] and back["ids"].dtype == torch.int64
        assert back["mask"].tolist() == [True] and back["d"].dtype == torch.float64
        assert back["nested"][0].shape == torch.Size([0]) and back["nested"][1] == (1, "a", None)
        assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
        assert back["size"] == torch.Size([1, 2]) and back["dtype"] is torch.int64 and back["scalar"] == 2.5
    half = {"h": torch.tensor([0.1, -65504.0, 6e-8], dtype=torch.float16),
            "b": torch.tensor([[0.1, 3e38], [-1e-38, 7.0]]).bfloat16(), "bp": nn.Parameter(torch.ones(2).bfloat16()),
            "e": torch.zeros(0, 3, dtype=torch.bfloat16), "s": torch.tensor(0.3, dtype=torch.bfloat16),
            "dt": [torch.float16, torch.bfloat16], "i": torch.tensor([-3, 7], dtype=torch.int8)}
    back = _round_trip(half)
    for k in ("h", "b", "e", "s", "i"):
        assert back[k].dtype is half[k].dtype and back[k].tolist() == half[k].tolist(), k
    assert isinstance(back["bp"], nn.Parameter) and back["bp"].dtype is torch.bfloat16
    assert back["dt"] == [torch.float16, torch.bfloat16]
    names = zipfile.ZipFile(tmp_path / "ckpt.pt").namelist()
    assert names[:4] == ["ckpt/data.pkl", "ckpt/.format_version", "ckpt/.storage_alignment", "ckpt/byteorder"]
    assert "ckpt/data/0" in names and names[-2:] == ["ckpt/version", "ckpt/.data/serialization_id"]


def test_entries_are_stored_aligned_to_64_bytes(ctx):
    buf = io.BytesIO()
    torch.save({"a": torch.ones(3), "b": torch.zeros(5)}, buf)
    raw = buf.getvalue()
    for info in zipfile.ZipFile(io.BytesIO(raw)).infolist():
        assert info.compress_type == zipfile.ZIP_STORED
        name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
            int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
        assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0


def test_a_module_and_optimizer_round_trip(ctx):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    opt = optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(4, 2)).pow(2).mean().backward()
        opt.step()
    state = model.state_dict()
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"] and not state["0.weight"].requires_grad
    assert dict(state._metadata) == {"": {"version": 1}, "0": {"version": 1}, "1": {"version": 1},
                                     "2": {"version": 1}}
    saved = opt.state_dict()
    assert saved["param_groups"][0]["params"] == [0, 1, 2, 3] and saved["state"][0]["step"].item() == 2.0
    ckpt = _round_trip({"model": state, "opt": saved})
    clone = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    clone.load_state_dict(ckpt["model"])
    clone_opt = optim.Adam(clone.parameters(), lr=0.1)
    clone_opt.load_state_dict(ckpt["opt"])
    for m, o in ((model, opt), (clone, clone_opt)):
        o.zero_grad()
        m(torch.ones(4, 2)).pow(2).mean().backward()
        o.step()
    assert [p.tolist() for p in clone.parameters()] == [p.tolist() for p in model.parameters()]


def test_load_state_dict_errors_are_torch_s_and_change_nothing(ctx):
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    state = model.state_dict()
    before = [p.tolist() for p in model.parameters()]
    bad = dict(state)
    bad["0.weight"] = torch.zeros(3, 3)
    bad["0.bias"] = torch.ones(2)
    del bad["2.bias"]
    bad["extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError) as info:
        model.load_state_dict(bad)
    assert str(info.value) == (
        'Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: "2.bias". \n\t'
        'Unexpected key(s) in state_dict: "extra". \n\tsize mismatch for 0.weight: copying a param with shape '
        "torch.Size([3, 3]) from checkpoint, the shape in current model is torch.Size([2, 3]).")
    assert [p.tolist() for p in model.parameters()] == before
    del bad["0.weight"]
    result = model.load_state_dict(bad, strict=False)
    assert result.missing_keys == ["0.weight", "2.bias"] and result.unexpected_keys == ["extra"]
    assert list(model.parameters())[1].tolist() == [1.0, 1.0]


def test_optimizer_load_state_dict_checks_the_groups(ctx):
    opt = optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="^loaded state dict has a different number of parameter groups$"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group$"):
        opt.load_state_dict({"state": {}, "param_groups": [{"lr": 1.0, "params": [0]}]})
    assert opt.state_dict() == {"state": {}, "param_groups": [
        {"lr": 0.1, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False, "maximize": False,
         "foreach": None, "differentiable": False, "fused": None, "params": [0, 1]}]}


def _archive(pickled: bytes, records: dict | None = None) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
        for name, data in (records or {}).items():
            zf.writestr(f"archive/{name}", data)
    buf.seek(0)
    return buf


class _RunsCode:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def test_loading_runs_no_code_from_the_file(ctx, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for weights_only in (True, False):
        with pytest.raises(pickle.UnpicklingError, match="Unsupported global: GLOBAL builtins.exec"):
            torch.load(_archive(pickle.dumps({"a": _RunsCode()}, protocol=2)), weights_only=weights_only)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL os.system"):
        torch.load(_archive(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueq\x00\x85R."))


def test_malformed_files_fail_clearly(ctx):
    with pytest.raises(RuntimeError, match="not a zip archive"):
        torch.load(io.BytesIO(b"\x80\x02}q\x00."))
    with pytest.raises(RuntimeError, match="failed locating file data.pkl"):
        torch.load(io.BytesIO(_no_pickle()))
    # a tensor of 4 elements over a storage of 2: refused, not read past the storage
    buf = io.BytesIO()
    torch.save(torch.ones(2), buf)
    raw = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    pkl = raw.read("archive/data.pkl").replace(b"K\x02\x85", b"K\x04\x85")
    with pytest.raises(RuntimeError, match="does not fit its storage of 2 elements"):
        torch.load(_archive(pkl, {"data/0": raw.read("archive/data/0")}))
    cuda = raw.read("archive/data.pkl").replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    with pytest.raises(RuntimeError, match=r"^Attempting to deserialize object on a CUDA device but "
                                           r"torch.cuda.is_available\(\) is False"):
        torch.load(_archive(cuda, {"data/0": raw.read("archive/data/0")}))
    assert torch.load(_archive(cuda, {"data/0": raw.read("archive/data/0")}), map_location="cpu").tolist() == [1, 1]
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        torch.load(_archive(cuda, {"data/0": raw.read("archive/data/0")}), map_location="cuda")


def _no_pickle() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/version", b"3\n")
    return buf.getvalue()


def test_loading_sets_no_state_on_the_allowed_classes(ctx):
    # BUILD (None, {"__repr__": _rebuild_tensor_v2}) on torch.Size: would replace the class's __repr__
    evil = (b"\x80\x02ctorch\nSize\nN}X\x08\x00\x00\x00__repr__ctorch._utils\n_rebuild_tensor_v2\ns\x86b.")
    with pytest.raises(pickle.UnpicklingError, match="BUILD on type is not allowed"):
        torch.load(_archive(evil))
    assert repr(torch.Size([1])) == "torch.Size([1])"
    dtype_attack = b"\x80\x02ctorch\nfloat32\nN}X\x04\x00\x00\x00nameX\x05\x00\x00\x00int64s\x86b."
    with pytest.raises(pickle.UnpicklingError, match="BUILD on dtype is not allowed"):
        torch.load(_archive(dtype_attack))
    assert torch.float32.name == "float32"


def test_storage_sizes_are_checked_before_reading(ctx):
    buf = io.BytesIO()
    torch.save(torch.ones(2), buf)
    raw = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    with pytest.raises(RuntimeError, match="storage data/0 has 12 bytes, expected 8"):
        torch.load(_archive(raw.read("archive/data.pkl"), {"data/0": b"\0" * 12}))
    with pytest.raises(RuntimeError, match="failed locating file data/0: file not found"):
        torch.load(_archive(raw.read("archive/data.pkl")))
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zf:  # (torch reads compressed records too)
        for info in raw.infolist():
            zf.writestr(info.filename, raw.read(info.filename))
    deflated.seek(0)
    assert torch.load(deflated).tolist() == [1.0, 1.0]
