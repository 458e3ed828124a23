"""gradserve's Python client.

- ``gradserve.Client`` (``gradserve.http``): the HTTP API, one method per route; problems raise
  ``gradserve.ProblemError``; an unreachable server raises ``gradserve.ConnectionError`` (a built-in
  ``ConnectionError``), a session the server no longer has ``gradserve.SessionLostError``.
- ``gradserve.torch``: torch's API, lazily recorded into a server session (``import gradserve.torch as torch``).
- ``gradserve.session(url=None, api_key=None)``: a server session for the torch layer, deleted on exit;
  ``gradserve.sync()`` sends what is recorded.
"""

from __future__ import annotations

from gradserve._version import __version__
from gradserve.errors import ConnectionError, ProblemError, SessionLostError, install_excepthook  # noqa: A004
from gradserve.http import Client
from gradserve.torch._context import session, sync

install_excepthook()

__all__ = ["Client", "ConnectionError", "ProblemError", "SessionLostError", "session", "sync", "__version__"]
