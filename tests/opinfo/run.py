"""The OpInfo suite's driver: ``python3 dev.py opinfo [--samples N] [--reference N] [--op NAME ...]``.

For every ``op_db`` entry that ``mapping.CATALOG_OP`` maps to a catalog op: its float64 ``sample_inputs``
(and up to ``--reference`` ``reference_inputs``) through every phase of ``suite.Phases``, its float32 samples
forward, its ``error_inputs``, and one sample per op through ``POST /v1/eval``. Prints per-op and total
figures: ops covered, samples, mismatches by class (documented deviations and those pending on another
branch apart), error_inputs agreement and the samples the op list cannot express, by reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict

import torch

from .deviations import classify
from .mapping import CATALOG_OP, opinfo_name
from .suite import HALF, HALF_INEXACT, EngineTimeout, Mismatch, NotExpressible, Phases, error_input, seeded
from .transport import HttpEval


def op_infos(names=None) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    infos = [o for o in op_db if opinfo_name(o) in CATALOG_OP]
    if names:
        infos = [o for o in infos if opinfo_name(o) in names or o.name in names]
    return infos


def _samples(gen_fn, limit: int | None, failed=None):
    """The generator's samples, at most ``limit``; ``failed(reason)`` when torch's own generator raises
    (``reference_inputs`` of ``where`` asks make_tensor for a bool tensor requiring grad): counted, not hidden."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for i, s in enumerate(gen_fn()):
                if limit is not None and i >= limit:
                    return
                yield s
        except NotImplementedError:  # an OpInfo without reference_inputs / error_inputs
            return
        except Exception as exc:  # noqa: BLE001 - torch's sample generator failed: the rest is not run
            if failed is not None:
                failed(f"torch's sample generator raised {type(exc).__name__}")


class Stats:
    def __init__(self):
        self.samples = Counter()                 # op -> samples run
        self.not_expressible = defaultdict(Counter)  # reason -> op -> count
        self.mismatches: list[Mismatch] = []
        self.errors_total = Counter()
        self.errors_agree = Counter()
        self.http = Counter()
        self.ops_without_samples = []
        self.half = Counter()                    # float16/bfloat16 samples run

    def add(self, m: Mismatch):
        self.mismatches.append(m)

    def as_json(self) -> dict:
        return {"samples": dict(self.samples), "mismatches": [asdict(m) for m in self.mismatches],
                "not_expressible": {r: dict(c) for r, c in self.not_expressible.items()},
                "errors_total": dict(self.errors_total), "errors_agree": dict(self.errors_agree),
                "http": dict(self.http), "half": dict(self.half), "half_inexact": dict(HALF_INEXACT)}


def run_op(info, stats: Stats, samples: int | None, reference: int | None, http: HttpEval | None = None):
    name = opinfo_name(info)
    catalog = CATALOG_OP[name]
    dtypes = info.supported_dtypes("cpu")
    # float64 where the OpInfo tests it; an integer-only one (one_hot) in int64, without gradients
    dtype = next((d for d in (torch.float64, torch.int64, torch.bool) if d in dtypes), None)
    if dtype is None:
        stats.not_expressible[f"OpInfo of {'complex' if any(d.is_complex for d in dtypes) else 'other'} dtypes "
                              f"only"][name] += 1
    differentiable = info.supports_autograd and dtype == torch.float64
    kinds = [("sample", lambda: info.sample_inputs("cpu", dtype, requires_grad=differentiable), samples)]
    if reference:
        kinds.append(("reference", lambda: info.reference_inputs("cpu", dtype, requires_grad=differentiable),
                      reference))
    sent_http = False

    def failed(reason: str):
        stats.not_expressible[reason][name] += 1

    for kind, gen_fn, limit in kinds:
        if dtype is None:
            break
        for index, sample in enumerate(_samples(gen_fn, limit, failed)):
            def phases(sample=sample, kind=kind, index=index) -> list:
                nonlocal sent_http
                ph = Phases(info, catalog, sample, seeded(name, kind, index), differentiable)
                found = [("forward", *f) for f in ph.forward(check_grad_fn=differentiable)]
                if differentiable:
                    found += [("reverse", *f) for f in ph.reverse()]
                if differentiable and info.supports_gradgrad:
                    found += [("gradgrad", *f) for f in ph.gradgrad()]
                if differentiable and info.supports_forward_ad:
                    found += [("forward_ad", *f) for f in ph.forward_ad()]
                if http is not None and not sent_http and not found:
                    sent_http = True
                    d = http.check(ph)
                    stats.http[name] += 1
                    if d:
                        found.append(("http", "http", d))
                return found

            _record(stats, name, kind, index, _findings(stats, name, phases))
    # float32: forward values only
    if torch.float32 in info.supported_dtypes("cpu"):
        for index, sample in enumerate(_samples(lambda: info.sample_inputs("cpu", torch.float32), samples,
                                                failed)):
            try:
                ph = Phases(info, catalog, sample, seeded(name, "float32", index), False)
                found = ph.forward(check_grad_fn=False)
            except NotExpressible as exc:
                stats.not_expressible[exc.reason][name] += 1
                continue
            except EngineTimeout as exc:
                found = [("timeout", str(exc))]
            stats.samples[name] += 1
            for cls, detail in found[:1]:
                stats.add(Mismatch(name, "float32", index, "float32" if cls == "forward" else cls, detail))
    for half in HALF:
        run_half(info, stats, samples, half, failed)
    errors = (lambda: info.error_inputs("cpu")) if info.error_inputs_func is not None else (lambda: ())
    for index, ei in enumerate(_samples(errors, samples, failed)):
        try:
            agrees, e = error_input(info, catalog, ei)
        except NotExpressible as exc:
            stats.not_expressible[exc.reason][name] += 1
            continue
        except EngineTimeout as exc:
            agrees, e = False, ("timeout", str(exc))
        stats.errors_total[name] += 1
        if agrees:
            stats.errors_agree[name] += 1
        else:
            stats.add(Mismatch(name, "error", index, e[0], e[1]))
    if not stats.samples[name]:
        stats.ops_without_samples.append(name)


def _cast_sample(sample, dtype):
    """A float32 sample with its floating tensors cast to ``dtype`` (for an op torch refuses in that dtype)."""
    def cast(v):
        if isinstance(v, torch.Tensor):
            return v.detach().to(dtype) if v.dtype == torch.float32 else v
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            return type(v)(cast(x) for x in v) if not hasattr(v, "_fields") else type(v)(*(cast(x) for x in v))
        if isinstance(v, dict):
            return {k: cast(x) for k, x in v.items()}
        return v
    return sample.__class__(cast(sample.input), args=cast(tuple(sample.args)), kwargs=cast(dict(sample.kwargs)))


def run_half(info, stats: Stats, samples: int | None, dtype, failed) -> None:
    """float16/bfloat16: the OpInfo's samples of that dtype (forward values; gradients, in that dtype, where it
    supports autograd), or, where torch does not support the dtype on the CPU, float32 samples cast to it, whose
    refusal (torch's class and message) the engine must give."""
    name = opinfo_name(info)
    catalog = CATALOG_OP[name]
    label = str(dtype).removeprefix("torch.")
    supported = dtype in info.supported_dtypes("cpu")
    if supported:
        grad = info.supports_autograd and dtype in info.supported_backward_dtypes("cpu")
        gen = lambda: info.sample_inputs("cpu", dtype, requires_grad=grad)  # noqa: E731
    elif torch.float32 in info.supported_dtypes("cpu"):
        grad = False
        gen = lambda: (_cast_sample(s, dtype) for s in info.sample_inputs("cpu", torch.float32))  # noqa: E731
    else:
        return
    for index, sample in enumerate(_samples(gen, samples if supported else 1, failed)):
        def phases(sample=sample, index=index) -> list:
            ph = Phases(info, catalog, sample, seeded(name, label, index), grad)
            found = [("forward", *f) for f in ph.forward(check_grad_fn=grad)]
            if grad:
                found += [("reverse", *f) for f in ph.reverse()]
            return found

        if _record(stats, name, label, index, _findings(stats, name, phases), f"{label} "):
            stats.half[label] += 1


def _findings(stats: Stats, name: str, phases) -> list | None:
    """What ``phases()`` found on one sample: a timeout or the suite's own failure is a finding to read; None
    for a sample the program format cannot express (counted as such)."""
    try:
        return phases()
    except NotExpressible as exc:
        stats.not_expressible[exc.reason][name] += 1
        return None
    except EngineTimeout as exc:
        return [("timeout", "timeout", str(exc))]
    except Exception as exc:  # noqa: BLE001 - the suite's own failure on a sample: a mismatch to read
        return [("harness", "harness", f"{type(exc).__name__}: {exc}")]


def _record(stats: Stats, name: str, where: str, index: int, found: list | None, prefix: str = "") -> bool:
    """Count a checked sample and its mismatches, one per class; False for a sample not checked (None)."""
    if found is None:
        return False
    stats.samples[name] += 1
    seen = set()
    for _, cls, detail in found:
        if cls not in seen:
            seen.add(cls)
            stats.add(Mismatch(name, where, index, prefix + cls, detail))
    return True


def run(names=None, samples: int | None = None, reference: int | None = 10, http: bool = True,
        progress: bool = False) -> Stats:
    """Every mapped entry (or those ``names``); ``progress``: each entry's figures on stderr as it ends."""
    stats = Stats()
    transport = HttpEval() if http else None
    try:
        for info in op_infos(names):
            t0 = time.time()
            n = len(stats.mismatches)
            run_op(info, stats, samples, reference, transport)
            if progress:
                name = opinfo_name(info)
                print(json.dumps({"op": name, "samples": stats.samples[name], "seconds": round(time.time() - t0, 1),
                                  "errors": [stats.errors_agree[name], stats.errors_total[name]],
                                  "http": stats.http[name],
                                  "not_expressible": {r: c[name] for r, c in stats.not_expressible.items()
                                                      if c[name]},
                                  "mismatches": [asdict(m) for m in stats.mismatches[n:]]}),
                      file=sys.stderr, flush=True)
    finally:
        if transport is not None:
            transport.close()
    return stats


def report(stats: Stats, per_op: bool = True) -> str:
    groups = {"mismatch": [], "deviation": [], "pending": []}
    for m in stats.mismatches:
        groups[classify(m)[0]].append(m)
    ops = set(stats.samples) | set(stats.errors_total)
    catalog_ops = {CATALOG_OP[o] for o in ops}
    lines = []
    if per_op:
        lines += ["| op | samples | mismatches | deviations | pending | error_inputs |", "|---|---|---|---|---|---|"]
        by_op = {k: Counter(m.op for m in v) for k, v in groups.items()}
        for op in sorted(ops):
            e = f"{stats.errors_agree[op]}/{stats.errors_total[op]}" if stats.errors_total[op] else "-"
            lines.append(f"| {op} | {stats.samples[op]} | {by_op['mismatch'][op]} | {by_op['deviation'][op]} | "
                         f"{by_op['pending'][op]} | {e} |")
        lines.append("")
    total_e, agree_e = sum(stats.errors_total.values()), sum(stats.errors_agree.values())
    lines.append(f"ops covered: {len(ops)} OpInfo entries, {len(catalog_ops)} catalog ops; "
                 f"samples: {sum(stats.samples.values())}; over HTTP: {sum(stats.http.values())}")
    for k in ("mismatch", "deviation", "pending"):
        ms = groups[k]
        label = {"mismatch": "mismatches", "deviation": "documented deviations",
                 "pending": "pending on opfix"}[k]
        by_cls = Counter(m.cls for m in ms)
        lines.append(f"{label}: {len(ms)} in {len({m.op for m in ms})} ops "
                     f"({', '.join(f'{c} {n}' for c, n in by_cls.most_common()) or 'none'})")
    inexact = {o: n for o, n in HALF_INEXACT.items() if o in ops}
    worst = ", ".join(f"{o} {n}" for o, n in sorted(inexact.items(), key=lambda kv: -kv[1])[:8])
    lines.append(f"float16/bfloat16 samples: {stats.half['float16']}/{stats.half['bfloat16']}; comparisons within "
                 f"two units in the last place but not bit for bit: {sum(inexact.values())}"
                 f"{f' ({worst})' if worst else ''}")
    pct = 100.0 * agree_e / total_e if total_e else 100.0
    lines.append(f"error_inputs agreement: {agree_e} of {total_e} ({pct:.1f}%)")
    ne = sorted(stats.not_expressible.items(), key=lambda kv: -sum(kv[1].values()))
    lines.append(f"not expressible: {sum(sum(c.values()) for _, c in ne)} samples")
    for reason, c in ne:
        lines.append(f"  {reason}: {sum(c.values())} ({', '.join(f'{o} {n}' for o, n in c.most_common(6))}"
                     f"{', ...' if len(c) > 6 else ''})")
    if stats.ops_without_samples:
        lines.append(f"entries with no expressible sample: {', '.join(stats.ops_without_samples)}")
    if groups["mismatch"]:
        lines.append("")
        lines.append("mismatches (first of each op and class):")
        seen = set()
        for m in groups["mismatch"]:
            if (m.op, m.cls) in seen:
                continue
            seen.add((m.op, m.cls))
            lines.append(f"  {m.op} [{m.kind} {m.index}] {m.cls}: {m.detail[:400]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dev.py opinfo", description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=None, help="at most this many samples of each kind per op")
    ap.add_argument("--reference", type=int, default=10, help="reference_inputs per op (0: none)")
    ap.add_argument("--op", action="append", help="only this OpInfo entry (repeatable)")
    ap.add_argument("--no-http", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="totals only, no per-op table")
    ap.add_argument("--progress", action="store_true", help="each entry's figures (a JSON line) on stderr")
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args(argv)
    t0 = time.time()
    stats = run(a.op, a.samples, a.reference, not a.no_http, a.progress)
    print(report(stats, per_op=not a.quiet))
    print(f"time: {time.time() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(stats.as_json(), f, indent=1)
    return 1 if any(classify(m)[0] == "mismatch" for m in stats.mismatches) else 0


if __name__ == "__main__":
    sys.exit(main())
