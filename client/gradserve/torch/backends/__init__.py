"""``torch.backends`` as CPU-only torch has it: the settings programs write (``cudnn.benchmark = True``,
``cuda.matmul.allow_tf32``) are kept and change nothing here (the server computes with numpy on its CPU, the same
way whatever they say); the availability checks say what torch built without CUDA or MPS says."""

from __future__ import annotations

import importlib as _importlib

for _sub in ("cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp"):
    _importlib.import_module(f"{__name__}.{_sub}")
