"""``torch.cuda`` as torch built without CUDA has it: nothing is available; seeding is a no-op (torch seeds
CUDA lazily), and anything that needs a GPU raises torch's ``AssertionError``."""

from __future__ import annotations

from gradserve.torch._device import NO_CUDA


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def is_initialized() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """No GPU: nothing to seed (torch queues the call until CUDA starts, which it never does here)."""


manual_seed_all = manual_seed


def _unavailable(*args, **kwargs):
    raise AssertionError(NO_CUDA)


def empty_cache() -> None:
    """Nothing cached: a no-op, as torch's when CUDA never started."""


current_device = synchronize = set_device = init = _unavailable

__all__ = ["is_available", "device_count", "is_initialized", "manual_seed", "manual_seed_all", "current_device",
           "synchronize", "set_device", "empty_cache", "init"]
