"""What every part of the store shares: its engine, one short transaction per call, a call run
again while a database server is away (:mod:`tinytune.db.reconnect`), and the write of an
evaluation that both the evaluations and the claims protocol make.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Concatenate, ParamSpec, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from tinytune.db.engine import mask_url, translate_error
from tinytune.db.models import CandidateRow, EvaluationRow
from tinytune.db.reconnect import Reconnect
from tinytune.db.records import EvaluationRecord, _now
from tinytune.errors import StorageError

__all__ = ["StoreBase", "retried"]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_S = TypeVar("_S", bound="StoreBase")


def retried(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """The method, run again while the database server is away (see :class:`Reconnect`)."""

    @functools.wraps(method)
    def again(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.reconnect.call(lambda: method(self, *args, **kwargs))

    return again


class StoreBase:
    """The engine and transactions of a :class:`~tinytune.db.store.Store` (see there).

    Attributes:
        url: The URL the store was opened with (``repr`` masks its password).
        reconnect: Retries while the database server is away; share it with other clients of
            the same database (Optuna's storage) so that one outage is waited out once.
    """

    def __init__(self, engine: Engine, url: str, *, reconnect_wait_s: float | None = None) -> None:
        self.url = url
        self.reconnect = Reconnect(url, reconnect_wait_s)
        self._engine = engine
        self._closed = False

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"Store({mask_url(self.url)!r}{state})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Releases the store's connections; further calls raise :class:`StorageError`."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    @contextmanager
    def _transaction(self, action: str) -> Iterator[Session]:
        """A session inside one transaction; foreign errors leave as :class:`StorageError`."""
        if self._closed:
            raise StorageError(
                f"cannot {action} the store of {mask_url(self.url)!r}: it is closed; "
                "expected an open store (see open_store)"
            )
        try:
            with Session(self._engine) as s, s.begin():
                yield s
        except sa.exc.SQLAlchemyError as e:
            raise translate_error(f"cannot {action} database", self.url, e) from e

    def _insert_evaluation(self, s: Session, rec: EvaluationRecord) -> int:
        if s.get(CandidateRow, rec.candidate_key) is None:
            raise StorageError(
                f"cannot add an evaluation of candidate {rec.candidate_key!r}: no such "
                f"candidate in {mask_url(self.url)!r}; expected add_candidate() first"
            )
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(rec) if f.name != "id"}
        fields["created_at"] = rec.created_at or _now()
        row = EvaluationRow(**fields)
        s.add(row)
        s.flush()
        return row.id
