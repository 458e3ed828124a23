"""gradserve's Python client.

- ``gradserve.Client`` (``gradserve.http``): the HTTP API, one method per route; problems raise
  ``gradserve.ProblemError``.
- ``gradserve.torch``: torch's API, lazily recorded into a server session (``import gradserve.torch as torch``).
- ``gradserve.session(url=None, api_key=None)``: a server session for the torch layer, deleted on exit;
  ``gradserve.sync()`` sends what is recorded.
"""

from __future__ import annotations

from gradserve._version import __version__
from gradserve.errors import ProblemError
from gradserve.http import Client
from gradserve.torch._context import session, sync

__all__ = ["Client", "ProblemError", "session", "sync", "__version__"]
