"""``gradserve.torch.autograd.forward_ad``: the catalog's ops filed under ``torch.autograd.forward_ad``."""

from __future__ import annotations

from gradserve.torch import _namespace

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd.forward_ad")
