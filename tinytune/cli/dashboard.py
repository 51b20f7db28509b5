"""``tinytune dashboard``: serve optuna-dashboard for a database on 127.0.0.1."""

from __future__ import annotations

from typing import Annotated

import typer

from tinytune.cli.common import DEFAULT_STORAGE

__all__ = ["dashboard"]


def dashboard(
    storage: Annotated[
        str, typer.Option(help="SQLAlchemy URL of the database.")
    ] = DEFAULT_STORAGE,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8080,
) -> None:
    """Serve optuna-dashboard for the database, bound to 127.0.0.1 (its endpoints can write)."""
    from tinytune.cli.common import console, quiet_logs, require_database
    from tinytune.db import open_store

    quiet_logs()
    require_database(storage)
    open_store(storage).close()  # checks the URL and tinytune's tables with a one-line error
    import optuna_dashboard

    console.print(f"optuna-dashboard for {storage} on http://127.0.0.1:{port}/ (Ctrl-C stops)")
    optuna_dashboard.run_server(storage, host="127.0.0.1", port=port)
