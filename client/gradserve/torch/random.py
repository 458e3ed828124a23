"""``torch.random``: the generator functions of ``torch`` under torch's submodule, and ``fork_rng``."""

from __future__ import annotations

import contextlib

from gradserve.torch._random import (
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """``torch.random.fork_rng()``: the default generator's state is restored on leaving the block (CPU
    only; there are no CUDA devices)."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


__all__ = ["default_generator", "fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed",
           "set_rng_state"]
