"""``gradserve.torch.utils``: ``data`` (datasets, samplers, DataLoader)."""

import importlib as _importlib

_importlib.import_module(f"{__name__}.data")
