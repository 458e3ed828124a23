"""Writes ``tests/client/dtype_rules.json``: what torch (2.13) gives for the unary and binary ops of the op table
(elementwise ops, reductions, special functions) called on each dtype, and on each pair of dtypes, as tensors with
dimensions, 0-d tensors and Python numbers: the result's dtype, or the exception's class and message; and for the
calls of ``CHECK_CASES`` (the ops with ``checks`` declared: where, clamp, max, sort, topk, nn losses, linalg, conv),
the first result's dtype or the exception. The client's dtype rules (``promotion`` in the catalog) and checks are
checked against it where torch is not installed (``test_dtype_rules.py``). Run it by hand:
``.venv/bin/python -m tests.client.dtype_rules_fixture``."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "dtype_rules.json"
FAMILIES = ("elementwise", "reduction", "special", "scan")
#: ops whose first operand comes second in torch's spelling (``2 ** x`` is the table's rpow(x, 2))
REFLECTED = {"rpow": lambda a, b: b ** a, "rsub": lambda a, b: b - a, "rtruediv": lambda a, b: b / a}
NUMBERS = {"int": 2, "float": 2.5, "bool": True}
#: what else a call needs (a dimension, an order), given by keyword
EXTRA = {"cumsum": {"dim": 0}, "cumprod": {"dim": 0}, "logcumsumexp": {"dim": 0}, "logsumexp": {"dim": 0},
         "flip": {"dims": [0]}, "mvlgamma": {"p": 1}, "special.multigammaln": {"p": 1},
         "clamp": {"min": 0}}


#: calls of the ops with ``checks`` (and their dtype rules): positional arguments and keywords, a tensor written
#: ``dtype[d0,d1]`` (``float32[]``: 0-d), anything else a JSON value
CHECK_CASES: dict[str, list[tuple[list, dict]]] = {
    "where": [(["bool[2,3]", "float32[2,3]", "float32[2,3]"], {}),
              (["float32[2,3]", "float32[2,3]", "float32[2,3]"], {}),
              (["int64[2,3]", "float32[2,3]", "int64[2,3]"], {}), (["bool[2,3]", "int64[2,3]", "float32[2,3]"], {}),
              (["bool[2,3]", "int64[2,3]", 2.5], {}), (["bool[2,3]", "float32[2,3]", "float16[2,3]"], {}),
              (["bool[2,3]", "int32[3]", "int64[]"], {}), (["uint8[3]", "float32[3]", "float32[3]"], {})],
    "clamp": [(["float32[3]"], {}), (["int64[3]"], {}), (["bool[3]"], {"min": 0}), (["int64[3]"], {"min": 0.5}),
              (["int64[3]"], {"min": True}), (["int64[3]"], {"min": "float32[3]"}),
              (["float32[3]"], {"max": "int64[3]"}), (["int32[3]"], {"min": 1, "max": 2}),
              (["float16[3]"], {"min": 0.5}), (["bool[3]"], {"min": True}), (["bool[3]"], {"max": False}),
              (["bool[3]"], {"min": True, "max": True}), (["bool[3]"], {"min": "bool[3]"}),
              (["bool[3]"], {"min": "bool[3]", "max": "bool[3]"}), (["bool[3]"], {"min": True, "max": 2}),
              (["int64[3]"], {"min": "float32[]"}), (["int32[3]"], {"min": "int64[3]"}),
              (["float16[3]"], {"min": "float32[3]"})],
    "clamp_": [(["int64[3]"], {"min": 0.5}), (["int64[3]"], {"max": 0.5}), (["int64[3]"], {"min": "float32[3]"}),
               (["bool[3]"], {"min": 1}), (["float16[3]"], {"min": "float32[3]"}), (["bool[3]"], {"min": True}),
               (["int32[3]"], {"min": 1, "max": 2.5}), (["float32[3]"], {})],
    "clamp_min_": [(["int64[3]", 0.5], {}), (["bool[3]", 2], {}), (["int64[3]", 2], {})],
    "clamp_max_": [(["uint8[3]", 0.5], {})],
    "max": [(["bool[2,3]"], {}), (["float32[0]", "int64[3]"], {}), (["int64[0]"], {"dim": 0}),
            (["int64[2,3]"], {"dim": 0}), (["float32[2,3]", "int64[2,3]"], {}),
            (["bool[2,3]", "bool[2,3]"], {}), (["float32[0]"], {}), (["float32[0,3]"], {"dim": 0}),
            (["float32[0,3]"], {"dim": 1}), (["float32[3,0]"], {"dim": -1}), (["float32[0]", "float32[0]"], {}),
            (["int32[]"], {})],
    "min": [(["float32[0]"], {}), (["float32[0,3]"], {"dim": 0}), (["int16[2]", "int32[2]"], {}),
            (["float64[2]"], {"dim": 0})],
    "argsort": [(["bool[3]"], {}), (["float32[2,3]"], {})],
    "topk": [(["bool[3]", 1], {}), (["bool[3]", 1], {"dim": 5}),
             (["float32[2,3]", 5], {}), (["float32[2,3]", -1], {}), (["int64[2,3]", 1], {}),
             (["float32[2,3]", 2], {"dim": 0}), (["float32[2,3]", 3], {"dim": 0}), (["float32[]", 1], {}),
             (["float32[]", 2], {}), (["float32[2,3]", 3], {})],
    "softmax": [(["int64[3]", 0], {}), (["bool[3]", 0], {}), (["float32[3]", 0], {}), (["int64[2,3]", 0], {}),
                (["int64[2,3]", -1], {}), (["int32[2,3]", 1], {}), (["int64[]", 0], {}),
                (["int64[3]", 0], {"dtype": "float64"}), (["float16[3]", 0], {})],
    "logcumsumexp": [(["int64[3]", 5], {}), (["int64[3]", 0], {}), (["float32[3]", 0], {})],
    "log_softmax": [(["int32[3]", 0], {}), (["float64[3]", 0], {}), (["int64[2,3]", 0], {})],
    "layer_norm": [(["int64[2,3]", [3]], {}), (["float32[2,3]", [3]], {}), (["bool[2,3]", [3]], {})],
    "normalize": [(["int64[2,3]"], {}), (["float32[2,3]"], {}), (["bool[2,3]"], {})],
    "mse_loss": [(["float32[4,3]", "float32[4]"], {}), (["int64[4,3]", "int64[4]"], {}),
                 (["float32[2,4]", "float64[]"], {}), (["float64[]", "float32[2,4]"], {}),
                 (["float32[]", "float64[]"], {}), (["float16[3]", "float32[3]"], {}),
                 (["int64[3]", "int64[3]"], {}), (["float32[3]", "int64[3]"], {}), (["int64[3]", "float32[3]"], {}),
                 (["bool[3]", "bool[3]"], {}), (["float32[3]", "float64[3]"], {})],
    "nll_loss": [(["float32[4,3]", "int64[]"], {}), (["float32[1,3]", "float32[]"], {}),
                 (["float32[3]", "int64[2]"], {}), (["int64[3]", "int64[2]"], {}), (["float32[3]", "float32[2]"], {}),
                 (["float32[4,3]", "int64[1,2]"], {}), (["float32[4,3]", "int64[3]"], {}),
                 (["float32[4,3]", "float32[3]"], {}), (["float32[4,3]", "int64[4,2]"], {}),
                 (["float32[2,3]", "float32[2]"], {}), (["float32[2,3]", "int32[2]"], {}),
                 (["float32[2,3]", "int64[2]"], {}), (["float32[2,3]", "uint8[2]"], {}),
                 (["int64[2,3]", "int64[2]"], {}), (["int64[2,3]", "float32[2]"], {}),
                 (["float32[2,3]", "float32[2,3]"], {}), (["float32[2,3]", "int64[2,3]"], {})],
    "cross_entropy": [(["float64[1,2,3]", "float64[1,2]"], {}), (["float32[4]", "float32[3,2,3]"], {}),
                      (["float32[]", "float32[]"], {}), (["float32[]", "float32[]"], {"ignore_index": 1}),
                      (["float32[3]", "float32[3]"], {"ignore_index": 0}), (["int64[]", "float32[1]"], {}),
                      (["float32[]", "int64[1]"], {}), (["float32[]", "int64[]"], {}), (["float32[3]", "int64[2]"], {}),
                      (["float32[3]", "float32[2]"], {}), (["float32[3]", "int64[1]"], {}),
                      (["int64[3]", "int64[2]"], {}),
                      (["float64[4]", "bool[2,1]"], {}), (["float32[2,3]", "int64[2,3]"], {}),
                      (["float32[2,3,4,5]", "int64[2,4]"], {}), (["float32[2,3,4,5]", "int64[2,4,6]"], {}),
                      (["float32[2,3,4,5,6]", "int64[2,4,5]"], {}), (["float32[2,3,4,5]", "float32[2,4,5]"], {}),
                      (["float32[2,3,4]", "bool[2,4]"], {}), (["int64[2,3]", "int64[2,3]"], {}),
                      (["float32[2,3,4]", "int64[2,4,1]"], {}),
                      (["float32[4,3]", "int64[3]"], {}), (["float32[4,3]", "float32[4,2]"], {}),
                      (["int64[4,3]", "int64[3]"], {}), (["float32[4,3]", "int64[4,2]"], {}),
                      (["float32[4,3,2]", "int64[4,2]"], {}), (["float32[4,3]", "float32[3]"], {}),
                      (["float32[2,3]", "int32[2]"], {}), (["float32[2,3]", "int64[2]"], {}),
                      (["float32[2,3]", "float32[2,3]"], {}), (["float32[2,3]", "bool[2]"], {}),
                      (["float32[2,3]", "int64[2,3]"], {}), (["float32[2,3]", "int64[2,4]"], {}),
                      (["float32[2,3]", "float32[2]"], {}), (["int64[2,3]", "int64[2]"], {}),
                      (["int64[2,3]", "float32[2]"], {}), (["float64[2,3]", "float32[2,3]"], {}),
                      (["int64[2,3,4]", "int64[2,4]"], {}), (["int64[3]", "int64[]"], {}),
                      (["float32[2,3,4]", "int32[2,4]"], {})],
    "binary_cross_entropy": [(["float32[4]", "float32[3]"], {}), (["float32[4]", "int64[3]"], {}),
                             (["int64[4]", "int64[3]"], {}),
                             (["float32[3]", "int64[3]"], {}), (["float32[3]", "float64[3]"], {}),
                             (["float32[3]", "float32[3]"], {}), (["float64[3]", "float32[3]"], {}),
                             (["int64[3]", "int64[3]"], {}), (["int64[3]", "float32[3]"], {})],
    "linalg.inv": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {}), (["int64[3]"], {}),
                   (["int64[2,3]"], {}), (["float32[]"], {})],
    "inverse": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {})],
    "linalg.det": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {}), (["float64[2,2,2]"], {})],
    "det": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {})],
    "logdet": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {})],
    "linalg.slogdet": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {})],
    "slogdet": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {}), (["float32[3,3]"], {})],
    "linalg.solve": [(["int64[3,3]", "int64[3,3]"], {}), (["float32[2,3]", "float32[2,3]"], {}),
                     (["float32[3]", "float32[3]"], {}), (["float32[3,3]", "int64[3,3]"], {})],
    "linalg.cholesky": [(["int64[3,3]"], {}), (["float32[2,3]"], {}), (["float32[3]"], {})],
    "linalg.svd": [(["int64[3,3]"], {}), (["float32[3]"], {}), (["float32[2,3]"], {})],
    "linalg.svdvals": [(["int64[3,3]"], {}), (["float32[3]"], {})],
    "linalg.vector_norm": [(["int64[3]"], {}), (["float32[3]"], {}), (["bool[3]"], {})],
    "linalg.matrix_norm": [(["int64[3,3]"], {}), (["float32[3]"], {}), (["float32[2,3]"], {}), (["int64[3]"], {})],
    "linalg.norm": [(["int64[3]"], {}), (["float32[3]"], {}), (["int64[3,3]"], {}), (["bool[3]"], {})],
    "mm": [([f"{d}[2,3]", "float32[3,2]"], {}) for d in ("float64", "int64", "int32", "int16", "int8", "uint8", "bool",
                                                          "float16", "bfloat16")]
    + [(["float32[2,3]", "float64[4,2]"], {}), (["float32[2,3]", "float32[3,2]"], {}),
       (["float32[3]", "float64[3,2]"], {}), (["float32[2,3]", "float32[3]"], {})],
    "dot": [(["float32[2,3]", "float32[3]"], {}), (["float32[3]", "float64[3]"], {}), (["int64[3]", "int64[3]"], {})],
    "outer": [(["float32[2,3]", "float32[3]"], {}), (["float32[3]", "float32[3,1]"], {}),
              (["float32[3]", "int64[2]"], {})],
    "tril": [(["float32[3]"], {}), (["int64[2,3]"], {})],
    "triu": [(["float32[]"], {}), (["bool[2,3,2]"], {})],
    "matmul": [(["float32[3]", "float64[3]"], {}), (["float32[3]", "float64[3,2]"], {}),
               (["float32[4,2,3]", "float64[3,2]"], {}), (["float32[2,3]", "int64[3,2]"], {}),
               (["float32[2,3]", "float64[4,2]"], {}), (["float32[3]", "float64[4]"], {}),
               (["float32[2,3]", "float64[3]"], {}), (["float32[2,3]", "float64[4,3,2]"], {}),
               (["float32[2,3]", "float32[3,2]"], {}), (["float64[5,2,3]", "float32[3]"], {}),
               (["float64[3]", "float32[5,3,2]"], {}), (["float64[5,2,3]", "float32[1,3,2]"], {}),
               (["float64[5,2,3]", "float32[5,4,2]"], {}), (["float32[5,2,3]", "int64[5,3,2]"], {}),
               (["float32[2,3]", "int64[4]"], {}), (["float64[2,5,2,3]", "float32[5,3,2]"], {}),
               (["float32[]", "float64[2,3]"], {}), (["float32[3]", "float32[]"], {})],
    "mv": [(["float32[2,3]", "float64[3]"], {}), (["float64[2,3]", "float32[3]"], {}),
           (["float32[]", "float32[2]"], {}), (["float32[]", "int64[]"], {}), (["float32[2,2]", "float32[]"], {}),
           (["float32[2,3]", "int64[3]"], {}), (["float32[2,3]", "float64[4]"], {}),
           (["float32[2,3]", "float32[3]"], {}), (["float32[3]", "float64[3]"], {}),
           (["float32[2,3]", "float32[3,1]"], {})],
    "bmm": [(["float32[5,2,3]", "float64[5,3,2]"], {}), (["int64[5,2,3]", "float32[5,3,2]"], {}),
            (["float32[5,2,3]", "float64[5,4,2]"], {}), (["float32[5,2,3]", "float64[1,3,2]"], {}),
            (["float32[5,2,3]", "float32[5,3,2]"], {}), (["float32[2,3]", "float32[2,3]"], {}),
            (["float32[2,2,3]", "float32[3,3,2]"], {}), (["float32[2,2,3]", "float32[3,2]"], {}),
            (["float32[2,3]", "float64[2,3,2]"], {}), (["float32[2,2,3]", "float64[2,4,2]"], {})],
    "linear": [(["float32[]", "float32[]"], {}), (["float32[2]", "float64[]"], {}),
               (["float32[2]", "float32[3,3]"], {}), (["float32[2,3]", "float64[2,3,4]"], {}),
               (["float32[3]", "float32[3,2]", "float32[3]"], {}), (["float32[2]", "float32[2,3,4]"], {}),
               (["float32[2,3]", "float64[2,3]"], {}), (["float32[4,2,3]", "float64[2,3]"], {}),
               (["float32[3]", "float64[2,3]"], {}), (["int64[2,3]", "float32[2,3]"], {}),
               (["float32[2,3]", "float64[2,4]"], {}), (["float32[2,3]", "float32[2,3]", "float64[2]"], {}),
               (["float32[2,3]", "float32[2,3]"], {}), (["float64[2,3]", "float32[4,3]", "float32[4]"], {}),
               (["float64[2,3]", "float32[4,3]", "float64[4]"], {}),
               (["float32[2,3]", "float32[4,5]", "float64[4]"], {}), (["float32[3]", "float32[4,3]", "int64[4]"], {}),
               (["float64[5,2,3]", "float32[4,3]", "float32[4]"], {}), (["float32[2,3]", "float32[4,5]"], {}),
               (["float32[5,2,3]", "float32[4,5]"], {}), (["float32[2,3]", "float32[4,5]", "float32[4]"], {}),
               (["float32[2,3]", "float64[4,5]"], {})],
    "embedding": [([f"{d}[2]", "float32[4,3]"], {}) for d in ("float32", "float64", "float16", "bfloat16", "uint8",
                                                            "int8", "int16", "int32", "int64", "bool")]
    + [(["float32[2]", "float32[4,3]"], {"max_norm": 1.0}), (["int64[2]", "float32[4,3]"], {"max_norm": 1.0})],
    "one_hot": [(["float32[2]"], {}), (["int32[2]"], {}), (["bool[2]"], {})],
    "celu": [(["float32[2]", 0.0], {}), (["int64[2]", 0], {}), (["float32[2]"], {"alpha": 0.0}),
             (["float32[2]", 0.5], {})],
    "index_select": [(["float32[2,3]", 5, "float32[2]"], {}), (["float32[2,3]", 1, "float32[2]"], {}),
                     (["float32[2,3]", 1, "int16[2]"], {}),
                     (["float32[2,3]", 1, "int32[2]"], {}), (["float32[2,3]", 1, "int64[2]"], {}),
                     (["float32[2,3]", 0, "int64[1,1]"], {}), (["float32[2,3]", 0, "float32[1,1]"], {}),
                     (["float32[2,3]", 5, "int64[1,1]"], {}), (["float32[2,3]", 0, "int64[0,2]"], {}),
                     (["float32[]", -1, "int64[2]"], {}), (["float32[]", 0, "int64[0]"], {}),
                     (["float32[]", 0, "float32[2]"], {})],
    "gather": [(["float32[2,3]", 5, "float32[2,1]"], {}), (["float32[2,3]", -3, "int64[2,1]"], {}),
               (["float32[2,3]", 1, "float32[2,1]"], {}), (["float32[2,3]", 1, "int32[2,1]"], {}),
               (["float32[2,3]", 1, "uint8[2,1]"], {}), (["float32[2,3]", 1, "float32[0,1]"], {}),
               (["float32[2,3]", 1, "int64[3,3]"], {}), (["float32[2,3]", 1, "int64[2]"], {}),
               (["float32[3]", 0, "int64[2,2]"], {}), (["float32[]", 0, "int64[2,2]"], {}),
               (["float32[3]", 0, "int64[]"], {}), (["float32[2,3]", 1, "int64[2,5]"], {}),
               (["float32[2,3]", 1, "int64[3,0]"], {}), (["float32[2,3]", 1, "float32[3,3]"], {})],
    "scatter": [(["float32[2,3]", 1, "float32[2,1]"], {"value": 1.0}),
                (["float32[2,3]", 2, "float32[2,1]"], {"value": 1.0}),
                (["float32[2,3]", 1, "int32[2,1]"], {"value": 1.0}),
                (["float32[2,3]", 1, "int16[2,1]", "float32[2,1]"], {}),
                (["float32[2,3]", 1, "float32[0,1]"], {"value": 1.0})],
    "scatter_add": [(["float32[2,3]", 1, "float32[2,1]", "float32[2,1]"], {}),
                    (["float32[2,3]", 1, "int64[2,1]", "float32[2,1]"], {}),
                    (["float32[2,3]", 1, "float32[0,1]", "float32[2,1]"], {})],
    "masked_fill": [([ "float32[2,3]", f"{d}[2,3]", 0.0], {}) for d in ("float32", "int64", "int32", "uint8", "float16",
                                                                     "bool")]
    + [(["float32[2,3]", "bool[3,2]", 0.0], {}), (["float32[2,3]", "bool[3]", 0.0], {}),
                     (["float32[2,3]", "int64[3,2]", 0.0], {})],
    "masked_select": [(["float32[2,3]", "float32[2,3]"], {}), (["float32[2,3]", "uint8[2,3]"], {}),
                      (["float32[2,3]", "bool[2,3]"], {})],
    "batch_norm": [(["int64[2,3]", "float32[3]", "float32[3]"], {}), (["int64[2,3]", None, None], {"training": True}),
                   (["float32[2,3]", None, None], {"training": True}), (["bool[2,3]", None, None], {"training": True})],
    "conv1d": [(["float32[1,2,5]", "float32[4,3,3]"], {}), (["float32[2,5]", "float32[4,3,3]"], {}),
               (["float32[1,2,5,5]", "float32[4,3,3]"], {}), (["float32[1,6,5]", "float32[4,3,3]"], {"groups": 2}),
               (["float32[1,6,5]", "float32[3,3,3]"], {"groups": 2}), (["float32[5]", "float32[4,3,3]"], {}),
               (["float32[1,3,5]", "float32[4,3,3]", "float32[3]"], {}),
               (["float32[1,3,5]", "float32[4,3,3]", "float32[1,4]"], {}), (["float32[3,5]", "float32[4,3,3,3]"], {}),
               (["float32[1,3,5]", "float32[4,3,3,3]"], {}), (["float32[1,3,2]", "float32[4,3,5]"], {"padding": 1}),
               (["float32[1,3,2]", "float32[4,3,3]"], {"dilation": 2}),
               (["float32[3,5]", "float32[4,3]"], {"padding": "same"}), (["float32[3,5]", "float32[4,3]"], {}),
               (["float32[3,5]", "float32[4,3,3,3]"], {"padding": "same"}),
               (["float32[3,5]", "float32[4,3]"], {"padding": "foo"})],
    "cat": [([[]], {}), ([["float32[2,3]", "float32[2,4]"]], {}), ([["float32[2,3]", "float32[3,3]"]], {"dim": 1}),
            ([["float32[2,3]", "float32[3]"]], {}), ([["float32[2,3]", "float32[2,3]"]], {"dim": 2}),
            ([["float32[0]", "float32[2,3]", "float32[2,4]"]], {}),
            ([["float32[2,3]", "float32[2,4]", "float32[3]"]], {}),
            ([["float32[2,3]", "float32[3]", "float32[2,4]"]], {}), ([["float32[2,3]", "float32[4,3]"]], {}),
            ([["float32[2,3]", "float32[2,5]"]], {"dim": -1}), ([["float32[2,3]", "float32[]"]], {}),
            ([["float32[]", "float32[2,3]"]], {"dim": 1})],
    "stack": [([[]], {}), ([["float32[2,3]", "float32[3,2]"]], {}),
              ([["float32[2,3]", "float32[2,3]", "float32[3]"]], {}),
              ([["float32[2,3]", "float32[2,3]"]], {})],
    "expand": [(["float32[3,4]", [2, 3]], {}), (["float32[3,4]", [3, 5]], {}), (["float32[3,4]", [2, 3, 4]], {}),
               (["float32[3,1]", [3, 5]], {}), (["float32[3,4]", [-1, 4]], {}), (["float32[3,4]", [4, -1]], {}),
               (["float32[1,4]", [2, 3, 5]], {}), (["float64[4,4,1]", [3]], {}), (["bool[2,3]", [3]], {}),
               (["int64[2,3]", []], {})],
    "setitem": [(["float32[2,3]", 5, 1.0], {}), (["float32[2,3]", [None, 1, 7], 1.0], {}),
                (["float32[2,3]", ["bool[3]"], 1.0], {}), (["float32[2,3]", [0, "bool[2]"], 1.0], {}),
                (["float32[2,3]", [1, 2], 1.0], {})],
    "float_power_": [(["float32[3]", 2], {}), (["int64[3]", 2.5], {}), (["bool[3]", 2], {}), (["float64[3]", 2], {})],
    "getitem": [(["float32[2,3]", [0, 0, 0]], {}), (["float32[2,3,4]", [None, 1, 7]], {}),
                (["float32[2,3]", [None, 0, 5]], {}), (["int64[2,3]", 2], {}),
                (["float32[2,3]", [1, -4]], {}), (["float32[2,3]", [0, -3]], {}), (["bool[2,3]", [None, None, 1]], {}),
                (["float32[2,3,4]", [None, 1, 2, 3, None]], {}), (["float32[2,3]", [[0, 1], 0, 1]], {}),
                (["float32[]", 0], {}), (["float32[]", -1], {}), (["float32[]", 2], {}),
                (["float32[]", [0]], {}), (["float32[2,3]", "float32[2]"], {}),
                (["float32[2,3]", "int16[2]"], {}), (["float32[2,3]", "int64[2]"], {}),
                (["float32[2,3]", ["bool[3]"]], {}), (["float32[2,3]", [0, "bool[4]"]], {}),
                (["float32[2,3]", ["bool[2,2]"]], {}), (["float32[2,3]", ["bool[2]", "bool[2]"]], {}),
                (["float32[2,3]", ["bool[2,3]"]], {}), (["float32[2,3,4]", [None, "bool[3]"]], {}),
                (["float32[2,3,4]", [1, None, "bool[3]"]], {}), (["float32[2,3]", ["uint8[2,2]"]], {}),
                (["float32[2,3]", ["bool[3]", 5]], {})],
    "select": [(["float32[]", 0, 0], {}), (["float32[]", 1, 0], {}), (["float32[2,3]", 0, 2], {}),
               (["float32[2,3]", -1, -4], {}), (["float32[2,3]", 1, 2], {})],
    "narrow": [(["float32[]", 0, 0, 1], {}), (["float32[2,3]", 0, 0, 3], {}), (["float32[2,3]", 1, -4, 1], {}),
               (["float32[2,3]", 1, -1, 2], {}), (["float32[2,3]", 1, 0, -1], {}), (["float32[2,3]", 1, 3, 0], {}),
               (["float32[2,3]", 1, -3, 1], {})],
    "expand_as": [(["float32[3,1]", "int64[3,5]"], {}), (["float64[4,4,1]", "float32[4,4]"], {}),
                  (["float32[3,4]", "float32[2,3]"], {})],
    "broadcast_to": [(["float32[3,1]", [3, 5]], {}), (["bool[4,4,1]", [4]], {}), (["float32[3,4]", [3, 5]], {})],
    "permute": [(["float32[3,4]", [0]], {}), (["float32[3,4]", [0, 0]], {}), (["float32[3,4]", [1, -1]], {}),
                (["float32[3,4]", [1, 0]], {}), (["float32[3,4,2]", [2, 0, 1, 3]], {})],
    "unflatten": [(["float32[12]", 0, [5, -1]], {}), (["float32[12]", 0, [3, 5]], {}),
                  (["float32[2,12]", -1, [3, 4]], {}),
                  (["float32[2,12]", 1, [3, -1]], {}), (["float32[2,12]", 1, [0, -1]], {}),
                  (["float32[2,3]", 1, []], {}), (["float32[2,3]", -1, [2, 2]], {})],
    "repeat": [(["float32[2,3]", [2]], {}), (["float32[2,3]", [2, 1, 1]], {}), (["float32[2,3]", [1, 1]], {})],
    "flatten": [(["float32[2,3]", 1, 0], {}), (["float32[2,3,4]", -1, 1], {}), (["float32[2,3]", 0, -1], {}),
                (["float32[2,3]", 1, -1], {})],
    "movedim": [(["float32[2,3]", 0, 2], {}), (["float32[2,3]", 0, 1], {})],
    "t": [(["float32[2,3,4]"], {}), (["float32[2,3]"], {}), (["float32[]"], {}), (["float32[1,2,3,4]"], {})],
    "sum": [(["float32[2,3]", [0, 0]], {}), (["float32[2,3]", [0, -2]], {}), (["float32[2,3]", [0, 1]], {}),
            (["int64[2,3]", [1, -1]], {})],
    "conv2d": [(["float32[2,3]", "float32[4,3,3,3]"], {}), (["float32[1,2,5,5]", "float32[4,3,3,3]"], {}),
               (["float32[1,6,5,5]", "float32[4,3,3,3]"], {"groups": 2}),
               (["float32[1,6,5,5]", "float32[3,3,3,3]"], {"groups": 2}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]", "float32[3]"], {}),
               (["float32[3,5,5]", "float32[4,2,3,3]"], {}), (["float32[1,3,5,5]", "float32[4,3,3,3]"], {}),
               (["float32[1,3,5,5,5]", "float32[4,3,3,3]"], {}),
               (["float32[2,5,5]", "float32[4,3,3,3]", "float32[5]"], {}),
               (["int64[1,3,5,5]", "float32[4,3,3,3]"], {}), (["int64[1,2,5,5]", "float32[4,3,3,3]"], {}),
               (["float32[1,3,5,5]", "float64[4,3,3,3]"], {}), (["int64[1,3,5,5]", "int64[4,3,3,3]"], {}),
               (["float32[2,5]", "float64[4,3,3,3]"], {}), (["float32[1,3,5,5]", "float32[4,3,3]"], {}),
               (["float32[1,3,5,5]", "float32[4,3,3]"], {"stride": 2}),
               (["float32[1,3,5,5]", "float32[4,3,3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3,3]"], {}), (["float32[1,3,2,2]", "float32[4,3,3,3]"], {}),
               (["float32[1,3,2,2]", "float32[4,3,3,3]"], {"padding": 1}),
               (["float32[1,3,2,2]", "float32[4,3,3,3]"], {"padding": [1, 0]}),
               (["float32[1,3,2,2]", "float32[4,3,3,3]"], {"padding": "valid"}),
               (["float32[1,3,2,2]", "float32[4,3,3,3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"dilation": 3}),
               (["float32[3,2,6]", "float32[4,3,3,3]"], {}), (["float32[1,3,2,2]", "float64[4,3,3,3]"], {}),
               (["float32[1,2,2,2]", "float32[4,3,3,3]"], {}),
               (["float32[1,3,2,2]", "float32[4,3,3,3]", "float32[5]"], {}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"stride": [2, 1]}),
               # padding modes: their own path (issue 25)
               (["float32[3,5,5]", "float32[4,3,3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3,3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3]"], {"padding": "valid"}),
               (["float32[1,3,5,5]", "float32[3]"], {"padding": "same"}), (["float32[1,3,5,5]", "float32[3]"], {}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"padding": "SAME"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"padding": "same", "stride": 2}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"padding": "same", "stride": [1, 1, 1]}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"padding": "same", "dilation": [1, 2, 1]}),
               (["float32[1,3,5,5]", "float32[4,3,3]"], {"padding": "same", "stride": [1, 1, 1]}),
               (["float32[1,4,5,5]", "float32[4,3,3,3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]", "float32[3]"], {"padding": "same"}),
               (["float32[1,3,5,5]", "float32[4,3,3,3]"], {"padding": "same", "stride": [1, 1]})],
}
#: matrix products of bool tensors (torch's CPU kernels have none), and F.linear of a vector weight (a dot or an mv)
for _op, _cases in {
    "matmul": [(["bool[3]", "bool[3]"], {}), (["bool[2,3]", "bool[3]"], {}), (["bool[2,3]", "bool[3,2]"], {}),
               (["bool[3]", "bool[2,3,2]"], {}), (["bool[2,3]", "bool[4]"], {}), (["bool[3]", "float32[3]"], {})],
    "mv": [(["bool[2,3]", "bool[3]"], {}), (["float32[2,3]", "float32[4]"], {})],
    "dot": [(["bool[3]", "bool[3]"], {}), (["float32[3]", "float32[4]"], {})],
    "mm": [(["bool[2,3]", "bool[3,2]"], {})],
    "unbind": [(["float32[]"], {}), (["float32[]", -1], {}), (["float32[]", 1], {}), (["float32[2]", 0], {})],
    "roll": [(["float32[]", 1, 0], {}), (["float32[]", 1, -1], {}), (["float32[]", 1, 3], {}),
             (["float32[2]", 1, 0], {})],
    "topk": [(["bool[3]", 5], {"dim": 0}), (["bool[3]", 2], {"dim": 0}), (["bool[2,3]", 1], {"dim": 2}),
             (["bool[]", 1], {"dim": 1})],
    "argmax": [(["bool[2,3]"], {"dim": 2}), (["float32[2,3]"], {"dim": 1}), (["float32[2,0]"], {"dim": -1}),
               (["float32[2,0]"], {}), (["float32[2,0,3]"], {"dim": 2}), (["float32[2,0]"], {"dim": 0}),
               (["float32[2,0]"], {"dim": 5})],
    "argmin": [(["bool[2]"], {"dim": 1}), (["float32[0]"], {"dim": 0}), (["int64[0,2]"], {"dim": 1, "keepdim": True})],
    "linear": [(["float32[3,4]", "int64[4]"], {}), (["float32[4]", "int64[4]"], {}),
               (["float32[4]", "float32[3]"], {}), (["float32[2,16]", "float32[2]"], {}), (["bool[4]", "bool[4]"], {}),
               (["bool[3,4]", "bool[3,4]"], {}), (["bool[5,2,3]", "bool[3]"], {}),
               (["float32[5,2,3]", "float32[4]"], {})],
}.items():
    CHECK_CASES[_op] = CHECK_CASES.get(_op, []) + _cases


def operand_kinds(arity: int, dtypes: list[str]) -> list[tuple[str, ...]]:
    """The operand combinations tried: ``dim:<dtype>`` (a tensor with dimensions), ``zero:<dtype>`` (0-d),
    ``number:<int|float|bool>`` (a Python number, second operand only)."""
    if arity == 1:
        return [(f"dim:{d}",) for d in dtypes]
    out = []
    for a in dtypes:
        out += [(f"dim:{a}", f"dim:{b}") for b in dtypes]
        out += [(f"dim:{a}", f"zero:{b}") for b in dtypes]
        out += [(f"dim:{a}", f"number:{n}") for n in NUMBERS]
    return out


def arity(entry: dict) -> int | None:
    """1 or 2: the op's required tensor arguments (None: another arity, or a call of them that returns a tuple:
    where(condition), not tried)."""
    if entry.get("tuple_when"):
        return None
    required = [a for a in entry["arguments"] if a.get("tensor") and "default" not in a and a.get("required", True)]
    return len(required) if len(required) in (1, 2) and not any(a.get("tensor_list") for a in required) else None


def torch_callable(torch, name: str):
    if "." in name:  # linalg.inv
        space, _, attr = name.partition(".")
        return getattr(getattr(torch, space), attr)
    if name in REFLECTED:
        return REFLECTED[name]
    if name == "getitem":  # t[index] (a JSON list: a tuple index)
        return lambda t, index: t[tuple(index) if isinstance(index, list) else index]
    if name == "setitem":  # t[index] = value
        return _setitem
    if name == "polygamma":  # polygamma(n, input)
        return lambda x: torch.polygamma(1, x)
    for space in (torch, torch.nn.functional, torch.special, torch.Tensor):  # (Tensor: expand, a method only)
        fn = getattr(space, name, None)
        if fn is not None:
            return fn
    return None


def _setitem(t, index, value):
    t[tuple(index) if isinstance(index, list) else index] = value
    return t


def make(torch, kind: str):
    where, _, what = kind.partition(":")
    if where == "number":
        return NUMBERS[what]
    dtype = getattr(torch, what)
    values = [True, True, True] if what == "bool" else [1, 2, 3] if not dtype.is_floating_point else [0.5, 0.25, 0.75]
    t = torch.tensor(values, dtype=dtype)
    return t[0].clone() if where == "zero" else t


def outcome(torch, fn, args: list, kwargs: dict):
    """The dtype of ``fn(*args, **kwargs)``'s (first) result, or torch's exception as [class, message]."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch's exception is the fact recorded
        return {"error": [type(e).__name__, str(e)]}
    if isinstance(out, tuple):
        out = out[0]
    return str(out.dtype).removeprefix("torch.")


def case_key(op: str, args: list, kwargs: dict) -> str:
    """A call as the fixture names it: ``where(bool[2,3], float32[2,3], 2.5)``."""
    parts = [str(a) if isinstance(a, str) else json.dumps(a) for a in args]
    parts += [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in kwargs.items()]
    return f"{op}({', '.join(parts)})"


def spec_value(torch, value):
    """A case's argument for torch: ``dtype[shape]`` a tensor (ones), a dtype name given as ``dtype=`` a dtype."""
    if isinstance(value, str) and value.endswith("]"):
        dtype, _, dims = value[:-1].partition("[")
        shape = [int(d) for d in dims.split(",") if d]
        return torch.ones(shape, dtype=getattr(torch, dtype))
    if isinstance(value, list) and any(isinstance(v, str) for v in value):  # (a list of tensors: cat's)
        return [spec_value(torch, v) for v in value]
    return value


def check_outcome(torch, op: str, args: list, kwargs: dict):
    call_kwargs = {k: getattr(torch, v) if k == "dtype" else spec_value(torch, v) for k, v in kwargs.items()}
    fn = getattr(torch.nn.functional, op, None) or torch_callable(torch, op)  # (F.embedding, not aten's order)
    return outcome(torch, fn, [spec_value(torch, a) for a in args], call_kwargs)


def build() -> dict:
    import torch

    import gradserve_server.engine as E
    from gradserve_server.engine import dtypes

    out: dict = {"torch": torch.__version__, "dtypes": list(dtypes.NAMES), "ops": {}}
    for entry in E.op_catalog():
        n = arity(entry)
        if entry["family"] not in FAMILIES or entry["inplace"] or n is None:
            continue
        fn = torch_callable(torch, entry["name"])
        if fn is None:
            continue
        extra = EXTRA.get(entry["name"], {})
        out["ops"][entry["name"]] = {" ".join(k): outcome(torch, fn, [make(torch, kind) for kind in k], extra)
                                     for k in operand_kinds(n, list(dtypes.NAMES))}
    out["checks"] = {case_key(op, args, kwargs): check_outcome(torch, op, args, kwargs)
                     for op, cases in CHECK_CASES.items() for args, kwargs in cases}
    return out


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(build(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
