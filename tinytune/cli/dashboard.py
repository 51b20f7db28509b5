"""``tinytune dashboard``: serve optuna-dashboard for a database on 127.0.0.1."""

from __future__ import annotations

from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["dashboard"]

HOST = "127.0.0.1"


def dashboard(
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8080,
) -> None:
    """Serve optuna-dashboard for the database, bound to 127.0.0.1 (its endpoints can write).

    A study's page is ``/dashboard/studies/<id>``; for a study with two or more objectives it
    opens on the Pareto front plot.
    """
    from tinytune.cli.common import console, quiet_logs, require_database
    from tinytune.db import open_store

    quiet_logs()
    require_database(storage)
    open_store(storage).close()  # checks the URL and tinytune's tables with a one-line error
    _require_free_port(port)
    import optuna_dashboard

    console.print(f"optuna-dashboard for {storage} on http://{HOST}:{port}/ (Ctrl-C stops)")
    optuna_dashboard.run_server(storage, host=HOST, port=port)


def _require_free_port(port: int) -> None:
    """Refuse, in one line, a port that is out of range or already taken on 127.0.0.1.

    The probe binds the way the server will (``SO_REUSEADDR``, as ``wsgiref`` sets it), so a port
    that only lingers in TIME_WAIT is not refused.
    """
    import socket

    from tinytune.errors import ConfigError

    if not 0 < port < 65536:
        raise ConfigError(f"--port must be between 1 and 65535, got {port}")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as e:
            raise ConfigError(
                f"cannot serve on {HOST}:{port}: {e.strerror or e}; choose another --port"
            ) from e
