#!/usr/bin/env python3
"""Developer entry point, standard library only.

    python3 dev.py serve [uvicorn args...]   create .venv, install pinned deps, serve on 127.0.0.1:8000 as the
                                             image does: python -m gradserve_server, the wheel's gradserve-server
                                             (--port N, --host H to change; --no-access-log: no JSON line per
                                             request either)
    python3 dev.py test [pytest args...]     create .venv, install .[test] and ./client pinned, run ruff and pytest
                                             on every CPU (pytest-xdist; -n 0: in one process), installing
                                             redis-server, graphviz and chromium first when missing, as root
    python3 dev.py docs [mkdocs build args...]
                                             build the documentation site into site/ (mkdocs, strict: a broken
                                             link fails); open site/index.html
    python3 dev.py build [build args...]     wheels and sdists of the server (gradserve-server) and the client
                                             (gradserve-client) in dist/ (each wheel built from its sdist, with
                                             `python -m build`; e.g. --no-isolation, --outdir DIR)
    python3 dev.py fuzz [--programs N] [--seed S] [--http K] [--json FILE]
                                             the differential fuzzer against torch (needs torch in .venv:
                                             .venv/bin/pip install torch==2.13.0); prints programs, steps,
                                             ops covered and mismatches by class
    python3 dev.py opinfo [--samples N] [--reference N] [--op NAME] [--quiet] [--json FILE]
                                             torch's OpInfo database (op_db) through the engine and HTTP (needs
                                             torch and expecttest in .venv): per-op and total figures
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
CONSTRAINTS = ROOT / "constraints.txt"
CLIENT = ROOT / "client"
VERSION = ROOT / "gradserve_server" / "_version.py"  # the one place the version is written
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")


def run(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], cwd=ROOT, check=True)


def ensure_env(extra: str | None) -> None:
    """Create .venv and install the project and its Python client (both editable) with pinned dependencies,
    once per change."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py may be started by an older python3
        sys.exit(f"gradserve needs Python 3.11 or newer, this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"creating {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    target = f".[{extra}]" if extra else "."
    digest = hashlib.sha256()
    # the version is in the installed metadata too: a new one reinstalls
    for path in (ROOT / "pyproject.toml", CLIENT / "pyproject.toml", CONSTRAINTS, VERSION):
        digest.update(path.read_bytes())
    digest.update(target.encode())
    stamp = VENV / f".installed-{extra or 'base'}"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    # the Python client (client/, the gradserve-client distribution) is installed beside the server
    run(PYTHON, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, "-e", target, "-e", "./client")
    stamp.write_text(digest.hexdigest())


#: where `serve` listens unless its arguments say otherwise (uvicorn's own --host and --port)
SERVE_DEFAULTS = {"--host": "127.0.0.1", "--port": "8000"}


def serve_command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command `serve` runs and the environment variables it adds: the server as its wheel's
    `gradserve-server` runs it (gradserve_server/__main__.py: uvicorn with the image's options), --host and
    --port replacing the defaults (so that each appears once), `--no-access-log` also turning off the app's
    JSON access lines (GRADSERVE_ACCESS_LOG=false), every other argument going to uvicorn as given."""
    given = {a.split("=", 1)[0] for a in args}
    env = {"GRADSERVE_ACCESS_LOG": "false"} if "--no-access-log" in args else {}
    defaults = [part for flag, value in SERVE_DEFAULTS.items() if flag not in given for part in (flag, value)]
    return [str(PYTHON), "-m", "gradserve_server", *defaults, *args], env


def serve(args: list[str]) -> int:
    ensure_env(None)
    cmd, env = serve_command(args)
    print("+", " ".join([*(f"{k}={v}" for k, v in env.items()), *cmd]), flush=True)
    os.chdir(ROOT)
    if os.name == "nt":
        return subprocess.call(cmd, env={**os.environ, **env})
    os.execve(cmd[0], cmd, {**os.environ, **env})
    return 0  # not reached


# Debian packages some tests use: the Redis store's tests run a real redis-server, the SVG graph test
# renders with Graphviz's dot, and the documentation tests drive Swagger UI in a headless Chromium through
# chromedriver (Selenium). Missing ones are installed when we can (root, apt-get); otherwise those tests
# skip, saying why.
SYSTEM_TOOLS = {"redis-server": "redis-server", "dot": "graphviz", "chromium": "chromium",
                "chromedriver": "chromium-driver"}


def ensure_system_tools() -> None:
    missing = {cmd: pkg for cmd, pkg in SYSTEM_TOOLS.items() if not shutil.which(cmd)}
    if not missing:
        return
    names = ", ".join(sorted(missing))
    can_install = shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0
    if not can_install:
        print(f"{names} not on PATH and cannot be installed here (needs root and apt-get): the tests that use "
              "them will be skipped", flush=True)
        return
    print(f"{names} not on PATH: installing Debian's {', '.join(sorted(set(missing.values())))}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *sorted(set(missing.values()))]):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env).returncode != 0:
            print(f"installing {names} failed: the tests that use them will be skipped", flush=True)
            return


def parallel(args: list[str]) -> list[str]:
    """pytest's arguments with one worker per CPU (pytest-xdist), each test file on one worker (its module's
    servers started once), unless they choose the workers themselves (`-n 0`: one process, as plain pytest)."""
    if any(a in ("-n", "--numprocesses") or a.startswith(("-n", "--numprocesses=", "--dist")) for a in args) \
            or "no:xdist" in args:
        return args
    return ["-n", str(max(1, os.cpu_count() or 1)), "--dist", "loadfile", *args]


def test(args: list[str]) -> int:
    ensure_env("test")
    ensure_system_tools()
    try:
        run(PYTHON, "-m", "ruff", "check", ".")
        run(PYTHON, "-m", "pytest", *parallel(args))
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    return 0


def docs(args: list[str]) -> int:
    ensure_env("test")  # mkdocs and its theme are in the test extra (the docs are built by a test too)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's banner about a successor, on every build
    code = subprocess.call([str(PYTHON), "-m", "mkdocs", "build", "--strict", *args], cwd=ROOT, env=env)
    if code == 0 and not args:
        print(f"open {ROOT / 'site' / 'index.html'} (the search box needs the folder served: "
              "python3 -m http.server -d site 8001)", flush=True)
    return code


def build(args: list[str]) -> int:
    """Both distributions' sdists and wheels (the `build` frontend comes with the test extra)."""
    ensure_env("test")
    if not any(a in ("--outdir", "-o") or a.startswith("--outdir=") for a in args):
        args = ["--outdir", str(ROOT / "dist"), *args]
    try:
        for project in (ROOT, CLIENT):
            run(PYTHON, "-m", "build", *args, project)
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    return 0


def fuzz(args: list[str]) -> int:
    ensure_env("test")
    if subprocess.call([str(PYTHON), "-c", "import torch"], cwd=ROOT, stderr=subprocess.DEVNULL):
        print("the fuzzer compares with torch: .venv/bin/pip install torch==2.13.0", file=sys.stderr)
        return 2
    return subprocess.call([str(PYTHON), "-W", "ignore", "-m", "tests.fuzz.run", *args], cwd=ROOT)


def opinfo(args: list[str]) -> int:
    ensure_env("test")
    if subprocess.call([str(PYTHON), "-c", "import torch, expecttest"], cwd=ROOT, stderr=subprocess.DEVNULL):
        print("the OpInfo suite reads torch's op_db: .venv/bin/pip install torch==2.13.0 expecttest", file=sys.stderr)
        return 2
    return subprocess.call([str(PYTHON), "-W", "ignore", "-m", "tests.opinfo.run", *args], cwd=ROOT)


def main(argv: list[str]) -> int:
    commands = {"serve": serve, "test": test, "docs": docs, "build": build, "fuzz": fuzz, "opinfo": opinfo}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
