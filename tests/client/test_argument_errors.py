"""Issue 25: a call torch's argument parser refuses raises torch's TypeError (AttributeError for a torch function
written in Python) at the torch line, with torch's message, and nothing is sent. The client checks the call
against the catalog's ``parser`` facts with the engine's own parser (``gradserve/torch/_torch_args.py`` is a
link to ``gradserve_server/engine/torch_args.py``): no per-op rule in the client."""

from __future__ import annotations

import pytest

import gradserve.torch as gtorch

#: calls torch refuses, run with ``t`` the module and the tensors ``x`` (float32, requires grad), ``i`` (int64) and
#: ``m`` (bool)
CALLS = [
    "t.add(x, None)",
    "t.add(x, x, foo=1)",
    "x.add(None)",
    "x.sub_('a')",
    "t.mul(x, 'a')",
    "t.exp(x, x)",
    "t.sum(x, 'a')",
    "x.sum(dim='a')",
    "t.max(x, 'a')",
    "t.sort(x, 'a')",
    "t.unsqueeze(x, 1.5)",
    "t.transpose(x, 0)",
    "x.view(None)",
    "t.where(m, 'a', x)",
    "t.clamp(x, 'a')",
    "t.eq(x, None)",
    "t.cat(x, 0)",
    "t.matmul(x, 2)",
    "t.nn.functional.mse_loss(x, None)",
    "t.nn.functional.cross_entropy(x, None)",
    "t.nn.functional.softmax(None, 0)",
    "t.index_select(x, 0, 1)",
    "t.gather(x, 0.5, i)",
    "t.lerp(x, x, 'a')",
    "t.masked_fill(x, m, 'a')",
    "t.rand()",
    "x.mul_(None)",
    "x.clamp('a')",
    "x.max('a')",
    "x.transpose(0, 'a')",
    "x.unsqueeze(dim=None)",
    "x.masked_fill(m, 'a')",
    "x.index_select(0, [0])",
]


def _run(t, code: str, sent=None):
    x = t.ones(2, 3).requires_grad_()
    i = t.zeros(2, 3, dtype=t.int64)
    m = x > 0
    before = sent() if sent else 0
    try:
        eval(code, {"t": t, "x": x, "i": i, "m": m})
    except Exception as e:  # noqa: BLE001 - the class and the message are what is compared
        return type(e).__name__, str(e), (sent() if sent else 0) - before
    return None


@pytest.mark.parametrize("code", CALLS)
def test_a_refused_call_raises_torchs_error_at_the_line_and_sends_nothing(ctx, code):
    torch = pytest.importorskip("torch")
    expected = _run(torch, code)
    assert expected is not None, f"torch takes {code}"
    got = _run(gtorch, code, lambda: len(ctx.recorder().pending))
    assert got == expected  # the same class and message, and no op recorded for the call


def test_a_call_torch_takes_is_recorded(ctx):
    x = gtorch.ones(2, 3)
    assert gtorch.add(x, 2, alpha=3).sum().item() == 42.0
    x += 2  # iadd of a number, as torch takes it
    assert x.sum().item() == 18.0


#: in-place ops whose result their target cannot hold, decided from the out-of-place op's declared promotion; run
#: with ``i`` (int64), ``b`` (bool), ``f`` (float64) and ``z`` (a 0-d float32)
CASTS = ["i.add_(1.5)", "i.sub_(f)", "i.mul_(z)", "b.add_(1)", "b.mul_(i)", "i.div_(2)", "i.div_(i)", "b.div_(f)",
         "i.exp_()", "i.sqrt_()", "b.sigmoid_()", "i.tanh_()", "i.log_()"]


def _run_cast(t, code: str, sent=None):
    i = t.ones(2, 3, dtype=t.int64)
    b = t.ones(2, 3, dtype=t.bool)
    f = t.ones(2, 3, dtype=t.float64)
    z = t.tensor(2.0, dtype=t.float32)
    before = sent() if sent else 0
    try:
        eval(code, {"t": t, "i": i, "b": b, "f": f, "z": z})
    except Exception as e:  # noqa: BLE001 - the class and the message are what is compared
        return type(e).__name__, str(e), (sent() if sent else 0) - before
    return None


@pytest.mark.parametrize("code", CASTS)
def test_an_inplace_result_its_target_cannot_hold_raises_torchs_error_at_the_line(ctx, code):
    torch = pytest.importorskip("torch")
    expected = _run_cast(torch, code)
    assert expected is not None, f"torch takes {code}"
    assert _run_cast(gtorch, code, lambda: len(ctx.recorder().pending)) == expected


@pytest.mark.parametrize("code", ["i.add_(2)", "i.div_(2, rounding_mode='floor')", "f.add_(i)", "f.exp_()",
                                  "i.mul_(b)", "b.add_(b)"])
def test_an_inplace_result_its_target_holds_runs(ctx, code):
    torch = pytest.importorskip("torch")
    assert _run_cast(torch, code) is None and _run_cast(gtorch, code) is None
    ctx.flush()


#: wrong calls of an op ``{f}`` (its spelling), as a method and as a function
ALIAS_CALLS = ["x.{f}(0.7)", "t.{f}(x, 0.7)", "x.{f}('a')", "t.{f}(x, 'a')", "t.{f}(x, 'a', 'a', 'a', foo=1)",
               "x.{f}(foo=1)"]
#: aliases torch declares with overloads of their own (Number overloads shown, numpy's parameter names, another
#: parameter order): the message names the alias, with the op's overloads (deviations.md)
OWN_SIGNATURES = {"divide", "divide_", "true_divide", "true_divide_", "multiply", "multiply_", "subtract",
                  "subtract_", "swapaxes"}


def test_an_aliases_argument_messages_name_the_alias_as_torchs_do(ctx):
    torch = pytest.importorskip("torch")
    from gradserve.torch import _catalog

    checked, wrong = 0, {}
    for entry in {e["name"]: e for e in _catalog.catalog().values()}.values():
        for alias in entry["aliases"]:
            if alias.startswith("__") or not hasattr(torch.Tensor, alias) and not hasattr(torch, alias) and \
                    "." not in alias:
                continue  # (a name of the engine's own, not torch's)
            for call in ALIAS_CALLS:
                if "." in alias and call.startswith("x."):
                    continue
                own, spelled_call = call.format(f=entry["name"]), call.format(f=alias)
                if _run(torch, own) != _run(gtorch, own) or "has no attribute" in str(_run(torch, spelled_call)):
                    continue  # (only where the op's own message is torch's)
                checked += 1
                if _run(gtorch, spelled_call) != _run(torch, spelled_call):
                    wrong.setdefault(alias, []).append(spelled_call)
    assert checked > 100 and set(wrong) == OWN_SIGNATURES, wrong
