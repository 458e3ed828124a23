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
