"""Engine creation: URL checks, SQLite pragmas, timeouts, and one-line connection errors.

SQLite (the embedded default) gets WAL journaling, ``synchronous=NORMAL`` and enforced foreign
keys on every connection, plus a busy timeout; WAL with NORMAL roughly halves the cost of a
commit and lets readers (the dashboard) run beside the single writer. PostgreSQL gets a connect
timeout, so that an unreachable server fails in seconds rather than hanging, and pre-ping, so
that a long search survives a server restart between transactions (a restart during one is
retried: :mod:`tinytune.db.reconnect`).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from tinytune.errors import StorageError

__all__ = [
    "CONNECT_TIMEOUT_S",
    "SQLITE_BUSY_TIMEOUT_S",
    "create_engine",
    "database_exists",
    "holds_tinytune_tables",
    "mask_url",
    "parse_url",
    "require_existing",
    "server_options",
    "translate_error",
]

SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long a SQLite connection waits for another writer's lock before failing."""

CONNECT_TIMEOUT_S = 10
"""How long a PostgreSQL connection attempt may take (``connect_timeout`` in the URL wins)."""

_URL_EXAMPLES = "'sqlite:///path/to/tinytune.db' or 'postgresql+psycopg://user@host:5432/db'"
# user:password@ wherever it stands, a malformed URL's too (postgresql:/user:secret@host)
_PASSWORD = re.compile(r"([^\s:/@]+:)[^\s@/]*@")


def mask_url(url: str | URL) -> str:
    """Returns the URL as text with its password replaced by ``***``, even when unparsable."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):
        return _PASSWORD.sub(r"\1***@", url)


# what SQLAlchemy's SQLite driver reads from a URL's query; any other is SQLite's own URI
# argument (mode, cache, immutable, ...), passed on only with uri=true
_SQLITE_DRIVER_ARGUMENTS = frozenset(
    {"timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements", "uri"}
)


def parse_url(url: str) -> URL:
    """Parses a database URL.

    Raises:
        StorageError: SQLAlchemy cannot parse it, or it gives SQLite arguments that its driver
            would ignore (SQLite's own, without ``uri=true``).
    """
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError, TypeError) as e:
        text = str(url)
        if text.strip() and ":" not in text and "@" not in text:  # a file's path, it seems
            raise StorageError(
                f"cannot parse database URL {text!r}; for a SQLite file write 'sqlite:///{text}'"
            ) from e
        raise StorageError(
            f"cannot parse database URL {mask_url(text)!r}; expected a URL such as {_URL_EXAMPLES}"
        ) from e
    ignored = sorted(set(parsed.query) - _SQLITE_DRIVER_ARGUMENTS)
    uri = str(parsed.query.get("uri", "")).lower() == "true"
    if parsed.get_backend_name() == "sqlite" and ignored and not uri:
        # the driver would ignore them with a warning: a read-only ?mode=ro would not be
        what = (
            "is a SQLite argument that takes"
            if len(ignored) == 1
            else "are SQLite arguments that take"
        )
        raise StorageError(
            f"database URL {mask_url(parsed)!r}: {', '.join(ignored)} {what} effect only with "
            "uri=true in the URL (e.g. 'sqlite:///file.db?mode=ro&uri=true')"
        )
    return parsed


def create_engine(url: str, *, pragmas: bool = True) -> Engine:
    """Creates an engine for ``url`` with tinytune's connection settings; connects to nothing.
    ``pragmas=False`` leaves out the SQLite pragmas (WAL changes the file): for reading another
    program's database.

    Raises:
        StorageError: the URL cannot be parsed, names an unknown database or missing driver, or
            points at a SQLite file in a directory that does not exist.
    """
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = server_options(parsed)
    if backend == "sqlite":
        _check_sqlite_directory(parsed)
        if "timeout" not in parsed.query:
            kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (sa.exc.ArgumentError, ImportError) as e:
        raise StorageError(
            f"cannot use database URL {mask_url(parsed)!r}: "
            f"{_without_password(_first_line(e), parsed)}; expected a "
            f"SQLite or PostgreSQL URL whose driver is installed, such as {_URL_EXAMPLES}"
        ) from e
    if backend == "sqlite" and pragmas:
        sa.event.listen(engine, "connect", _set_sqlite_pragmas)
    return engine


def server_options(url: str | URL) -> dict[str, Any]:
    """The keyword arguments of :func:`sqlalchemy.create_engine` that tinytune gives a database
    server (none for SQLite): pre-ping, so that a connection that a restart broke is replaced at
    checkout, and for PostgreSQL a connect timeout. Optuna's storage gets them too.

    Raises:
        StorageError: the URL cannot be parsed.
    """
    parsed = url if isinstance(url, URL) else parse_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return {}
    options: dict[str, Any] = {"pool_pre_ping": True}
    if backend == "postgresql" and "connect_timeout" not in parsed.query:
        options["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    return options


def translate_error(action: str, url: str | URL, error: BaseException) -> StorageError:
    """Turns a foreign database error into a one-line :class:`StorageError`.

    The message reads ``"{action} {masked url}: {reason}; expected ..."``; raise the result
    ``from error``.
    """
    backend = _backend_name(url)
    if backend == "sqlite":
        expected = "expected a readable and writable SQLite database file"
    elif backend == "postgresql":
        expected = "expected a PostgreSQL server that accepts connections at that address"
    else:
        expected = "expected a reachable database at that address"
    reason = _without_password(_first_line(error), url)
    return StorageError(f"{action} {mask_url(url)!r}: {reason}; {expected}")


def _set_sqlite_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _check_sqlite_directory(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    directory = Path(database).parent
    if not directory.is_dir():
        raise StorageError(
            f"cannot open database {mask_url(url)!r}: directory {str(directory)!r} does not "
            "exist; expected the SQLite file to lie in an existing directory"
        )


def _backend_name(url: str | URL) -> str:
    if isinstance(url, URL):
        return url.get_backend_name()
    try:
        return sa.make_url(url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError):
        return ""


def _without_password(text: str, url: str | URL) -> str:
    """``text`` (a foreign error's message) with the URL's password, and any URL in it, masked."""
    try:
        password = (url if isinstance(url, URL) else sa.make_url(url)).password
    except (sa.exc.ArgumentError, ValueError):
        password = None
    if password:
        for form in {str(password), quote(str(password), safe=""), quote_plus(str(password))}:
            text = text.replace(form, "***")
    return _PASSWORD.sub(r"\1***@", text)


def _first_line(error: BaseException) -> str:
    """The first line of the driver's own message, without SQLAlchemy's statement and links."""
    inner = getattr(error, "orig", None)
    text = str(inner if inner is not None else error).strip()
    line = text.splitlines()[0].strip() if text else ""
    return line or type(error).__name__


def database_exists(url: str) -> bool:
    """False only for a SQLite file that does not exist yet (opening it would create it); a
    server's database, or SQLite in memory, counts as existing.

    Raises:
        StorageError: the URL is malformed.
    """
    parsed = parse_url(url)  # a one-line error with the password masked
    on_disk = parsed.get_backend_name() == "sqlite" and parsed.database not in (
        None,
        "",
        ":memory:",
    )
    return not on_disk or Path(parsed.database).is_file()


def require_existing(url: str) -> None:
    """Reading must not create an empty SQLite file where none exists.

    Raises:
        StorageError: the URL is malformed, or names a SQLite file that does not exist.
    """
    if not database_exists(url):
        path = parse_url(url).database
        if path is not None and Path(path).is_dir():
            raise StorageError(f"database file {path!r} is a folder; name the SQLite file in it")
        raise StorageError(f"database file {path!r} does not exist")


def require_tinytune(url: str) -> None:
    """Reading a study must not change a database that is not tinytune's: one without
    tinytune's tables (another program's SQLite file, an empty database) is refused before it
    is opened, since opening would add them.

    Raises:
        StorageError: as :func:`require_existing`, or the database holds none of tinytune's
            tables.
    """
    require_existing(url)
    if not holds_tinytune_tables(url):
        raise StorageError(
            f"the database {mask_url(url)!r} holds no tinytune study (none of its tables); make "
            "one with 'tinytune search' first"
        )


def holds_tinytune_tables(url: str) -> bool:
    """Whether the database at ``url`` holds tinytune's tables (its schema's version table),
    read without creating or changing anything; False for a SQLite file that does not exist.

    Raises:
        StorageError: the URL is malformed, names a folder, or the database cannot be read.
    """
    from tinytune.db.models import VERSION_TABLE

    if not database_exists(url):
        if Path(parse_url(url).database or "").is_dir():
            require_existing(url)  # its one line: a folder, name the file in it
        return False
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        import sqlite3
        from urllib.parse import quote

        # read-only, and without the pragmas of tinytune's engine (WAL would change the file)
        uri = f"file:{quote(str(Path(parsed.database).absolute()))}?mode=ro"
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
                rows = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (VERSION_TABLE,),
                ).fetchall()
        except sqlite3.Error as e:
            raise translate_error("cannot read database", url, e) from e
        return bool(rows)
    engine = create_engine(url)
    try:
        return VERSION_TABLE in sa.inspect(engine).get_table_names()
    except sa.exc.SQLAlchemyError as e:
        raise translate_error("cannot read database", url, e) from e
    finally:
        engine.dispose()
