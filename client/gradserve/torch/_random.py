"""``torch.Generator``, ``torch.manual_seed``/``seed``/``initial_seed``/``get_rng_state``/``set_rng_state``:
the generators live in the server session (torch's CPU mt19937, bit for bit), so that ``rand``, ``randn``,
``randint``, ``randperm``, ``multinomial``, dropout and ``nn.init`` print torch's numbers for torch's seed.
A generator is a name in its session; ``generator=g`` sends that name. ``torch.default_generator`` is the
session's default one (the one used when no generator is given)."""

from __future__ import annotations

import os

import numpy as np

from gradserve.torch import _context

_U64 = (1 << 64) - 1


class Generator:
    """``torch.Generator(device='cpu')``: a new generator of the current session, seeded as torch seeds one
    (67280421310721)."""

    def __init__(self, device="cpu"):
        if str(device) != "cpu":
            raise RuntimeError(f"Device type {str(device).upper()} is not supported for torch.Generator() api.")
        self._ctx = _context.current()
        self._name = self._ctx.fresh_name()
        self._ctx.record({"op": "Generator", "out": self._name})

    @property
    def device(self):
        return "cpu"

    def _where(self):
        return self._ctx, {"generator": self._name}

    def manual_seed(self, seed) -> Generator:
        seed = int(seed)  # torch: int(seed) (a float truncates, a string raises ValueError)
        ctx, kw = self._where()
        ctx.record({"op": "manual_seed", "args": [seed], "kwargs": kw})
        return self

    def seed(self) -> int:
        """A non-deterministic seed (64 random bits, as torch's), set and returned."""
        s = int.from_bytes(os.urandom(8), "little")
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return _read("initial_seed", *self._where()).item() & _U64

    def get_state(self):
        """torch's 5056 state bytes, as an int64 tensor (the server has no uint8; ``set_state`` and real
        torch's ``set_rng_state(torch.tensor(s.tolist(), dtype=torch.uint8))`` take it back)."""
        return _read("get_rng_state", *self._where())

    def set_state(self, new_state) -> Generator:
        from gradserve.torch import tensor
        from gradserve.torch._tensor import Tensor
        ctx, kw = self._where()
        if not isinstance(new_state, Tensor):
            if isinstance(new_state, (bytes, bytearray)):
                new_state = np.frombuffer(new_state, np.uint8)
            elif hasattr(new_state, "numpy"):  # a state tensor of real torch (uint8)
                new_state = np.asarray(new_state.numpy())
            new_state = tensor(np.asarray(new_state))
        ctx.record({"op": "set_rng_state", "args": [new_state._ref(ctx)], "kwargs": kw})
        return self

    def __repr__(self) -> str:
        return f"<torch._C.Generator object at {hex(id(self))}>"


class _DefaultGenerator(Generator):
    """The session's default generator: whatever session is current when it is used."""

    def __init__(self):  # noqa: D107 - nothing is recorded: the session has it from the start
        pass

    def _where(self):
        return _context.current(), {}


def _read(op: str, ctx, kwargs: dict):
    from gradserve.torch._tensor import Tensor
    out = Tensor._new(ctx)
    ctx.record({"op": op, "kwargs": kwargs, "out": out._name}, (out,))
    return out


default_generator = _DefaultGenerator()


def manual_seed(seed) -> Generator:
    """``torch.manual_seed(seed)``: seeds the session's default generator; returns it."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    default_generator.set_state(new_state)
