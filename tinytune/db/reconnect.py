"""Riding out a database server that restarts or drops its connections.

A PostgreSQL server shared by a search may restart (maintenance, a failover) while the search
runs. Stale pooled connections are found at checkout by SQLAlchemy's ``pool_pre_ping``
(:func:`tinytune.db.engine.server_options`), but a statement that runs while the server is away
still fails, and neither SQLAlchemy nor Optuna retries it: Optuna 5 retries only the creation of
a trial, five times within seconds, and reports any other failed commit as "invalid data in the
commit". So tinytune retries each of its short transactions (and each call of Optuna's storage,
:mod:`tinytune.search.study.storage`) when the connection was lost or refused, with a backoff
bounded by :data:`RECONNECT_WAIT_S` in all per outage, shared by every caller of one
:class:`Reconnect`. Past the bound, every call fails at once with one
:class:`~tinytune.errors.DatabaseUnavailableError` that names the database and says that the same
command resumes; the next call that succeeds ends the outage. SQLite files do not restart.

A database that answers but refuses to store (a full disk, a read-only file or database, a
quota, an I/O error: :func:`refused_write`) is not waited for: the call fails with one
:class:`~tinytune.errors.DatabaseRefusedError` that names the database and the reason, and says
that the same command resumes once it is fixed, rather than Optuna's "invalid data in the
commit" and its traceback. Any other error passes through unchanged.

A transaction whose connection is lost rolled back unless its commit reached the server and only
the answer was lost; the callers whose retry would then repeat a write check for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from tinytune.db.engine import _first_line, _without_password, mask_url
from tinytune.errors import DatabaseRefusedError, DatabaseUnavailableError

__all__ = ["RECONNECT_WAIT_S", "Reconnect", "lost_connection", "refused_write"]

log = logging.getLogger(__name__)

T = TypeVar("T")

RECONNECT_WAIT_S = 60.0
"""How long, in all, a search waits for a database server that went away to answer again."""

FIRST_DELAY_S = 0.5
"""The first pause before a retry; each next one doubles, up to :data:`MAX_DELAY_S`."""

MAX_DELAY_S = 5.0

# SQLSTATE codes of a connection lost or refused: class 08 (connection exception), and a server
# shutting down (57P01 admin, 57P02 crash) or starting up (57P03)
_SHUTDOWN_CODES = frozenset({"57P01", "57P02", "57P03"})

# SQLite's result codes of a database that cannot store (sqlite3's ``sqlite_errorcode``, the
# primary code in the low byte): SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL
_SQLITE_REFUSED = frozenset({3, 8, 10, 13})
# SQLSTATEs of a server that cannot store: insufficient resources (class 53: disk full, out of
# memory, too many connections), system errors (class 58: I/O), a read-only transaction
_REFUSED_CLASSES = ("53", "58")
_READ_ONLY = "25006"


def lost_connection(error: BaseException) -> bool:
    """Whether ``error``, or the error it was raised from, is a database connection that was lost
    or refused (a server restarting or away), as opposed to a statement the server rejected.

    A DBAPI error that SQLAlchemy found to be a disconnect counts; so does an operational or
    interface error with a connection SQLSTATE or none (the driver's own: the connection failed
    or broke), and a session's pending rollback raised while that error was handled (Optuna
    retries a failed query in the same session). :class:`~tinytune.errors.
    DatabaseUnavailableError` (the wait already given up) does not.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, DatabaseUnavailableError):
            return False
        if isinstance(current, sa.exc.DBAPIError):
            if current.connection_invalidated:
                return True
            if not isinstance(current, (sa.exc.OperationalError, sa.exc.InterfaceError)):
                return False
            orig = current.orig
            code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
            return code is None or str(code).startswith("08") or code in _SHUTDOWN_CODES
        seen.add(id(current))
        if isinstance(current, sa.exc.PendingRollbackError):
            current = current.__cause__ or current.__context__  # what invalidated it
        else:
            current = current.__cause__
    return False


def refused_write(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, is a database that answered but cannot
    store: SQLite's full disk, read-only file, permission or I/O error; a server's full disk,
    quota, out of memory, I/O error or read-only transaction."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        orig = current.orig if isinstance(current, sa.exc.DBAPIError) else current
        code = getattr(orig, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _SQLITE_REFUSED:
            return True
        state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if state is not None and (str(state)[:2] in _REFUSED_CLASSES or state == _READ_ONLY):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class Reconnect:
    """Calls retried while the database server at ``url`` is away, up to ``wait_s`` in all.

    One instance is shared by everything that talks to one database (tinytune's store, Optuna's
    storage, the heartbeat thread): the wait is counted from the first failure of an outage,
    whichever call met it, so calls made while it lasts do not each wait the whole bound. Safe to
    use from several threads.

    Args:
        url: The database's URL (named, password masked, in the error past the bound).
        wait_s: The bound (default :data:`RECONNECT_WAIT_S`); 0 fails at the first lost
            connection. Ignored for SQLite.
        sleep: Waits this many seconds (injected in tests).
        clock: Monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        url: str,
        wait_s: float | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.wait_s = RECONNECT_WAIT_S if wait_s is None else wait_s
        self._server = sa.make_url(url).get_backend_name() != "sqlite"
        self._sleep, self._clock = sleep, clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the current outage began

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, called again after a pause each time it fails on a lost connection.

        ``fn`` must be safe to repeat after such a failure: a transaction that rolled back (or,
        where its commit may have gone through, one that checks for its own write).

        Raises:
            DatabaseUnavailableError: the server did not answer within the bound (at once when an
                earlier call of this outage waited it out already).
        """
        delay = FIRST_DELAY_S
        while True:
            try:
                result = fn()
            except DatabaseRefusedError:
                raise
            except Exception as e:
                if refused_write(e):
                    raise self._refused(e) from e
                if not self._server or not lost_connection(e):
                    raise
                now = self._clock()
                left = self._outage(now, e) + self.wait_s - now
                if left <= 0:
                    raise self._unavailable(e) from e
                self._sleep(min(delay, left))
                delay = min(2 * delay, MAX_DELAY_S)
            else:
                self._answered()
                return result

    def _outage(self, now: float, error: BaseException) -> float:
        """When the current outage began (now, for the first failure of one)."""
        with self._lock:
            first = self._since is None
            if first:
                self._since = now
            since = self._since
        if first and self.wait_s > 0:
            log.warning(
                "lost the connection to the database %s (%s); retrying for up to %g s",
                mask_url(self.url),
                self._reason(error),
                self.wait_s,
            )
        return since

    def _answered(self) -> None:
        with self._lock:
            if self._since is None:
                return
            since, self._since = self._since, None
        log.info(
            "the database %s answers again after %.1f s",
            mask_url(self.url),
            self._clock() - since,
        )

    def _reason(self, error: BaseException) -> str:
        """The driver's first line for the error at the root of ``error``."""
        root: BaseException = error
        while root.__cause__ is not None and not isinstance(root, sa.exc.DBAPIError):
            root = root.__cause__
        return _without_password(_first_line(root), self.url)

    def _refused(self, error: BaseException) -> DatabaseRefusedError:
        root: BaseException = error
        while root.__cause__ is not None and not isinstance(root, sa.exc.DBAPIError):
            root = root.__cause__
        if not isinstance(root, sa.exc.DBAPIError) and root.__context__ is not None:
            root = root.__context__
        return DatabaseRefusedError(
            f"the database {mask_url(self.url)!r} refused to store the search's results "
            f"({_without_password(_first_line(root), self.url)}); what it stored before is "
            "kept: make room or make it writable, then run the same command again to resume"
        )

    def _unavailable(self, error: BaseException) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            f"the database {mask_url(self.url)!r} did not answer for {self.wait_s:g} s "
            f"({self._reason(error)}); what it stored is kept: run the same command again to "
            "resume once the server is back"
        )
