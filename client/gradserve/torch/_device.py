"""``torch.device`` and the CPU-only device rules: every tensor of a gradserve session is on ``cpu``; asking for
CUDA fails as torch built without CUDA fails (``AssertionError: Torch not compiled with CUDA enabled``), other
known device types with torch's messages. ``device=`` arguments are checked here and not sent to the server."""

from __future__ import annotations

#: the device types torch 2.13 parses (its message lists them in this order)
DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")
NO_CUDA = "Torch not compiled with CUDA enabled"


class device:
    """``torch.device("cpu")``, ``torch.device("cuda:0")``, ``torch.device("cpu", 0)``: a type and an optional
    index; compares equal to devices (not to strings), as torch's."""

    __slots__ = ("type", "index")

    def __init__(self, type, index: int | None = None):  # noqa: A002 - torch's parameter name
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(): argument 'type' must be str, not torch.device")
            type, index = type.type, type.index  # noqa: A001
        elif isinstance(type, int) and not isinstance(type, bool):  # torch.device(0): the default accelerator
            raise RuntimeError("Cannot access accelerator device when none is available.")
        elif not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got ({builtin_type(type)})")
        else:
            name, colon, number = type.partition(":")
            if name not in DEVICE_TYPES:
                raise RuntimeError(f"Expected one of {', '.join(DEVICE_TYPES)} device type at start of device "
                                   f"string: {type}")
            if colon:
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because index was passed "
                                       f"explicitly: {type}")
                if not number.isdigit():
                    raise RuntimeError(f"Invalid device string: '{type}'")
                index = int(number)
            type = name  # noqa: A001
        if index is not None and index < 0:
            raise RuntimeError("Device index must not be negative")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError(f"attribute '{name}' of 'torch.device' objects is not writable")

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __enter__(self) -> device:
        """``with torch.device("cpu"):`` (torch's default-device context): cpu is the only device."""
        check(self)
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def __reduce__(self):
        return device, (self.type,) if self.index is None else (self.type, self.index)


builtin_type = type
CPU = device("cpu")


def check(value) -> device:
    """A ``device=`` argument (a device, a string, an int) -> the cpu device, or torch's error: CUDA asked for
    on torch built without it, any other device type gradserve does not have."""
    d = value if isinstance(value, device) else device(value)
    if d.type == "cuda":
        raise AssertionError(NO_CUDA)
    if d.type != "cpu":
        raise RuntimeError(f"gradserve: tensors live on the server's cpu; device '{d}' is not available")
    return CPU


def is_device_like(value) -> bool:
    """Whether a positional argument of ``Tensor.to`` is a device (a device or a device string)."""
    return isinstance(value, device) or isinstance(value, str) and value.partition(":")[0] in DEVICE_TYPES
