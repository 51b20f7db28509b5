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
    from tinytune.cli.common import console, quiet_logs
    from tinytune.db import require_existing
    from tinytune.db.engine import mask_url

    quiet_logs()
    require_existing(storage)
    _require_study(storage)
    _require_free_port(port)
    import optuna
    import optuna_dashboard
    import sqlalchemy as sa

    from tinytune.db.engine import translate_error

    console.print(
        f"optuna-dashboard for {mask_url(storage)} on http://{HOST}:{port}/ (Ctrl-C stops)"
    )
    try:
        optuna_dashboard.run_server(storage, host=HOST, port=port)
    except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        raise translate_error("cannot serve the studies of", storage, e) from e


def _require_study(storage: str) -> None:
    """Refuse, in one line, a database without an Optuna study: optuna-dashboard opens Optuna's
    tables without creating them and fails with a traceback where they are missing."""
    import sqlalchemy as sa

    from tinytune.db.engine import create_engine, mask_url, translate_error
    from tinytune.errors import StorageError

    engine = create_engine(storage, pragmas=False)  # WAL would change another program's file
    try:
        with engine.connect() as connection:
            tables = sa.inspect(connection)
            n_studies = (
                connection.execute(sa.text("SELECT COUNT(*) FROM studies")).scalar_one()
                if tables.has_table("studies") and tables.has_table("version_info")
                else 0
            )
    except sa.exc.SQLAlchemyError as e:
        raise translate_error("cannot read the studies of", storage, e) from e
    finally:
        engine.dispose()
    if not n_studies:
        raise StorageError(
            f"no study in {mask_url(storage)!r}; expected a database that 'tinytune search "
            "--storage URL' has written to"
        )


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
