"""Module attributes generated from the op catalog: ``gradserve.torch.exp``, ``F.mse_loss``... are made on
first access (PEP 562 ``__getattr__``), so that importing needs no server and new catalog ops appear
without client changes."""

from __future__ import annotations

from gradserve.torch import _catalog
from gradserve.torch._tensor import call_op


def function(namespace: str, name: str):
    """The function ``namespace.name`` records (an AttributeError when the catalog has no such op)."""
    if name.startswith("__"):
        raise AttributeError(name)
    op = _catalog.names_in(namespace).get(name)
    if op is None:
        raise AttributeError(f"module '{namespace}' has no attribute '{name}'")

    def fn(*args, **kwargs):
        return call_op(op, args, kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = namespace
    fn.__doc__ = _catalog.catalog()[op].get("doc") or None
    return fn


def install(module_globals: dict, namespace: str):
    """``__getattr__`` and ``__dir__`` for a module that is ``namespace``; made functions are cached in it."""

    def __getattr__(name: str):
        fn = function(namespace, name)
        module_globals[name] = fn
        return fn

    def __dir__():
        return sorted(set(module_globals) | set(_catalog.names_in(namespace)))

    return __getattr__, __dir__
