"""What optuna-dashboard serves for a study, read through its WSGI app (no server)."""

from __future__ import annotations

import json
import wsgiref.util
from typing import Any


def dashboard_api(url: str, path: str) -> dict[str, Any]:
    """GET a JSON endpoint of optuna-dashboard's WSGI app for the database at ``url``."""
    import optuna_dashboard

    app = optuna_dashboard.wsgi(url)
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    wsgiref.util.setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _h, *_: status.append(s)))
    assert status[0].startswith("200"), status
    return json.loads(body)
