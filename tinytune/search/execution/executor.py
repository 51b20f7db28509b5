"""Where evaluations run: Ray workers (the default) or the driver's own process.

An :class:`Executor` takes :class:`~tinytune.evaluators.FinetuneTask` tasks and hands back
:class:`~tinytune.evaluators.EvaluationResult` results; it never sees the database. Contract:
every submitted task eventually comes back from :meth:`Executor.wait` exactly once — as its
result, or as a ``status="failed"`` result when the task could not produce one (its worker died
more often than it may be retried, or it raised).
"""

from __future__ import annotations

import logging
import os
import socket
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from tinytune.errors import OptionError, TinyTuneError, flag
from tinytune.evaluators import EvaluationResult, FinetuneTask
from tinytune.search.execution.node_files import Shipper, run_shipped

__all__ = [
    "Executor",
    "InOrder",
    "InlineExecutor",
    "Metered",
    "RayExecutor",
    "RayUnavailableError",
    "check_reachable",
]

log = logging.getLogger(__name__)

Task = FinetuneTask
Result = EvaluationResult


class RayUnavailableError(TinyTuneError):
    """Ray cannot start, or nothing answers at the given cluster address."""


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds when nothing listens at a Ray cluster address.

    ``ray.init(address=...)`` retries its connection to the cluster's GCS about twenty times,
    each waiting for a timeout, before it gives up: minutes for a typo in a port. One TCP connect
    answers the common case (a refused or unroutable address) at once; ``auto`` and ``local``
    are left to Ray.

    Args:
        address: ``HOST:PORT`` (the GCS of a cluster started with ``ray start --head``) or
            ``ray://HOST:PORT`` (a Ray Client server).
        timeout_s: how long to wait for the TCP handshake.

    Raises:
        RayUnavailableError: the address is malformed or nothing accepts a connection there.
    """
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayUnavailableError(
            f"malformed Ray address {address!r}; expected HOST:PORT or ray://HOST:PORT"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise RayUnavailableError(
            f"no Ray cluster answers at {address!r} ({reason}); start one with "
            f"'ray start --head --port {port}' or leave out "
            + flag("ray_address")
            + " for a local instance"
        ) from e


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


class Metered(Executor):
    """Another executor whose returned results are added up: the epochs they trained, in
    passes over the whole training split (``details.train_epochs``, the compute a search
    counts), their seconds inside workers, and the devices they ran on (``devices``: tasks
    by :func:`device_label`). It owns nothing: closing it leaves the inner executor open."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.slots = inner.slots
        self.train_epochs = 0.0
        self.task_s = 0.0
        self.devices: Counter[str] = Counter()

    def submit(self, key: int, task: Task) -> None:
        self.inner.submit(key, task)

    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        results = self.inner.wait(timeout)
        for _, result in results:
            self.train_epochs += result.train_epochs
            self.task_s += result.wall_time_s
            if "device" in result.details:
                self.devices[device_label(result.details)] += 1
        return results

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight


class InOrder(Executor):
    """Another executor's results handed back in the order their tasks were submitted, one per
    call to :meth:`wait`: a task that finishes early is held until every task submitted before
    it has come back. A driver that proposes between calls then sees the same results at every
    proposal however fast each worker was, so that a seed makes the same search (a reproducible
    run). Its cost: a slot whose task finished early stays busy until its turn. It owns
    nothing: closing it leaves the inner executor open."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.slots = inner.slots
        self.order: deque[int] = deque()  # keys submitted and not handed back, oldest first
        self.held: dict[int, Result] = {}  # results back from the inner executor before their turn

    def submit(self, key: int, task: Task) -> None:
        self.inner.submit(key, task)
        self.order.append(key)

    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        if not self.order or self.order[0] not in self.held:
            self.held.update(self.inner.wait(timeout))
        if self.order and self.order[0] in self.held:
            key = self.order.popleft()
            return [(key, self.held.pop(key))]
        return []

    @property
    def in_flight(self) -> int:
        return len(self.order)


def device_label(details: Mapping[str, Any]) -> str:
    """Where a result's task ran, for people: ``cpu``, or ``cuda:0 (the GPU's name)``."""
    device = str(details.get("device"))
    return f"{device} ({details['gpu']})" if details.get("gpu") else device


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
    """Ray tasks, one CPU each and the share of a GPU a task asks for, retried when their
    worker dies.

    A task's ``gpus`` (default 0) becomes its Ray ``num_gpus``: Ray runs it only on a node
    that declares GPUs, as many at once as their shares fit, and makes the task's GPU the
    worker's ``cuda:0``; a task without one runs on any node with a free CPU.

    Retries follow Ray's split between system and application failures. A task whose worker
    process dies (killed, crashed, its node lost) runs again from scratch on a fresh worker, up
    to ``max_retries`` more times; that is safe because an evaluation is a pure function of its
    task (seeded fine-tuning, no writes). A task whose function raises is not retried — the same
    input would raise again — and comes back as a failed result with the error, as does a task
    whose worker died on every attempt.

    Args:
        fn: the task function (importable, so that workers can unpickle it).
        workers: concurrent tasks (one CPU each).
        address: an existing cluster (``HOST:PORT`` or ``ray://HOST:PORT``); ``None`` starts a
            local instance sized for ``workers``. With an address, each task's checkpoint and
            image folder travel through the object store
            (:mod:`tinytune.search.execution.node_files`), so workers on other nodes need no
            shared file system.
        max_retries: extra attempts for a task whose worker died (0: none).
        connect_timeout_s: how long the reachability check of ``address`` may take.
        gpus: the most GPUs one task will ask for (``gpus_per_trial``): the cluster must
            have that many on one of its nodes, or its tasks would wait forever.

    Raises:
        RayUnavailableError: Ray cannot start, or nothing answers at ``address``.
        ConfigError: ``workers`` < 1, ``max_retries`` < 0, or ``gpus`` more than any node
            of the cluster has.
    """

    def __init__(
        self,
        fn: Callable[[Task], Result],
        workers: int,
        address: str | None = None,
        max_retries: int = 2,
        connect_timeout_s: float = 3.0,
        gpus: float = 0.0,
    ) -> None:
        if workers < 1:
            raise OptionError("workers", f"must be >= 1, got {workers}")
        if max_retries < 0:
            raise OptionError("max_retries", f"must be >= 0, got {max_retries}")
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled" if address is None else "token")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._ray = ray
        self.slots = workers
        self.max_retries = max_retries
        self._owns = not ray.is_initialized()
        if self._owns:
            if address is not None:
                check_reachable(address, connect_timeout_s)
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
                raise RayUnavailableError(
                    f"cannot start or reach Ray {where}: {_first_line(e)}"
                ) from e
        if gpus > 0:
            self._check_gpus(gpus, address)
        self._fn = fn
        self._remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(
            run_shipped
        )
        self._name = getattr(fn, "__name__", "evaluation")  # the task's name in Ray's state
        self._kinds: dict[float, Any] = {}  # the remote function by a task's share of a GPU
        # on a cluster the checkpoint and image folder travel through the object store
        self._shipper = Shipper(ray.put) if address is not None else None
        self._pending: dict[Any, int] = {}

    def _check_gpus(self, gpus: float, address: str | None) -> None:
        """Refuse ``gpus`` per task where no node of the cluster has that many."""
        nodes = [n for n in self._ray.nodes() if n.get("Alive")]
        most = max((float(n.get("Resources", {}).get("GPU", 0.0)) for n in nodes), default=0.0)
        if most >= gpus:
            log.info("fine-tunes ask for %g GPU each; the most on one node is %g", gpus, most)
            return
        if self._owns:
            self._ray.shutdown()
        where = f"at {address!r}" if address else "started here"
        raise OptionError.saying(
            "gpus_per_trial",
            flag("gpus_per_trial", gpus)
            + f" asks for GPUs, but no node of the Ray cluster {where} has "
            + f"{'any' if most == 0 else f'{gpus:g} (the most is {most:g})'}; leave it out to "
            "fine-tune on CPUs",
        )

    def submit(self, key: int, task: Task) -> None:
        gpus = task.gpus
        if gpus not in self._kinds:
            self._kinds[gpus] = self._remote.options(name=self._name, num_gpus=gpus)
        shipped = self._shipper.pack(task) if self._shipper is not None else {}
        self._pending[self._kinds[gpus].remote(self._fn, task, shipped)] = key

    def wait(self, timeout: float) -> list[tuple[int, Result]]:
        if not self._pending:
            return []
        done, _ = self._ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        out = []
        for ref in done:
            key = self._pending.pop(ref)
            try:
                out.append((key, self._ray.get(ref)))
            except self._ray.exceptions.RayTaskError as e:
                cause = e.cause if e.cause is not None else e
                error = f"evaluation raised {type(cause).__name__}: {_first_line(cause)}"
                out.append((key, EvaluationResult.failed(error)))
            except self._ray.exceptions.RayError as e:
                error = (
                    f"worker lost ({type(e).__name__}, max_retries={self.max_retries}): "
                    f"{_first_line(e)}"
                )
                log.warning("task %s: %s", key, error)
                out.append((key, EvaluationResult.failed(error)))
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


def _first_line(e: BaseException) -> str:
    """The first line of ``e``'s message; where it only announces what follows (it ends with
    a colon, as Ray's "failed to import on the worker" does before a traceback), the last line
    too, which names the error."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} … {lines[-1]}"
    return lines[0]
