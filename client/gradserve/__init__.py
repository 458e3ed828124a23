"""gradserve's Python client.

- ``gradserve.Client`` (``gradserve.http``): the HTTP API, one method per route; problems raise
  ``gradserve.ProblemError``.
- ``gradserve.torch``: torch's API, lazily recorded into a server session (``import gradserve.torch as torch``).
- ``gradserve.session(url=None, api_key=None)``: a server session for the torch layer, deleted on exit;
  ``gradserve.sync()`` sends what is recorded.
"""

from __future__ import annotations

from gradserve.errors import ProblemError
from gradserve.http import Client

__version__ = "0.1.0"


def session(url: str | None = None, api_key: str | None = None, client: Client | None = None):
    """``with gradserve.session(...)``: torch ops inside are recorded into a new server session."""
    from gradserve.torch._context import session as _session

    return _session(url, api_key, client)


def sync() -> None:
    """Send the ops the current session has recorded."""
    from gradserve.torch._context import sync as _sync

    _sync()


__all__ = ["Client", "ProblemError", "session", "sync", "__version__"]
