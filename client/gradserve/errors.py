"""Problems (RFC 9457 bodies) as exceptions.

``ProblemError`` is what the plain HTTP client raises. The torch layer raises the exception class torch
raises (``RuntimeError``, ``TypeError``...) as a subclass that is also a ``ProblemError``: ``except
RuntimeError`` and ``except gradserve.ProblemError`` both catch it, and it prints as torch's does
(``RuntimeError: <torch's message>``).
"""

from __future__ import annotations

import builtins
from typing import Any


class ProblemError(Exception):
    """An ``application/problem+json`` answer: ``status``, ``code``, ``detail`` (torch's message for engine
    errors), and for op lists ``op_index``, ``op`` and ``exception`` (the torch exception type's name)."""

    def __init__(self, problem: dict[str, Any]):
        self.problem = problem
        self.status: int = problem.get("status", 0)
        self.code: str = problem.get("code", "")
        self.detail: str = problem.get("detail", "")
        self.op_index: int | None = problem.get("op_index")
        self.op: str | None = problem.get("op")
        self.exception: str | None = problem.get("exception")
        super().__init__(self.detail)

    def __str__(self) -> str:
        return self.detail

    def __reduce__(self):
        return type(self), (self.problem,)


#: torch exception type name -> our subclass of it (created below), e.g. TORCH_ERRORS["RuntimeError"]
TORCH_ERRORS: dict[str, type[ProblemError]] = {}

for _name in ("RuntimeError", "TypeError", "ValueError", "IndexError", "NotImplementedError", "NameError",
              "AttributeError"):
    # the module is "builtins" so that a traceback prints "RuntimeError: ..." exactly as torch's does
    TORCH_ERRORS[_name] = type(_name, (ProblemError, getattr(builtins, _name)), {
        "__module__": "builtins", "__reduce__": lambda self: (torch_error, (self.problem,))})


def torch_error(problem: dict[str, Any]) -> ProblemError:
    """The exception torch would raise for this problem (a ProblemError carrying it)."""
    cls = TORCH_ERRORS.get(problem.get("exception") or "RuntimeError", TORCH_ERRORS["RuntimeError"])
    return cls(problem)


class ConnectionError(builtins.ConnectionError):  # noqa: A001 - gradserve.ConnectionError, a built-in's subclass
    """The server could not be reached, or the connection broke during a request: ``url`` is the server's
    address and ``source`` where it came from (``GRADSERVE_URL``, the default, or the caller)."""

    __module__ = "gradserve"  # prints as gradserve.ConnectionError

    def __init__(self, message: str, url: str = "", source: str = ""):
        super().__init__(message)
        self.url = url
        self.source = source


class SessionLostError(RuntimeError):
    """The server no longer has the session (it restarted, the session expired or was deleted): every
    tensor in it is gone. ``tensors``: the names the program's variables gave them, where known."""

    __module__ = "gradserve"

    def __init__(self, message: str, session_id: str = "", tensors: tuple[str, ...] = ()):
        super().__init__(message)
        self.session_id = session_id
        self.tensors = tensors


# ----- short tracebacks ----------------------------------------------------------------------------------------
_PACKAGE = __name__.split(".")[0] + "."


def is_ours(exc: BaseException) -> bool:
    """An error the client raises for the user (its frames are noise in a traceback)."""
    return isinstance(exc, (ProblemError, ConnectionError, SessionLostError)) or getattr(exc, "_gradserve", False)


def user_traceback(tb):
    """``tb`` without the client's own frames (the user's lines only); ``tb`` itself if that leaves nothing."""
    import types

    frames = []
    while tb is not None:
        if not tb.tb_frame.f_globals.get("__name__", "").startswith(_PACKAGE):
            frames.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    out = None
    for frame, lasti, lineno in reversed(frames):
        out = types.TracebackType(out, frame, lasti, lineno)
    return out


def install_excepthook() -> None:
    """Print the client's errors without the client's frames (``GRADSERVE_FULL_TRACEBACKS=1`` keeps them).
    Installed only over Python's default hook (IPython, pytest... keep theirs)."""
    import os
    import sys

    if sys.excepthook is not sys.__excepthook__ or os.environ.get("GRADSERVE_FULL_TRACEBACKS"):
        return

    def excepthook(kind, value, tb):
        if value is not None and is_ours(value):
            short = user_traceback(tb)
            if short is not None:
                tb = short
                value = value.with_traceback(short)
        sys.__excepthook__(kind, value, tb)

    excepthook.gradserve = True
    sys.excepthook = excepthook
