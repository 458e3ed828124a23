"""``gradserve.torch.autograd.functional``: the catalog's ops filed under ``torch.autograd.functional``."""

from __future__ import annotations

from gradserve.torch import _namespace

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd.functional")
