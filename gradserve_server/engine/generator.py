"""torch's CPU random number generator, bit for bit: an mt19937 plus the cached normal samples.

A ``Generator`` is a plain object owned by a session (the session's default generator) or named in it
(``torch.Generator()``); the engine keeps none of its own. Its state is plain data (``to_plain`` /
``from_plain``) and torch's 5056-byte ``get_rng_state`` layout (``get_state`` / ``set_state``).

The words come from numpy's ``MT19937`` bit generator (the same recurrence and tempering as torch's
``at::mt19937``), its key and position set from ours; the draws that torch's kernels make
(``random()``: one 32-bit word, ``random64()``: two words, the first the high half) and the arithmetic they
do on them live in ``engine.ops.random``.
"""

from __future__ import annotations

import contextvars
import functools
import struct

import numpy as np

from .errors import LimitExceededError, TorchRuntimeError, TorchTypeError

N = 624
STATE_BYTES = 5056          # sizeof(CPUGeneratorImplState)
DEFAULT_SEED = 67280421310721  # torch's default_rng_seed_val
MAX_GENERATORS = 256  # named generators per session (their state is not counted in the session's bytes)
# legacy_pod: the_initial_seed u64, left i32, seeded i32, next u64, state u64[624], normal_x/y/rho f64,
# normal_is_valid i32 (+4 padding); then next_float_normal_sample f32, its valid flag (bool, +3 padding)
_HEAD = struct.Struct("<QiiQ")
_TAIL = struct.Struct("<dddi4xf?3x")


@functools.lru_cache(maxsize=64)
def _init_key(seed32: int) -> np.ndarray:
    """mt19937's init_genrand on a seed's low 32 bits (torch's ``init_with_uint32``); read-only (memoised:
    a pure function of the seed)."""
    key = [seed32]
    for i in range(1, N):
        prev = key[-1]
        key.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    out = np.array(key, dtype=np.uint32)
    out.flags.writeable = False
    return out


class Generator:
    """torch.Generator('cpu'): ``initial_seed``, the mt19937 words and torch's (left, next) counters, and the
    normal samples torch caches between calls (one double, one float)."""

    __slots__ = ("seed", "key", "left", "next", "double_normal", "float_normal")

    def __init__(self, seed: int = DEFAULT_SEED):
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> Generator:
        seed = int(seed) & 0xFFFFFFFFFFFFFFFF  # torch takes the seed modulo 2**64 (negative seeds wrap)
        self.seed = seed
        self.key = _init_key(seed & 0xFFFFFFFF)
        self.left, self.next = 1, 0
        self.double_normal: float | None = None
        self.float_normal: float | None = None
        return self

    def initial_seed(self) -> int:
        return self.seed

    def copy(self) -> Generator:
        g = Generator.__new__(Generator)
        g.seed, g.key, g.left, g.next = self.seed, self.key.copy(), self.left, self.next
        g.double_normal, g.float_normal = self.double_normal, self.float_normal
        return g

    # ----- draws ------------------------------------------------------------------------------------------

    def random(self, n: int) -> np.ndarray:
        """``n`` calls of torch's ``random()``: 32-bit words, as uint64."""
        if n <= 0:
            return np.zeros(0, np.uint64)
        bg = np.random.MT19937(0)
        pos = N if self.left == 1 else self.next
        bg.state = {"bit_generator": "MT19937", "state": {"key": self.key, "pos": pos}}
        out = bg.random_raw(n)
        st = bg.state["state"]
        self.key = np.asarray(st["key"], dtype=np.uint32)
        pos = int(st["pos"])
        self.left, self.next = (1, N) if pos == N else (N + 1 - pos, pos)
        return out

    def random64(self, n: int) -> np.ndarray:
        """``n`` calls of ``random64()``: two words each, the first one the high half."""
        w = self.random(2 * n)
        return (w[0::2] << np.uint64(32)) | w[1::2]

    # ----- torch's byte layout ----------------------------------------------------------------------------

    def get_state(self) -> bytes:
        """torch.get_rng_state()'s bytes (CPUGeneratorImplState)."""
        d, f = self.double_normal, self.float_normal
        return b"".join((_HEAD.pack(self.seed, self.left, 1, self.next),
                         self.key.astype("<u8").tobytes(),
                         _TAIL.pack(0.0, d if d is not None else 0.0, 0.0, d is not None,
                                    f if f is not None else 0.0, f is not None)))

    def set_state(self, data: bytes) -> None:
        """torch.set_rng_state(): checked (size, then mt19937's validity) before anything changes."""
        if len(data) != STATE_BYTES:
            raise TorchRuntimeError(f"Expected a CPUGeneratorImplState of size {STATE_BYTES} but found the input "
                                    f"RNG state size to be {len(data)}", code="invalid_argument")
        seed, left, seeded, nxt = _HEAD.unpack_from(data, 0)
        words = np.frombuffer(data, "<u8", N, _HEAD.size)
        _x, y, _rho, valid, fnormal, fvalid = _TAIL.unpack_from(data, _HEAD.size + 8 * N)
        if seeded != 1 or not 0 < left <= N or nxt > N:
            raise TorchRuntimeError("Invalid mt19937 state", code="invalid_argument")
        self.seed, self.left, self.next = seed, left, nxt
        self.key = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32)  # torch keeps a word's low 32 bits
        self.double_normal = y if valid else None
        self.float_normal = float(fnormal) if fvalid else None

    # ----- plain data (session stores) --------------------------------------------------------------------

    def to_plain(self) -> dict:
        return {"seed": self.seed, "key": self.key.tolist(), "left": self.left, "next": self.next,
                "double_normal": self.double_normal, "float_normal": self.float_normal}

    @classmethod
    def from_plain(cls, d: dict) -> Generator:
        g = cls.__new__(cls)
        key = d["key"]
        if not isinstance(key, list) or len(key) != N:
            raise ValueError("a generator's key holds 624 words")
        g.seed, g.key = int(d["seed"]), np.array(key, dtype=np.uint32)
        g.left, g.next = int(d["left"]), int(d["next"])
        if not 0 < g.left <= N or not 0 <= g.next <= N or not 0 <= g.seed < 1 << 64:
            raise ValueError("a generator's counters are out of range")
        g.double_normal = None if d["double_normal"] is None else float(d["double_normal"])
        g.float_normal = None if d["float_normal"] is None else float(d["float_normal"])
        return g

    def __eq__(self, other):
        return isinstance(other, Generator) and self.to_plain() == other.to_plain()

    __hash__ = None


class Generators:
    """The generators a program run draws from: the session's default (``None``) and its named ones. Each is
    copied on first use, so that a failed run leaves the session's generators as they were; ``commit`` hands
    back what the run made of them."""

    __slots__ = ("default", "named", "_own")

    def __init__(self, default: Generator | None = None, named: dict | None = None):
        self.default = default
        self.named = dict(named or {})
        self._own: set = set()

    def get(self, name: str | None = None) -> Generator:
        if name in self._own:
            return self.default if name is None else self.named[name]
        if name is None:
            g = self.default = self.default.copy() if self.default is not None else Generator()
        else:
            if name not in self.named:
                raise TorchTypeError(f"no generator named {name!r} in this session (make one with the "
                                     f"'Generator' op)", code="unknown_generator")
            g = self.named[name] = self.named[name].copy()
        self._own.add(name)
        return g

    def add(self, name: str, g: Generator) -> None:
        if name not in self.named and len(self.named) >= MAX_GENERATORS:
            raise LimitExceededError(f"a session holds at most {MAX_GENERATORS} generators (each keeps 624 words "
                                     f"of state); rebind a name to reuse one")
        self.named[name] = g
        self._own.add(name)


#: the running program's generators (engine-level calls outside a program get a table of their own)
_running: contextvars.ContextVar[Generators | None] = contextvars.ContextVar("gradserve_generators", default=None)


def running() -> Generators:
    table = _running.get()
    if table is None:
        table = Generators()
        _running.set(table)
    return table


def use(table: Generators):
    """Make ``table`` the running generators until ``_running.reset(token)``."""
    return _running.set(table)


def reset(token) -> None:
    _running.reset(token)


#: inside torch's legacy vmap (a forward-mode jacobian's pass, ``engine.functional``): every op that draws
#: random numbers (they all come here for their generator) refuses, before drawing, as torch's does
_in_vmap: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_in_vmap", default=False)


class RandomInVmapError(TorchRuntimeError):
    """A random op inside a vmapped pass (not a batching gap the caller may loop around: torch refuses)."""


def in_vmap():
    """Mark the running pass as torch's vmap until ``_in_vmap.reset(token)``."""
    return _in_vmap.set(True)


def resolve(generator, op: str) -> Generator:
    """An op's ``generator=`` argument: None (the default generator), a Generator, or a generator's name."""
    if _in_vmap.get():
        raise RandomInVmapError("vmap: We do not yet support calling random operations inside of vmap. Please "
                                "perform random operations outside of vmap as a workaround")
    if generator is None or isinstance(generator, str):
        return running().get(generator)
    if isinstance(generator, Generator):
        return generator
    raise TorchTypeError(f"{op}(): argument 'generator' must be torch.Generator, not {type(generator).__name__}")
