"""``gradserve-server`` (or ``python -m gradserve_server``): uvicorn serving ``gradserve_server.app.main:app``.

Every argument is uvicorn's (``--port``, ``--workers``, ``--host``, ...); the host defaults to 127.0.0.1.
The settings come from ``GRADSERVE_*`` environment variables, as with any other way of starting the app.
"""

from __future__ import annotations

import sys

APP = "gradserve_server.app.main:app"


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--host" or a.startswith("--host=") for a in args):
        args = ["--host", "127.0.0.1", *args]
    uvicorn.main.main(args=[APP, *args], prog_name="gradserve-server")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
