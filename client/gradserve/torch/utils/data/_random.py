"""The call point between ``torch.utils.data`` and the torch-exact generator (issue 23 item 2, built on the
"rng" branch): the three draws the data utilities make, written as torch makes them. While the client has no
``torch.Generator`` / ``randperm`` / ``random_`` (before that branch is merged), they fall back to the client's
own generator (``torch.manual_seed`` seeds it): reproducible under a seed, but not torch's order."""

from __future__ import annotations

import numpy as np


def _torch():
    import gradserve.torch as torch

    return torch


def _exact() -> bool:
    """Whether the client has torch's generator (Generator, randperm, randint, multinomial, empty and
    Tensor.random_)."""
    from gradserve.torch import _catalog

    torch = _torch()
    return (all(hasattr(torch, name) for name in ("Generator", "randperm", "randint", "empty", "multinomial"))
            and (hasattr(torch.Tensor, "random_") or "random_" in _catalog.methods()))


def seed_from(generator) -> int:
    """torch: ``int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())``."""
    torch = _torch()
    if _exact():
        return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    return int(_fallback(generator).integers(0, 2 ** 63 - 1))


def new_generator(seed: int):
    """torch: ``g = torch.Generator(); g.manual_seed(seed)``."""
    torch = _torch()
    if _exact():
        g = torch.Generator()
        g.manual_seed(seed)
        return g
    return np.random.default_rng(seed)


def randperm(n: int, generator) -> list[int]:
    """torch: ``torch.randperm(n, generator=generator).tolist()``."""
    torch = _torch()
    if _exact():
        return torch.randperm(n, generator=generator).tolist()
    return _fallback(generator).permutation(n).tolist()


def randint(high: int, size: int, generator) -> list[int]:
    """torch: ``torch.randint(high=high, size=(size,), dtype=torch.int64, generator=generator).tolist()``."""
    torch = _torch()
    if _exact():
        return torch.randint(high=high, size=(size,), dtype=torch.int64, generator=generator).tolist()
    return _fallback(generator).integers(0, high, size=size).tolist()


def multinomial(weights: list[float], n: int, replacement: bool, generator) -> list[int]:
    """torch: ``torch.multinomial(torch.as_tensor(weights, dtype=torch.double), n, replacement,
    generator=generator).tolist()``."""
    torch = _torch()
    if _exact():
        return torch.multinomial(torch.tensor(weights, dtype=torch.float64), n, replacement,
                                 generator=generator).tolist()
    p = np.asarray(weights, dtype=np.float64)
    if not replacement and n > np.count_nonzero(p):
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    return _fallback(generator).choice(len(p), size=n, replace=replacement, p=p / p.sum()).tolist()


def _fallback(generator) -> np.random.Generator:
    return generator if isinstance(generator, np.random.Generator) else _torch()._RNG[0]
