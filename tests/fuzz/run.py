"""The fuzzer's driver: ``python3 dev.py fuzz --programs 10000 [--seed N] [--http 50] [--save FILE]``.

Generates programs from consecutive seeds, replays each in the engine (and a sample over HTTP), and
prints figures: programs, steps, ops covered, mismatches by class and area (``autograd``: autograd state,
views and in-place; ``ops``: an op's values, argument checking and messages), with the smallest failing
program of each class, minimised.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from .generator import catalog_ops, generate, inplace_ops
from .harness import HTTP_RIG, EngineRunner, HttpRunner, replay
from .torch_exec import TorchRunner


def outcomes(program: list[dict]) -> list[dict]:
    """Torch's outcome of each step of a fixed program (up to its first error)."""
    r = TorchRunner()
    out = []
    for op in program:
        out.append(r.step(op))
        if out[-1]["error"] is not None:
            break
    return out


def first_class(program: list[dict]) -> str | None:
    expected = outcomes(program)
    _, bad = replay(program[:len(expected)], expected, EngineRunner())
    return bad[0]["class"] if bad else None


def minimise(program: list[dict], cls: str) -> list[dict]:
    """Greedy step removal while the first mismatch keeps its class."""
    prog = list(program)
    changed = True
    while changed:
        changed = False
        for i in range(len(prog) - 1, -1, -1):
            cand = prog[:i] + prog[i + 1:]
            if cand and first_class(cand) == cls:
                prog = cand
                changed = True
    return prog


def fuzz(programs: int, seed: int = 0, http: int = 0, minimise_each: bool = True, verbose: bool = False) -> dict:
    stats = {"programs": 0, "steps": 0, "ops": Counter(), "mismatches": Counter(), "areas": {},
             "examples": {}, "http_programs": 0, "errors_compared": 0}
    client = None
    if http:
        from fastapi.testclient import TestClient

        from gradserve_server.app.config import Settings
        from gradserve_server.app.main import create_app
        client = TestClient(create_app(Settings(access_log=False, log_level="WARNING", **HTTP_RIG)))
    t0 = time.time()
    for s in range(seed, seed + programs):
        program, expected = generate(s)
        stats["programs"] += 1
        stats["steps"] += len(program)
        for op, out in zip(program, expected):
            if out["error"] is None:
                stats["ops"][op["op"]] += 1
            else:
                stats["errors_compared"] += 1
        runners = [("engine", EngineRunner())]
        if client is not None and stats["http_programs"] < http:
            runners.append(("http", HttpRunner(client)))
            stats["http_programs"] += 1
        for kind, runner in runners:
            _, bad = replay(program, expected, runner)
            if not bad:
                continue
            first = bad[0]
            cls = first["class"] + (" (http)" if kind == "http" else "")
            stats["mismatches"][cls] += 1
            stats["areas"][cls] = first["area"]
            ex = stats["examples"].get(cls)
            if ex is None or len(program) < len(ex["program"]):
                stats["examples"][cls] = {"seed": s, "program": program[:first["step"] + 1],
                                          "detail": first["detail"]}
            if verbose:
                print(f"seed {s}: {cls}: {first['detail'][:200]}", flush=True)
    stats["seconds"] = round(time.time() - t0, 1)
    if minimise_each:
        for cls, ex in stats["examples"].items():
            if not cls.endswith("(http)"):
                ex["program"] = minimise(ex["program"], cls)
    return stats


def report(stats: dict) -> str:
    covered = set(stats["ops"])
    catalog = set(catalog_ops()) | set(inplace_ops())
    lines = [f"programs: {stats['programs']} (over HTTP: {stats['http_programs']})   steps: {stats['steps']}   "
             f"steps ending in a torch error: {stats['errors_compared']}   time: {stats['seconds']} s",
             f"ops covered: {len(covered & catalog)} of {len(catalog)} catalog ops "
             f"(+ {len(covered - catalog)} actions/creation); never run: {sorted(catalog - covered)}",
             f"programs with a mismatch: {sum(stats['mismatches'].values())}", "", "| area | class | programs |",
             "|---|---|---|"]
    for cls, n in sorted(stats["mismatches"].items(), key=lambda kv: (stats["areas"][kv[0]], -kv[1])):
        lines.append(f"| {stats['areas'][cls]} | {cls} | {n} |")
    lines.append("")
    for cls, ex in stats["examples"].items():
        lines.append(f"## {cls} (seed {ex['seed']}): {ex['detail'][:300]}")
        lines.append(json.dumps(ex["program"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dev.py fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--http", type=int, default=20, help="how many of the programs also run over HTTP")
    ap.add_argument("--no-minimise", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--json", help="write the figures and examples to this file")
    a = ap.parse_args(argv)
    stats = fuzz(a.programs, a.seed, a.http, not a.no_minimise, a.verbose)
    print(report(stats))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**stats, "ops": dict(stats["ops"]), "mismatches": dict(stats["mismatches"])}, f, indent=1)
    return 1 if stats["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
