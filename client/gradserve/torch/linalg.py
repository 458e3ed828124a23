"""``gradserve.torch.linalg``: the catalog's ops under the names torch gives them in ``torch.linalg``."""

from __future__ import annotations

from gradserve.torch import _namespace

__getattr__, __dir__ = _namespace.install(globals(), "torch.linalg")
