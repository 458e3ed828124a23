"""``gradserve.torch.nn.functional``: the catalog's ``nn`` ops and torch's activation functions."""

from __future__ import annotations

from gradserve.torch import _namespace

__getattr__, __dir__ = _namespace.install(globals(), "torch.nn.functional")
