"""``torch.save`` and ``torch.load`` in torch's own file format, so that a file written by torch loads here and
one written here loads in torch (``torch.load(f)``, whose default is ``weights_only=True``).

The format (torch >= 1.6): a zip archive, entries stored uncompressed and aligned to 64 bytes, under one
top-level folder (the file's name without its extension, ``archive`` for a file object): ``data.pkl`` (the
object, pickled with protocol 2), ``data/<key>`` (each storage's raw little-endian bytes), ``byteorder``,
``version``, ``.format_version``, ``.storage_alignment`` and ``.data/serialization_id``. In ``data.pkl`` a
tensor is ``torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
OrderedDict())``, where ``storage`` is the persistent id ``("storage", torch.FloatStorage, key, location,
numel)``; a Parameter is ``torch._utils._rebuild_parameter(tensor, requires_grad, OrderedDict())``.

Loading runs no code from the file: as torch's ``weights_only=True``, the unpickler resolves only the names
below (tensors, parameters, storages, dtypes, ``torch.Size``, ``torch.device``, ``OrderedDict`` and a few
builtins); anything else raises ``pickle.UnpicklingError`` (``weights_only=False`` is refused the same way).
Each loaded tensor is a new server tensor: tensors that shared a storage in the file do not share memory
after loading (their values are the same)."""

from __future__ import annotations

import _compat_pickle
import collections
import io
import os
import pickle
import secrets
import struct
import zipfile

import numpy as np

from gradserve.torch import _device
from gradserve.torch._dtypes import NP_HELD, Size, by_name, dtype, readable

#: torch's storage class names <-> the client's dtype names (every dtype the server has)
STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "LongStorage": "int64",
                  "BoolStorage": "bool", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
                  "ByteStorage": "uint8", "HalfStorage": "float16", "BFloat16Storage": "bfloat16"}
STORAGE_OF = {name: storage for storage, name in STORAGE_DTYPES.items()}
#: the dtype names torch pickles (``torch.float32`` ...) and their aliases
DTYPE_NAMES = {"float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
               "int64": "int64", "long": "int64", "bool": "bool", "int32": "int32", "int": "int32",
               "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8", "float16": "float16",
               "half": "float16", "bfloat16": "bfloat16"}
ALIGNMENT = 64
MISSING_CUDA = ("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are "
                "running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map "
                "your storages to the CPU.")


# ----- saving ------------------------------------------------------------------------------------------------------
class _Global:
    """A global the pickle refers to by name (``torch._utils._rebuild_tensor_v2``) without importing it."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):  # (pickle asks that a reduce function be callable; it is never called)
        raise TypeError(f"{self.module}.{self.name} is a name in a torch file, not a function")


class _StorageRef:
    """A tensor's values in the file: written as ``data/<key>`` (``array`` holds the bytes: bfloat16 as its uint16
    bits), referred to by a persistent id naming ``dtype``'s storage class."""

    __slots__ = ("key", "array", "dtype")

    def __init__(self, key: str, array: np.ndarray, dtype: str):
        self.key, self.array, self.dtype = key, array, dtype


class _Data:
    """A Parameter's data (a tensor without requires_grad), pickled inside ``_rebuild_parameter``."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


class _Pickler(pickle._Pickler):  # the Python pickler: it lets ``save`` write a global by name
    def __init__(self, file, storages: list[_StorageRef]):
        super().__init__(file, protocol=2)
        self.storages = storages

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, _Global):
            if id(obj) in self.memo:
                self.write(self.get(self.memo[id(obj)][0]))
                return
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            self.memoize(obj)
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _global("torch", STORAGE_OF[obj.dtype]), obj.key, "cpu", obj.array.size)
        return None

    def reducer_override(self, obj):
        from gradserve.torch._tensor import Tensor
        from gradserve.torch.nn import Parameter

        if isinstance(obj, Parameter):
            return _global("torch._utils", "_rebuild_parameter"), (_Data(obj), obj.requires_grad,
                                                                   collections.OrderedDict())
        if isinstance(obj, _Data):
            return self._tensor(obj.tensor, False)
        if isinstance(obj, Tensor):
            return self._tensor(obj, obj.requires_grad)
        if isinstance(obj, Size):
            return _global("torch", "Size"), (tuple(obj),)
        if isinstance(obj, _device.device):
            return _global("torch", "device"), (str(obj),)
        return NotImplemented

    def _tensor(self, t, requires_grad: bool):
        """``_rebuild_tensor_v2`` of a new storage holding ``t``'s values (contiguous)."""
        name = t.dtype.name
        a = _held(np.asarray(t._data(), order="C"), name)  # (ascontiguousarray would make a 0-d tensor 1-d)
        ref = _StorageRef(str(len(self.storages)), a, name)
        self.storages.append(ref)
        stride = tuple(int(np.prod(a.shape[i + 1:], dtype=np.int64)) for i in range(a.ndim))
        return (_global("torch._utils", "_rebuild_tensor_v2"),
                (ref, 0, tuple(a.shape), stride, requires_grad, collections.OrderedDict()))


def _held(a: np.ndarray, name: str) -> np.ndarray:
    """A tensor's values as its storage's bytes: bfloat16 (read as float32, which holds it exactly) as the upper
    16 bits of each float32; the other dtypes as they are."""
    if name == "bfloat16" and a.dtype == np.float32:
        return (a.view(np.uint32) >> 16).astype(np.uint16)
    return a


_GLOBALS: dict[tuple, _Global] = {}


def _global(module: str, name: str) -> _Global:
    """One _Global per name, so that the pickle memoizes it as torch's does (``BINGET`` after the first)."""
    return _GLOBALS.setdefault((module, name), _Global(module, name))


def _save_dtype(pickler: _Pickler, obj: dtype) -> None:
    """A dtype is the global ``torch.<name>`` itself (torch pickles dtypes by name)."""
    pickler.save(_global("torch", obj.name))


_Pickler.dispatch = dict(pickle._Pickler.dispatch)
_Pickler.dispatch[dtype] = _save_dtype


def _tensors_in(obj, out: list, depth: int = 0) -> list:
    """The client tensors inside dicts, lists and tuples of ``obj`` (to fetch their values in one request)."""
    from gradserve.torch._tensor import Tensor

    if isinstance(obj, Tensor):
        out.append(obj)
    elif depth < 64 and isinstance(obj, dict):
        for v in obj.values():
            _tensors_in(v, out, depth + 1)
    elif depth < 64 and isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors_in(v, out, depth + 1)
    return out


def _fetch_all(tensors: list) -> None:
    """Bring the values of ``tensors`` in one request per session (then ``_data()`` reads them locally)."""
    by_ctx: dict = {}
    for t in tensors:
        if t._error is not None:
            raise t._error
        by_ctx.setdefault(t._ctx, {})[t._name] = "full"
    for ctx, returns in by_ctx.items():
        ctx.flush(returns)


def _aligned_extra(offset: int, name: str) -> bytes:
    """The local header's extra field (torch's ``FB`` padding) that puts the entry's data on a 64-byte boundary."""
    start = offset + 30 + len(name.encode("utf-8")) + 4
    pad = -start % ALIGNMENT
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


def save(obj, f, pickle_module=None, pickle_protocol: int = 2, _use_new_zipfile_serialization: bool = True,
         _disable_byteorder_record: bool = False) -> None:
    """``torch.save(obj, f)``: ``f`` a path or a binary file object."""
    if pickle_module is not None or pickle_protocol != 2:
        raise NotImplementedError("gradserve: torch.save writes protocol 2 with the pickle module (as torch's default)")
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("gradserve: torch.save writes torch's zip format only")
    _fetch_all(_tensors_in(obj, []))
    storages: list[_StorageRef] = []
    data = io.BytesIO()
    _Pickler(data, storages).dump(obj)
    if isinstance(f, (str, os.PathLike)):
        folder = os.path.splitext(os.path.basename(os.fspath(f)))[0] or "archive"
        with open(f, "wb") as file:
            _write_zip(file, folder, data.getvalue(), storages)
    else:
        _write_zip(f, "archive", data.getvalue(), storages)


def _write_zip(file, folder: str, pickled: bytes, storages: list[_StorageRef]) -> None:
    records = [("data.pkl", pickled), (".format_version", b"1"), (".storage_alignment", str(ALIGNMENT).encode()),
               ("byteorder", b"little")]
    records += [(f"data/{s.key}", np.ascontiguousarray(s.array, s.array.dtype.newbyteorder("<")).tobytes())
                for s in storages]
    records += [("version", b"3\n"), (".data/serialization_id", str(secrets.randbits(128)).zfill(40).encode())]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as zf:
        for name, payload in records:
            info = zipfile.ZipInfo(f"{folder}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.extra = _aligned_extra(zf.fp.tell(), info.filename)
            zf.writestr(info, payload)


# ----- loading -----------------------------------------------------------------------------------------------------
def _refuse(module: str, name: str):
    raise pickle.UnpicklingError(
        f"Weights only load failed. gradserve's torch.load runs no code from the file (as torch.load with "
        f"weights_only=True) and this file needs it.\nUnsupported global: GLOBAL {module}.{name} was not an "
        f"allowed global by default (gradserve loads tensors, parameters, state dicts, optimizer states and plain "
        f"Python containers and numbers).")


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    """A client tensor with the values of ``storage`` seen through (offset, size, stride), checked to lie within
    the storage."""
    array, name = storage
    ints = (storage_offset, *size, *stride)
    if not all(isinstance(i, int) and i >= 0 for i in ints) or len(size) != len(stride):
        raise RuntimeError(f"gradserve: torch.load: invalid tensor geometry: offset {storage_offset}, size "
                           f"{size}, stride {stride}")
    if any(n == 0 for n in size):
        view = np.zeros(size, dtype=array.dtype)
    else:
        last = storage_offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= array.size:
            raise RuntimeError(f"gradserve: torch.load: a tensor of size {list(size)} (offset {storage_offset}, "
                               f"stride {list(stride)}) does not fit its storage of {array.size} elements")
        view = np.lib.stride_tricks.as_strided(array[storage_offset:], shape=tuple(size),
                                               strides=tuple(st * array.dtype.itemsize for st in stride))
    return _client_tensor(np.array(view), name, bool(requires_grad))


def _client_tensor(a: np.ndarray, name: str, requires_grad: bool):
    """A new leaf of dtype ``name`` holding ``a`` bit for bit (bfloat16's bits go as float32 values, converted
    exactly; a NaN's payload bits would not survive that conversion, torch's own, which makes every NaN its one
    quiet NaN: with a NaN they go as int16 bits, viewed as bfloat16 and copied into a new leaf)."""
    from gradserve.torch._tensor import call_op

    kwargs = {"requires_grad": True} if requires_grad else {}
    if name == "bfloat16" and a.size and ((a & 0x7FFF) > 0x7F80).any():
        t = call_op("tensor", (a.view(np.int16),), {}).view(by_name(name)).clone()
        if requires_grad:
            t.requires_grad_()
    else:
        if name == "bfloat16":
            a, kwargs["dtype"] = readable(a, name), by_name(name)
        t = call_op("tensor", (a,), kwargs)
    t._shape, t._dtype = Size(a.shape), name
    return t


def _rebuild_parameter(data, requires_grad, backward_hooks=None):
    from gradserve.torch.nn import Parameter

    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _dtype_global(name: str):
    return by_name(DTYPE_NAMES[name])


def _allowed() -> dict:
    """(module, name) -> what the unpickler gives for it: the whole list of names a file may use."""
    from gradserve.torch._device import device

    allowed = {("collections", "OrderedDict"): collections.OrderedDict,
               ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
               ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
               ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
               ("torch", "Size"): Size, ("torch", "device"): device,
               ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
               ("builtins", "slice"): slice}
    for name in STORAGE_DTYPES:
        allowed[("torch", name)] = name
    for name in DTYPE_NAMES:
        allowed[("torch", name)] = _dtype_global(name)
    return allowed


class _Unpickler(pickle._Unpickler):
    """The Python unpickler, restricted: globals from ``_allowed()`` only, storages checked, and BUILD (state set
    on an object) only for an OrderedDict's attributes (a state dict's ``_metadata``): it could otherwise set
    attributes of the allowed classes and functions themselves."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is collections.OrderedDict and isinstance(state, dict):
            inst.__dict__.update(state)
            return
        raise pickle.UnpicklingError(f"Weights only load failed. gradserve's torch.load sets no state on objects "
                                     f"but an OrderedDict's: BUILD on {type(inst).__name__} is not allowed")

    dispatch[pickle.BUILD[0]] = load_build

    def __init__(self, file, read_record, map_location):
        super().__init__(file)
        self._read_record = read_record
        self._map_location = map_location
        self._allowed = _allowed()
        self._loaded: dict[str, tuple] = {}

    def find_class(self, module: str, name: str):
        # protocol 2 writes Python 2's names (__builtin__.set): read them as Python 3's, as pickle does
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        found = self._allowed.get((module, name))
        if found is None and module == "torch" and name.endswith("Storage"):
            raise RuntimeError(f"gradserve: torch.load: the file has a tensor stored as torch.{name}; the server's "
                               f"dtypes are {', '.join(STORAGE_OF)}")
        if found is None:
            _refuse(module, name)
        return found

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage":
            raise pickle.UnpicklingError(f"Weights only load failed. Unsupported persistent id: {pid!r}")
        _, storage_type, key, location, numel = pid
        if storage_type not in STORAGE_DTYPES or not isinstance(key, str) or not isinstance(numel, int):
            raise pickle.UnpicklingError(f"Weights only load failed. Unsupported storage: {pid!r}")
        if str(location).startswith("cuda") and self._map_location is None:
            raise RuntimeError(MISSING_CUDA)
        if key not in self._loaded:
            np_dtype = NP_HELD[STORAGE_DTYPES[storage_type]].newbyteorder("<")
            raw = self._read_record(f"data/{key}", numel * np_dtype.itemsize)
            self._loaded[key] = (np.frombuffer(raw, dtype=np_dtype).astype(np_dtype.newbyteorder("=")),
                                 STORAGE_DTYPES[storage_type])
        return self._loaded[key]


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None, mmap: bool | None = None,
         **pickle_load_args):
    """``torch.load(f, map_location=None, weights_only=True)``: ``f`` a path or a binary file object. Storages
    load to the cpu (``map_location`` may name the cpu: a CUDA one fails as in torch without CUDA)."""
    if isinstance(map_location, (str, _device.device)):
        _device.check(map_location)
    if pickle_module is not None:
        raise NotImplementedError("gradserve: torch.load uses its restricted unpickler only")
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as file:
            return _load(file, map_location)
    return _load(f, map_location)


def _load(file, map_location):
    start = file.tell() if hasattr(file, "tell") else 0
    magic = file.read(4)
    file.seek(start)
    if magic[:2] != b"PK":
        raise RuntimeError("gradserve: torch.load reads torch's zip format (torch.save's since torch 1.6); this file "
                           "is not a zip archive (torch's legacy format, or not a torch file)")
    with zipfile.ZipFile(file) as zf:
        names = zf.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise RuntimeError("PytorchStreamReader failed locating file data.pkl: file not found")
        folder = pkl[0][: -len("data.pkl")]
        if f"{folder}byteorder" in names and zf.read(f"{folder}byteorder") != b"little":
            raise RuntimeError("gradserve: torch.load reads little-endian files only")

        def read_record(name: str, size: int) -> bytes:
            """A storage's bytes, its size checked before it is read (a record may be compressed)."""
            try:
                info = zf.getinfo(folder + name)
            except KeyError:
                raise RuntimeError(f"PytorchStreamReader failed locating file {name}: file not found") from None
            if info.file_size != size:
                raise RuntimeError(f"gradserve: torch.load: storage {name} has {info.file_size} bytes, expected "
                                   f"{size}")
            return zf.read(info)

        return _Unpickler(io.BytesIO(zf.read(pkl[0])), read_record, map_location).load()
