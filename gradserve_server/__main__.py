"""``gradserve-server`` (or ``python -m gradserve_server``): uvicorn serving ``gradserve_server.app.main:app``
as the Docker image does.

Every argument is uvicorn's (``--port``, ``--workers``, ``--host``, ...). Defaults where none is given: host
127.0.0.1; no ``server`` header (``--no-server-header``); malformed HTTP answered as problem+json
(``--http gradserve_server.app.protocol:HTTPProtocol``). The app writes its own JSON access log (uvicorn's
plain one stays off): ``--no-access-log`` turns that one off (``GRADSERVE_ACCESS_LOG=false``). The other
settings come from ``GRADSERVE_*`` environment variables, as with any other way of starting the app.
"""

from __future__ import annotations

import os
import sys

APP = "gradserve_server.app.main:app"
HTTP_PROTOCOL = "gradserve_server.app.protocol:HTTPProtocol"


def _given(args: list[str], *options: str) -> bool:
    return any(a == o or a.startswith(f"{o}=") for a in args for o in options)


def uvicorn_args(argv: list[str], env: dict[str, str]) -> list[str]:
    """uvicorn's command line for ``argv``; ``env`` gets the app settings that an option stands for."""
    args = list(argv)
    if "--no-access-log" in args:
        env["GRADSERVE_ACCESS_LOG"] = "false"
    else:
        args.append("--no-access-log")  # uvicorn's own line would repeat the app's
    if not _given(args, "--host", "--uds", "--fd"):
        args = ["--host", "127.0.0.1", *args]
    if not _given(args, "--server-header", "--no-server-header"):
        args.append("--no-server-header")
    if not _given(args, "--http"):
        args += ["--http", HTTP_PROTOCOL]
    return [APP, *args]


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = uvicorn_args(sys.argv[1:] if argv is None else argv, os.environ)
    print("gradserve-server: uvicorn", " ".join(args), file=sys.stderr, flush=True)
    uvicorn.main.main(args=args, prog_name="gradserve-server")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
