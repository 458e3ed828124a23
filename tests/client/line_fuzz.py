"""Random torch programs, one statement a line, for the line-by-line comparison of ``gradserve.torch`` with torch
(issue 25): what each line prints and raises must be torch's (``test_line_fuzz.py``).

A program makes three tensors (float, integer or bool; some transposed, some requiring grad), then applies ops
to the tensors so far, printing after each what the user would look at (shape, dtype, flags, ``grad_fn``'s class,
strides), and ends with a value. The ops are the ones torch users write: views and in-place ops on them, indexing,
reductions, matrix products, losses, ``backward`` and ``.grad``, ``no_grad``, ``detach`` and ``.data``. Arguments
are drawn without looking at the tensors, so many lines fail: the failures are compared too.

The generator is deterministic from its seed and imports no torch; ``line_fuzz_fixture`` records torch's
outcomes of ``SEEDS``.
"""

from __future__ import annotations

import math
import random

#: the programs of the committed fixture (a few hundred: the suite runs them against a live server): the first 240,
#: and fresh seeds that once differed (issue 25's masks, index_select, cross_entropy, multi-output views, matmul's
#: routes, overlaps, strides of sizes 1 and 0)
SEEDS = [*range(240), 30013, 30048, 30073, 30405, 30486, 30742, 30802, 31070, 40190, 41192, 50852]
OPS_PER_PROGRAM = 14


def _shape(rng: random.Random) -> list[int]:
    return [rng.choice([1, 2, 3, 4]) for _ in range(rng.randrange(1, 4))]


def _dim(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 2])


def make(rng: random.Random, name: str) -> str:
    """A line binding ``name`` to a tensor of small distinct values (``arange``), of a random dtype and shape."""
    s = _shape(rng)
    dtype = rng.choice(["torch.float32"] * 4 + ["torch.int64", "torch.bool", "torch.float64"])
    n = math.prod(s)
    if dtype == "torch.bool":
        base = f"(torch.arange({n}).reshape({s}) % 3 == 0)"
    else:
        base = f"(torch.arange({n}, dtype={dtype}).reshape({s}) - 2)"
    if rng.random() < 0.3 and len(s) >= 2:
        base += ".transpose(0, 1)"
    if dtype.startswith("torch.float") and rng.random() < 0.4:
        return f"{name} = {base}.requires_grad_()"
    return f"{name} = {base}"


def op(rng: random.Random, names: list[str]) -> str:
    """An expression over ``names`` (a view, an in-place op, a product, a loss...)."""
    a, b, c = (rng.choice(names[:3] if rng.random() < 0.4 else names) for _ in range(3))  # (a, b, c: always bound)
    sh, d, d2 = _shape(rng), _dim(rng), _dim(rng)
    i, k = rng.randrange(-2, 3), rng.randrange(1, 3)
    index = rng.choice(["torch.tensor([0])", "torch.tensor([0, -1])", "torch.tensor([1, 0])", b])
    return rng.choice([
        # elementwise, also of integer and bool tensors in float ops
        f"{a}.exp()", f"{a}.neg()", f"{a}.abs()", f"{a}.sigmoid()", f"{a}.tanh()", f"{a}.relu()", f"{a}.sqrt()",
        f"{a} + {b}", f"{a} * {b}", f"{a} - {b}", f"{a} / {b}", f"{a} + 1.5", f"{a} * 2", f"{a} / 2",
        f"{a} // 2", f"{a} ** 2", f"{a}.pow({b})", f"{a}.clamp(0, 1)", f"{a}.eq({b})", f"{a} < {b}",
        f"torch.where({a} > 0, {b}, {c})", f"{a}.masked_fill({b}, 1.0)", f"{a}.float() * 0.5",
        # reductions and scans
        f"{a}.sum({d})", f"{a}.mean({d})", f"{a}.sum()", f"{a}.softmax({d})", f"{a}.cumsum({d})",
        f"{a}.max({d}).values", f"{a}.sort({d}).indices", f"{a}.topk({k}, {d}).values", f"{a}.argmax({d})",
        f"{a}.any({d})", f"{a}.logsumexp({d})", f"{a}.var({d})", f"{a}.norm()", f"{a}.nonzero()",
        # views and layout
        f"{a}.t()", f"{a}.transpose({d}, {d2})", f"{a}.view({sh})", f"{a}.view(-1)", f"{a}.reshape({sh})",
        f"{a}.unsqueeze({d})", f"{a}.squeeze({d})", f"{a}.flatten()", f"{a}.expand({sh})",
        f"{a}.permute({rng.sample(range(3), rng.randrange(1, 4))})", f"{a}.narrow({d}, 0, {rng.randrange(3)})",
        f"{a}.select({d}, {i})", f"{a}[{i}]", f"{a}[:, {i}]", f"{a}[..., ::2]", f"{a}[1:]",
        f"{a}.split({k}, {d})[0]", f"{a}.chunk({k}, {d})[-1]", f"{a}.unbind({d})[0]", f"{a}.diagonal()",
        f"{a}.movedim(0, {d})", f"{a}.unflatten(0, {sh})", f"{a}.view_as({b})", f"{a}.expand_as({b})",
        f"{a}.reshape_as({b})", f"{a}.tensor_split(2, {d})[1]", f"{a}.contiguous()", f"{a}.flip({d})",
        f"{a}.roll(1, {d})", f"{a}.tril()", f"{a}.repeat({sh})",
        # copies, dtypes, autograd
        f"{a}.clone()", f"{a}.detach()", f"{a}.data", f"{a}.float()", f"{a}.long()", f"{a}.bool()",
        f"{a}.double()", f"{a}.requires_grad_()", f"{a}.detach().requires_grad_()", f"{a}.grad",
        # in-place, on tensors and on views
        f"{a}.add_({b})", f"{a}.mul_(2)", f"{a}.zero_()", f"{a}[0].add_(1)", f"{a}[:, {i}].zero_()",
        f"{a}.t().mul_(2)", f"{a}.detach().add_(1)", f"{a}.data.mul_(2)", f"{a}.unsqueeze(0).sub_({b})",
        # gathering
        f"{a}.gather({d}, {b})", f"{a}.index_select({d}, {index})", f"{a}[{index}]",
        # products, linear algebra, losses
        f"{a} @ {b}", f"{a}.matmul({b})", f"torch.mm({a}, {b})", f"torch.bmm({a}, {b})", f"torch.mv({a}, {b})",
        f"torch.dot({a}, {b})", f"torch.outer({a}, {b})", f"torch.nn.functional.linear({a}, {b})",
        f"torch.linalg.inv({a})", f"torch.linalg.det({a})", f"torch.cat([{a}, {b}], {d})", f"torch.stack([{a}, {b}])",
        f"torch.nn.functional.mse_loss({a}, {b})", f"torch.nn.functional.cross_entropy({a}, {b})",
    ])


def statement(rng: random.Random, names: list[str], target: str) -> str:
    """A line binding ``target``: mostly ``target = op``, sometimes under ``no_grad`` or after a ``backward``."""
    roll = rng.random()
    if roll < 0.06:
        return f"with torch.no_grad(): {target} = {op(rng, names)}"
    if roll < 0.12:
        return f"{target} = {rng.choice(names)}.sum().backward()"
    return f"{target} = {op(rng, names)}"


def program(seed: int) -> list[str]:
    """Program ``seed``'s lines."""
    rng = random.Random(seed)
    names = ["a", "b", "c"]
    lines = [make(rng, name) for name in names]
    for n in range(OPS_PER_PROGRAM):
        target = f"r{n}"
        lines.append(statement(rng, names, target))
        lines.append(f"print({target}.shape, {target}.dtype, {target}.requires_grad, {target}.is_leaf, "
                     f"type({target}.grad_fn).__name__)")
        lines.append(f"print({target}.stride(), {target}.storage_offset(), {target}.is_contiguous())")
        if rng.random() < 0.15:
            lines.append(f"print({rng.choice(names[:3])}.grad)")
        names.append(target)
    lines.append(f"print(float(r{OPS_PER_PROGRAM - 1}.double().sum()))")
    return lines


def run(torch, lines: list[str]) -> list[dict]:
    """Each line's outcome (``scenario_check.run``), torch's C++ backtrace cut from a message (machine paths)."""
    from tests.client import scenario_check

    outcomes = scenario_check.run(torch, lines)
    for o in outcomes:
        if o["raised"]:
            o["raised"][1] = o["raised"][1].split("\nException raised from ")[0]
    return outcomes
