"""Write the OpenAPI document: ``python -m gradserve_server.app.openapi_dump`` (regenerates openapi/openapi.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app

TARGET = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def render() -> str:
    # default settings, not the environment's: the document must not depend on who generates it
    return json.dumps(create_app(Settings()).openapi(), indent=2, sort_keys=False) + "\n"


def main() -> int:
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(render())
    print(f"wrote {TARGET}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
