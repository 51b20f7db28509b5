"""A Ray cluster of two nodes on one machine (loopback), each node with its own temp folder and
environment, as a second host would have: how the tests and ``bench/workers.py`` try
``--ray-address`` and the shipping of files through Ray without a second machine.

Every port is explicit: two nodes on one host must not both claim Ray's defaults (the dashboard
agent's 52365, for one), and neither may collide with another cluster on the machine. The nodes
are stopped through their process groups, never with ``ray stop``, which would stop every Ray
cluster of the user on this machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NODE_MEMORY = ["--memory=2000000000", "--object-store-memory=150000000"]
JOIN_ATTEMPTS = 3
JOIN_S = 90.0  # per attempt
_NODE_PORTS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
)


class LoopbackUnavailable(RuntimeError):
    """Ray cannot start a node on this machine (no ``ray`` command, the head exits at once)."""


class LoopbackError(RuntimeError):
    """A node started but the cluster did not form in time; the message ends with its log."""


@dataclass(frozen=True)
class Cluster:
    gcs_port: int
    dashboard_port: int
    nodes: Callable[[], list[str]]  # IDs of the alive nodes

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def ray_node(args: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """``ray start ... --block`` in a session of its own; on exit every process of that node
    (GCS, raylet, agents, workers) is stopped through its process group."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["ray", "start", *args, "--block", "--disable-usage-stats", *NODE_MEMORY],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(proc.pid):
                break


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def alive_nodes(dashboard_port: int) -> Callable[[], list[str]]:
    """A probe of the IDs of the cluster's alive nodes, through Ray's state API."""

    def probe() -> list[str]:
        from ray.util.state import list_nodes

        try:
            found = list_nodes(
                address=f"http://127.0.0.1:{dashboard_port}",
                filters=[("state", "=", "ALIVE")],
                timeout=5,
                raise_on_missing_output=False,
            )
        except Exception:  # the dashboard is still starting
            return []
        return [n.node_id for n in found]

    return probe


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise LoopbackError(f"{what} within {timeout:.0f} s; log:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def _joined(nodes: Callable[[], list[str]], worker: subprocess.Popen, within: float) -> bool:
    """Whether the cluster has two alive nodes within ``within`` seconds, while ``worker``'s
    'ray start' still runs (False as soon as it exits)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            return False
        if len(nodes()) == 2:
            return True
        time.sleep(0.5)
    return False


def _raylet_log(tmp: Path) -> str:
    """The end of the raylet's log in a node's temp folder, or nothing where it wrote none."""
    found = sorted(tmp.glob("session_*/logs/raylet.out"))
    return f"\nits raylet's log:\n{found[-1].read_text()[-2000:]}" if found else ""


@contextmanager
def two_nodes(
    logs: Path,
    env: dict[str, str],
    worker_env: dict[str, str],
    cpus: int = 1,
    worker_gpus: int = 0,
) -> Iterator[Cluster]:
    """A head and a worker node on loopback with ``cpus`` CPUs each, the head started with
    ``env`` and the worker with ``worker_env``, their logs in the folder ``logs``. The head
    declares no GPU and the worker ``worker_gpus``, whatever the machine has: Ray schedules
    by what a node declares, so a mixed cluster's scheduling can be tried without a GPU."""
    if shutil.which("ray") is None:
        raise LoopbackUnavailable("the 'ray' command is not on PATH, so 'ray start' cannot run")
    gcs, dashboard, client, *head_ports = free_ports(9)
    head_args = [
        "--head",
        f"--port={gcs}",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={cpus}",
        "--num-gpus=0",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--runtime-env-agent-port={head_ports.pop()}",
        *(f"{flag}={port}" for flag, port in zip(_NODE_PORTS, head_ports, strict=True)),
    ]

    def worker_args(ports: list[int], tmp: Path) -> list[str]:
        return [
            f"--address=127.0.0.1:{gcs}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={cpus}",
            f"--num-gpus={worker_gpus}",
            *(f"{flag}={port}" for flag, port in zip(_NODE_PORTS, ports, strict=True)),
            f"--temp-dir={tmp}",
        ]

    # temp folders under /tmp keep Ray's Unix socket paths short enough
    head_tmp = Path(tempfile.mkdtemp(prefix="tt-ray-"))
    worker_tmps: list[Path] = []
    head_log = logs / "head.log"
    try:
        with ray_node([*head_args, f"--temp-dir={head_tmp}"], head_log, env) as head:
            deadline = time.monotonic() + 60
            while not answers(gcs) and head.poll() is None and time.monotonic() < deadline:
                time.sleep(0.3)
            if head.poll() is not None:
                raise LoopbackUnavailable(
                    f"'ray start --head' cannot run here: {head_log.read_text()[-800:]}"
                )
            _wait_for(lambda: answers(gcs), 0, "the head's GCS did not answer", head_log)
            nodes = alive_nodes(dashboard)
            with contextlib.ExitStack() as kept:
                # a loaded machine can make the worker's 'ray start' give up ("timed out during
                # startup") or hang before its raylet registers; either way the attempt is
                # stopped and a fresh one, on ports chosen now that the head holds its own,
                # usually joins
                for attempt in range(1, JOIN_ATTEMPTS + 1):
                    worker_tmps.append(Path(tempfile.mkdtemp(prefix="tt-ray-")))
                    log = logs / ("worker.log" if attempt == 1 else f"worker-{attempt}.log")
                    with contextlib.ExitStack() as this:
                        worker = this.enter_context(
                            ray_node(worker_args(free_ports(5), worker_tmps[-1]), log, worker_env)
                        )
                        if _joined(nodes, worker, JOIN_S):
                            kept.enter_context(this.pop_all())  # runs until the cluster ends
                            break
                else:
                    raise LoopbackError(
                        f"the second node did not join in {JOIN_ATTEMPTS} attempts of "
                        f"{JOIN_S:.0f} s; the last one's log:\n{log.read_text()[-2000:]}"
                        f"{_raylet_log(worker_tmps[-1])}"
                    )
                yield Cluster(gcs, dashboard, nodes)
    finally:
        for folder in (head_tmp, *worker_tmps):
            shutil.rmtree(folder, ignore_errors=True)
