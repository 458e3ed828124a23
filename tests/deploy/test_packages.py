"""The two distributions as a user installs them: `python3 dev.py build` writes both sdists and wheels; the
server's wheel goes into one fresh virtual environment and serves (its `gradserve-server` command), the
client's wheel into another, without the server's packages, and works against it.

The installs are real pip installs of the wheels and their pinned dependencies (from the package index, or
pip's cache), the two environments installed side by side to keep the test short.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from tests.deploy.servers import ROOT, Uvicorn, free_port

VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "gradserve_server" / "_version.py").read_text())[1]
VENV_PYTHON = Path("bin") / "python"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the .venv's setuptools (test extra) instead of a fresh one from the index per build
    result = subprocess.run([sys.executable, str(ROOT / "dev.py"), "build", "--no-isolation", "--outdir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_build_writes_both_sdists_and_wheels_with_complete_metadata(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert names == sorted([f"gradserve_client-{VERSION}-py3-none-any.whl", f"gradserve_client-{VERSION}.tar.gz",
                            f"gradserve_server-{VERSION}-py3-none-any.whl", f"gradserve_server-{VERSION}.tar.gz"])
    for project, package in (("gradserve_server", "gradserve_server"), ("gradserve_client", "gradserve")):
        wheel = zipfile.ZipFile(dist / f"{project}-{VERSION}-py3-none-any.whl")
        files = wheel.namelist()
        meta = wheel.read(f"{project}-{VERSION}.dist-info/METADATA").decode()
        headers = [line.split(": ", 1) for line in meta.split("\n\n", 1)[0].splitlines() if ": " in line]
        fields: dict[str, list[str]] = {}
        for key, value in headers:
            fields.setdefault(key, []).append(value)
        assert fields["Version"] == [VERSION]
        assert fields["License-Expression"] == ["MIT"] and f"{project}-{VERSION}.dist-info/licenses/LICENSE" in files
        assert fields["Summary"][0] and fields["Keywords"][0]
        assert fields["Description-Content-Type"] == ["text/markdown"] and len(meta.split("\n\n", 1)[1]) > 500
        assert "Typing :: Typed" in fields["Classifier"] and "Programming Language :: Python :: 3.11" in fields[
            "Classifier"]
        # one top-level import package each, under a name that cannot collide with the other's
        tops = {f.split("/")[0] for f in files if not f.split("/")[0].endswith(".dist-info")}
        assert tops == {package}
        # the version file is the linked one, as a real file in the wheel and the sdist
        assert f'__version__ = "{VERSION}"' in wheel.read(f"{package}/_version.py").decode()
        with tarfile.open(dist / f"{project}-{VERSION}.tar.gz") as sdist:
            member = sdist.getmember(f"{project}-{VERSION}/{package}/_version.py")
            assert member.isfile() and f'"{VERSION}"' in sdist.extractfile(member).read().decode()
            assert sdist.getmember(f"{project}-{VERSION}/LICENSE").isfile()
    client = zipfile.ZipFile(dist / f"gradserve_client-{VERSION}-py3-none-any.whl")
    assert "gradserve/py.typed" in client.namelist()
    # the formatter linked from the engine, as a real file
    formatter = (ROOT / "gradserve_server" / "engine" / "printing.py").read_bytes()
    assert client.read("gradserve/torch/_printing.py") == formatter
    with tarfile.open(dist / f"gradserve_client-{VERSION}.tar.gz") as sdist:
        member = sdist.getmember(f"gradserve_client-{VERSION}/gradserve/torch/_printing.py")
        assert member.isfile() and sdist.extractfile(member).read() == formatter
    client_meta = client.read(f"gradserve_client-{VERSION}.dist-info/METADATA").decode()
    assert "Requires-Dist: fastapi" not in client_meta and "gradserve-server" not in re.findall(
        r"Requires-Dist: (\S+)", client_meta)
    server = zipfile.ZipFile(dist / f"gradserve_server-{VERSION}-py3-none-any.whl")
    assert "gradserve_server/app/static/swagger-ui-bundle.js" in server.namelist()
    assert "gradserve-server = gradserve_server.__main__:main" in server.read(
        f"gradserve_server-{VERSION}.dist-info/entry_points.txt").decode()


def fresh_env(path: Path) -> Path:
    venv.create(path, with_pip=False)  # pip comes from the test's environment (pip --python)
    return path / VENV_PYTHON


def pip_install(python: Path, wheel: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile",
                             "--disable-pip-version-check", "-c", str(ROOT / "constraints.txt"), str(wheel)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


CLIENT_SCRIPT = textwrap.dedent("""
    import importlib.metadata, importlib.util, json, pathlib, sys
    import gradserve, gradserve.torch as torch
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    x.pow(2).sum().backward()
    ops = gradserve.Client(sys.argv[1]).ops_catalog()
    print(json.dumps({
        "file": gradserve.__file__, "version": gradserve.__version__,
        "dist_version": importlib.metadata.version("gradserve-client"),
        "py_typed": (pathlib.Path(gradserve.__file__).parent / "py.typed").is_file(),
        "absent": [m for m in ("gradserve_server", "fastapi", "uvicorn", "pydantic")
                   if importlib.util.find_spec(m) is None],
        "grad": x.grad.tolist(), "grad_fn": x.pow(2).grad_fn.name(), "ops": len(ops),
    }))
""")


def test_the_server_wheel_serves_and_the_client_wheel_alone_works_against_it(dist, tmp_path):
    server_python = fresh_env(tmp_path / "server-env")
    client_python = fresh_env(tmp_path / "client-env")
    installs = [pip_install(server_python, dist / f"gradserve_server-{VERSION}-py3-none-any.whl"),
                pip_install(client_python, dist / f"gradserve_client-{VERSION}-py3-none-any.whl")]
    for install in installs:
        output = install.communicate(timeout=300)[0]
        assert install.returncode == 0, output[-3000:]

    # the server from its wheel: its console script, run outside the repository
    port = free_port()
    server = Uvicorn([str(tmp_path / "server-env" / "bin" / "gradserve-server"), "--port", str(port)], {}, port,
                     tmp_path / "server.log", cwd=tmp_path)
    server.start()
    try:
        where = subprocess.run([str(server_python), "-c", "import gradserve_server, importlib.metadata as m; "
                                "print(gradserve_server.__file__, m.version('gradserve-server'))"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True).stdout.split()
        assert Path(where[0]).is_relative_to(tmp_path / "server-env") and where[1] == VERSION
        import httpx

        answer = httpx.get(f"{server.url}/openapi.json", timeout=10)
        assert answer.json()["info"]["version"] == VERSION
        assert "server" not in answer.headers  # as in the image: no server header
        # the docs' files come with the wheel
        docs = httpx.get(f"{server.url}/docs", timeout=10).text
        for asset in ("swagger-ui-bundle.js", "svg-picture.js"):
            assert f"/static/{asset}" in docs
            assert httpx.get(f"{server.url}/static/{asset}", timeout=10).status_code == 200

        # the client alone, from its wheel, in an environment without the server's packages
        result = subprocess.run([str(client_python), "-c", CLIENT_SCRIPT, server.url], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120,
                                env={"GRADSERVE_URL": server.url, "PATH": "/usr/bin:/bin"})
        assert result.returncode == 0, result.stderr[-3000:]
        report = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        server.stop()
    # the app's JSON access log, once per request (uvicorn's own plain line stays off)
    # (the whole log: ``server.log()`` is its tail, which the client's requests push the first request out of)
    log = server.log_path.read_text(errors="replace")
    access = [line for line in log.splitlines() if '"logger":"gradserve.access"' in line]
    assert any('"path":"/openapi.json"' in line for line in access), log[-4000:]
    assert '"GET /openapi.json HTTP/1.1" 200' not in log
    assert Path(report["file"]).is_relative_to(tmp_path / "client-env")
    assert report["version"] == report["dist_version"] == VERSION
    assert report["py_typed"]
    assert report["absent"] == ["gradserve_server", "fastapi", "uvicorn", "pydantic"]
    assert report["grad"] == [4.0, 6.0] and report["grad_fn"] == "PowBackward0"
    assert report["ops"] > 100


def test_the_server_command_line_defaults_and_options_each_given_once():
    import importlib.util

    from gradserve_server.__main__ import APP, HTTP_PROTOCOL, uvicorn_args

    env: dict[str, str] = {}
    assert uvicorn_args(["--port", "9000"], env) == [APP, "--host", "127.0.0.1", "--port", "9000", "--no-access-log",
                                                      "--no-server-header", "--http", HTTP_PROTOCOL]
    assert env == {}
    args = uvicorn_args(["--host=0.0.0.0", "--no-access-log", "--server-header", "--http", "h11"], env)
    assert args == [APP, "--host=0.0.0.0", "--no-access-log", "--server-header", "--http", "h11"]
    assert env == {"GRADSERVE_ACCESS_LOG": "false"}
    # dev.py serve runs the same command, with the arguments as given (`--port N` once)
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    cmd, env = dev.serve_command(["--port", "9000"])
    assert cmd[1:] == ["-m", "gradserve_server", "--host", "127.0.0.1", "--port", "9000"] and env == {}


def test_no_access_log_means_no_access_lines_and_no_server_header(tmp_path):
    import httpx

    port = free_port()
    server = Uvicorn([sys.executable, "-m", "gradserve_server", "--port", str(port), "--no-access-log"], {}, port,
                     tmp_path / "server.log", cwd=tmp_path).start()
    try:
        answer = httpx.get(f"{server.url}/v1/ops", params={"q": "svd", "limit": 1}, timeout=10)
        assert answer.status_code == 200 and "server" not in answer.headers
        assert httpx.get(f"{server.url}/nothing", timeout=10).status_code == 404
    finally:
        server.stop()
    log = server.log()
    assert "gradserve.access" not in log and "/v1/ops" not in log and "/nothing" not in log, log


def test_the_version_is_written_once_and_everything_reads_it():
    import tomllib

    import gradserve
    from gradserve_server._version import __version__

    link = ROOT / "client" / "gradserve" / "_version.py"
    assert link.is_symlink() and link.resolve() == (ROOT / "gradserve_server" / "_version.py").resolve()
    assert gradserve.__version__ == __version__ == VERSION
    for project, attr in ((ROOT, "gradserve_server._version.__version__"),
                          (ROOT / "client", "gradserve._version.__version__")):
        meta = tomllib.loads((project / "pyproject.toml").read_text())
        assert "version" not in meta["project"] and meta["project"]["dynamic"] == ["version"]
        assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": attr}
    spec = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    assert spec["info"] == {**spec["info"], "title": "gradserve API", "version": VERSION}
    # no other file of the repository writes the version down
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    literal = re.compile(rf'(version|__version__)\s*[=:]\s*"{re.escape(VERSION)}"')
    writers = [path for path in tracked.split()
               if path.endswith((".py", ".toml", ".cfg")) and not (ROOT / path).is_symlink()
               and literal.search((ROOT / path).read_text(errors="replace"))]
    assert writers == ["gradserve_server/_version.py"]


def test_torchs_argument_parser_is_one_file_the_client_links_and_imports_nothing_of_the_server():
    link = ROOT / "client" / "gradserve" / "torch" / "_torch_args.py"
    target = ROOT / "gradserve_server" / "engine" / "torch_args.py"
    assert link.is_symlink() and link.resolve() == target.resolve()
    imports = re.findall(r"^\s*(?:from|import) ([\w.]+)", target.read_text(), re.M)
    assert set(imports) <= {"__future__", "functools", "numbers", "dataclasses", "numpy"}, imports
