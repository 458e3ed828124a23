"""Module attributes generated from the op catalog: ``gradserve.torch.exp``, ``F.mse_loss``... are made on
first access (PEP 562 ``__getattr__``), so that importing needs no server and new catalog ops appear
without client changes. Where no server answers, the names the client was built with decide (``_covered``):
a name torch has and the client lacks is torch's AttributeError all the same."""

from __future__ import annotations

from gradserve.torch import _catalog
from gradserve.torch._tensor import call_op


def function(namespace: str, name: str):
    """The function ``namespace.name`` records (an AttributeError when the catalog has no such op)."""
    if name.startswith("__"):
        raise AttributeError(name)
    names, from_server = _catalog.covered(namespace)
    op = names.get(name)
    if op is None:
        raise missing(f"module '{namespace}' has no attribute '{name}'")

    called = name if namespace == "torch" else f"{namespace.removeprefix('torch.')}.{name}"
    spelling = called if called != op else None  # (an alias: torch.arctan2(...) names arctan2 in its messages)

    def fn(*args, **kwargs):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op(op, args, kwargs, False, spelling)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = namespace
    fn.__doc__ = _catalog.catalog()[op].get("doc") or None if from_server else None
    return fn


def missing(message: str) -> AttributeError:
    """torch's AttributeError for a name the client lacks, saying that this is gradserve's module and where the
    list of what it covers is."""
    from gradserve.torch import _context

    url = _context.current().client.url
    error = AttributeError(f"{message} (this is gradserve.torch, gradserve's torch-like module, not PyTorch: it has "
                           f"the ops of the server's catalog, listed at {url}/v1/ops, and what the README's "
                           f"\"Python client\" section lists)")
    error._gradserve = True
    return error


def install(module_globals: dict, namespace: str):
    """``__getattr__`` and ``__dir__`` for a module that is ``namespace``; made functions are cached in it."""

    def __getattr__(name: str):
        fn = function(namespace, name)
        module_globals[name] = fn
        return fn

    def __dir__():
        return sorted(set(module_globals) | set(_catalog.covered(namespace)[0]))

    return __getattr__, __dir__
