"""Where evaluations run: Ray workers (the default) or the driver's own process.

An :class:`Executor` takes plain-dict tasks and hands back plain-dict results; it never sees the
database. Contract: every submitted task eventually comes back from :meth:`Executor.wait`
exactly once — as its result, or as a ``status="failed"`` result when the worker itself died
after its retries.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from tinytune.errors import TinyTuneError

__all__ = ["Executor", "InlineExecutor", "RayExecutor", "RayUnavailableError"]

log = logging.getLogger(__name__)

Task = dict[str, Any]
Result = dict[str, Any]


class RayUnavailableError(TinyTuneError):
    """Ray cannot start, or nothing answers at the given cluster address."""


class Executor(ABC):
    """Runs evaluation tasks; see the module docstring for the contract."""

    slots: int

    @abstractmethod
    def submit(self, key: int, task: Task) -> None:
        """Start ``task``; ``key`` identifies it in :meth:`wait`."""

    @abstractmethod
    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        """Results of finished tasks (possibly none after ``timeout`` seconds)."""

    @property
    @abstractmethod
    def in_flight(self) -> int:
        """Tasks submitted and not yet returned."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release workers."""


class InlineExecutor(Executor):
    """Runs each task in the driver's process when :meth:`wait` is called (tests, debugging)."""

    def __init__(self, fn: Callable[[Task], Result]) -> None:
        self.fn = fn
        self.slots = 1
        self._queue: list[tuple[int, Task]] = []

    def submit(self, key: int, task: Task) -> None:
        self._queue.append((key, task))

    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        if not self._queue:
            return []
        key, task = self._queue.pop(0)
        return [(key, self.fn(task))]

    @property
    def in_flight(self) -> int:
        return len(self._queue)


class RayExecutor(Executor):
    """Ray tasks with ``max_retries`` for workers that die (a retried task runs again from
    scratch: evaluations are deterministic for a seed).

    Args:
        fn: the task function (importable, so that workers can unpickle it).
        workers: concurrent tasks (one CPU each).
        address: an existing cluster (``ray://…`` or ``host:port``); ``None`` starts a local
            instance sized for ``workers``.
        threads: torch threads per task.
    """

    def __init__(
        self,
        fn: Callable[[Task], Result],
        workers: int,
        address: str | None = None,
        max_retries: int = 2,
    ) -> None:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled" if address is None else "token")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._ray = ray
        self.slots = workers
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": True,
                "logging_level": logging.WARNING,
            }
            if address is None:
                kwargs.update(num_cpus=workers, object_store_memory=256 * 1024 * 1024)
            else:
                kwargs["address"] = address
            try:
                ray.init(**kwargs)
            except Exception as e:
                where = f"at {address!r}" if address else "locally"
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise RayUnavailableError(f"cannot start or reach Ray {where}: {msg}") from e
        self._remote = ray.remote(num_cpus=1, max_retries=max_retries)(fn)
        self._pending: dict[Any, int] = {}

    def submit(self, key: int, task: Task) -> None:
        self._pending[self._remote.remote(task)] = key

    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        if not self._pending:
            return []
        done, _ = self._ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        out = []
        for ref in done:
            key = self._pending.pop(ref)
            try:
                out.append((key, self._ray.get(ref)))
            except self._ray.exceptions.RayError as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                out.append((key, {"status": "failed", "error": f"worker lost: {msg}"}))
        return out

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        for ref in list(self._pending):
            self._ray.cancel(ref, force=True)
        self._pending.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
