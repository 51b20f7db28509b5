"""RayExecutor against real Ray: a worker killed in the middle of an evaluation, a cluster of two
nodes on loopback driven by ``tinytune search --ray-address``, and an address where nothing
listens."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest

from tinytune.cli.main import main
from tinytune.db import EvaluationRecord, open_store
from tinytune.errors import TinyTuneError
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search import (
    RayExecutor,
    RayUnavailableError,
    SearchConfig,
    run_search,
)
from tinytune.search.execution.executor import check_reachable

from . import loopback

COMPLETE = optuna.trial.TrialState.COMPLETE
FAIL = optuna.trial.TrialState.FAIL
WAITING = optuna.trial.TrialState.WAITING


def search_config(checkpoint: Path, trials: int = 2) -> SearchConfig:
    return SearchConfig(
        reference=False,
        tune_lr=False,
        checkpoint=str(checkpoint),
        study_name="ray",
        trials=trials,
        finetune=FinetuneConfig(epochs=1, batch_size=32, lr=0.05),
    )


def dump(db: Path) -> list[str]:
    """Every schema statement and row of a SQLite database, read-only (WAL included)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


# --- an address where nothing listens ---------------------------------------------------------


def test_nothing_listening_at_the_address_fails_in_seconds() -> None:
    import ray

    assert not ray.is_initialized(), "another test left Ray running in this process"
    (port,) = loopback.free_ports(1)
    start = time.monotonic()
    with pytest.raises(RayUnavailableError, match=f"127.0.0.1:{port}"):
        RayExecutor(lambda task: task, workers=1, address=f"127.0.0.1:{port}")
    assert time.monotonic() - start < 5  # ray.init alone retries for minutes
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:port", "ray://:10001", "h:70000"])
def test_malformed_addresses_are_refused_by_name(address: str) -> None:
    with pytest.raises(RayUnavailableError, match="malformed Ray address"):
        check_reachable(address)


def test_search_with_nothing_at_the_ray_address_exits_2_and_keeps_the_study(
    tmp_path: Path, tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    assert not ray.is_initialized(), "another test left Ray running in this process"
    db = tmp_path / "kept.db"
    with open_store(f"sqlite:///{db}") as store:
        store.add_candidate("c" * 16, "ofa-proxyless-w0.35", "{}")
        store.add_evaluation(EvaluationRecord("ray", "c" * 16, "measured", "ok", trial_number=0))
    study = optuna.create_study(
        study_name="ray", storage=f"sqlite:///{db}", directions=["maximize", "minimize"]
    )
    study.optimize(lambda t: (t.suggest_float("a", 0, 1), t.suggest_float("m", 0, 1)), 3)
    before = dump(db)
    trials_before = optuna.load_study(study_name="ray", storage=f"sqlite:///{db}").trials

    argv = ["search", "--storage", f"sqlite:///{db}", "--study", "ray", "--trials", "1"]
    argv += ["--epochs", "1", "--batch-size", "32", "--lr", "0.05", "--pretrain-steps", "2"]
    start = time.monotonic()
    code = main([*argv, "--ray-address", "127.0.0.1:1"])
    elapsed = time.monotonic() - start

    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: ")
    assert "'127.0.0.1:1'" in err
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert dump(db) == before  # nothing written, let alone lost
    trials_after = optuna.load_study(study_name="ray", storage=f"sqlite:///{db}").trials
    assert [(t.number, t.state, t.values) for t in trials_after] == [
        (t.number, t.state, t.values) for t in trials_before
    ]


# --- a worker killed mid-evaluation -----------------------------------------------------------


@pytest.fixture
def local_ray() -> Iterator[None]:
    """A local Ray instance with two worker CPUs for one kill test (shut down after it, so
    that the tests after it in this module start without Ray, as they check)."""
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=256 * 1024 * 1024,
    )
    try:
        yield
    finally:
        ray.shutdown()


def _blank_task(data_seed: int = 0) -> FinetuneTask:
    """A task that names no file, for executors whose task functions read none."""
    from tinytune.spaces import get_supernet, make_preset

    candidate = make_preset("last", get_supernet("ofa-proxyless-w0.35")).to_json()
    return FinetuneTask(candidate, None, "digits", data_seed, FinetuneConfig())


def hang_after_first_attempt_starts(
    attempts_dir: Path,
) -> Callable[[FinetuneTask], EvaluationResult]:
    """A task function that records each attempt as ``<task hash>-<attempt>.pid`` (holding its
    worker's PID) before evaluating. A first attempt never returns its result (it waits to be
    killed, and fails if it is not): only an attempt on a fresh worker can."""
    folder = str(attempts_dir)

    def evaluate(task: FinetuneTask) -> EvaluationResult:
        from tinytune.evaluators import run_evaluation

        digest = hashlib.sha256(task.candidate.encode()).hexdigest()[:16]
        attempt = sum(1 for name in os.listdir(folder) if name.startswith(digest))
        scratch = os.path.join(folder, f".{digest}-{attempt}.tmp")
        with open(scratch, "w") as f:
            f.write(str(os.getpid()))
        os.replace(scratch, os.path.join(folder, f"{digest}-{attempt}.pid"))
        result = run_evaluation(task)
        if attempt == 0:  # the watcher kills this worker long before the sleep ends
            time.sleep(120)
            return EvaluationResult.failed(f"attempt 0 of {digest} was not killed")
        return result

    return evaluate


@contextmanager
def killing_first_attempts(attempts_dir: Path) -> Iterator[list[int]]:
    """SIGKILLs the worker of every first attempt as soon as it records its PID; yields the list
    of killed PIDs."""
    killed: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            for path in attempts_dir.glob("*-0.pid"):
                if path.name not in seen:
                    seen.add(path.name)
                    pid = int(path.read_text())
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            stop.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield killed
    finally:
        stop.set()
        thread.join(timeout=5)


def attempts_by_task(attempts_dir: Path) -> dict[str, list[int]]:
    """Worker PIDs of each task's attempts, in order."""
    by_task: dict[str, list[int]] = {}
    for path in sorted(attempts_dir.glob("*.pid"), key=lambda p: int(p.stem.split("-")[1])):
        digest = path.stem.split("-")[0]
        by_task.setdefault(digest, []).append(int(path.read_text()))
    return by_task


def _search_killing_first_attempts(tmp_path: Path, ckpt: Path, *, max_retries: int):
    """A two-trial Ray search whose first attempt of every task is SIGKILLed mid-evaluation:
    the database URL, the result, the stored evaluations, the killed PIDs, the attempts."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    attempts_dir = tmp_path / "attempts"
    attempts_dir.mkdir()
    executor = RayExecutor(
        hang_after_first_attempt_starts(attempts_dir), 2, max_retries=max_retries
    )
    with killing_first_attempts(attempts_dir) as killed, open_store(url) as store:
        try:
            result = run_search(search_config(ckpt), store, executor)
        finally:
            executor.close()
        evaluations = store.evaluations("ray", fidelity="measured")
    return url, result, evaluations, killed, attempts_by_task(attempts_dir)


@pytest.mark.slow
def test_a_killed_worker_is_retried_and_every_evaluation_completes(
    local_ray: None, tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url, result, evaluations, killed, attempts = _search_killing_first_attempts(
        tmp_path, tiny_checkpoint, max_retries=1
    )
    assert len(attempts) == 2 and all(len(pids) == 2 for pids in attempts.values())
    assert sorted(killed) == sorted(pids[0] for pids in attempts.values())
    assert not set(killed) & {pids[1] for pids in attempts.values()}  # retried on new workers
    assert result.counts.measured == 2 and result.counts.failed == 0
    complete = optuna.load_study(study_name="ray", storage=url).get_trials(states=(COMPLETE,))
    assert len(complete) == 2
    assert [e.status for e in evaluations] == ["ok", "ok"]
    assert {e.trial_number for e in evaluations} == {t.number for t in complete}
    for t in complete:
        stored = next(e for e in evaluations if e.trial_number == t.number)
        assert stored.val_accuracy == t.values[0]


@pytest.mark.slow
def test_without_retries_a_killed_worker_is_stored_as_a_failed_evaluation(
    local_ray: None, tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url, result, evaluations, killed, attempts = _search_killing_first_attempts(
        tmp_path, tiny_checkpoint, max_retries=0
    )
    assert len(killed) == 2 and all(len(pids) == 1 for pids in attempts.values())
    assert result.counts.measured == 0 and result.counts.failed == 2
    assert [e.status for e in evaluations] == ["failed", "failed"]
    assert all(e.error.startswith("worker lost (WorkerCrashedError") for e in evaluations)
    trials = optuna.load_study(study_name="ray", storage=url).trials
    assert [t.state for t in trials if t.state != WAITING] == [FAIL, FAIL]  # others: baselines


def raising_and_counting(attempts_dir: Path) -> Callable[[FinetuneTask], EvaluationResult]:
    """A task function that records its attempt, then raises as a broken evaluation would."""
    folder = str(attempts_dir)

    def evaluate(task: FinetuneTask) -> EvaluationResult:
        with open(os.path.join(folder, f"{os.getpid()}-{time.monotonic_ns()}.pid"), "w") as f:
            f.write(str(os.getpid()))
        raise ValueError(f"no such layer {task.data_seed}")

    return evaluate


@pytest.mark.slow
def test_an_evaluation_that_raises_is_failed_at_once_not_retried(
    local_ray: None, tmp_path: Path
) -> None:
    executor = RayExecutor(raising_and_counting(tmp_path), 1, max_retries=2)
    try:
        executor.submit(7, _blank_task(data_seed=99))
        deadline = time.monotonic() + 120
        results: list[tuple[int, EvaluationResult]] = []
        while not results and time.monotonic() < deadline:
            results = executor.wait(timeout=1.0)
    finally:
        executor.close()
    assert results == [
        (7, EvaluationResult.failed("evaluation raised ValueError: no such layer 99"))
    ]
    assert len(list(tmp_path.glob("*.pid"))) == 1  # the same input would raise again


def test_negative_retries_are_refused() -> None:
    with pytest.raises(TinyTuneError, match="max_retries must be >= 0, got -1"):
        RayExecutor(lambda task: task, workers=1, max_retries=-1)


# --- two nodes on loopback --------------------------------------------------------------------


@contextmanager
def two_nodes(
    tmp_path: Path, env: dict[str, str], worker_env: dict[str, str], worker_gpus: int = 0
) -> Iterator[tuple[int, int, Callable[[], list[str]]]]:
    """:func:`tests.search.loopback.two_nodes`, skipped where Ray cannot start a node:
    (GCS port, dashboard port, probe of the alive nodes)."""
    try:
        with loopback.two_nodes(tmp_path, env, worker_env, worker_gpus=worker_gpus) as cluster:
            yield cluster.gcs_port, cluster.dashboard_port, cluster.nodes
    except loopback.LoopbackUnavailable as e:
        pytest.skip(str(e))
    except loopback.LoopbackError as e:
        pytest.fail(str(e))


@pytest.mark.slow
def test_search_on_a_two_node_cluster_runs_tasks_on_both_nodes(
    tmp_path: Path, tiny_checkpoint: Path, use_tiny_cache: Path
) -> None:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    url = f"sqlite:///{tmp_path / 'cluster.db'}"
    with two_nodes(tmp_path, env, env) as (gcs, dashboard, nodes):
        done = subprocess.run(
            [sys.executable, "-m", "tinytune.cli.main", "search", "--storage", url,
             "--ray-address", f"127.0.0.1:{gcs}", "--workers", "2", "--trials", "2",
             "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2"],
            capture_output=True, text=True, env=env, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        task_nodes = evaluation_nodes(dashboard)
        cluster_nodes = set(nodes())

    assert "Pareto front" in done.stdout
    study = optuna.load_study(study_name="tinytune", storage=url)
    complete = study.get_trials(states=(COMPLETE,))
    assert len(complete) == 3  # the reference beside the budget of 2
    with open_store(url) as store:
        evaluations = store.evaluations("tinytune", fidelity="measured")
    assert sorted(e.trial_number for e in evaluations) == sorted(t.number for t in complete)
    assert all(e.status == "ok" for e in evaluations)
    assert len(task_nodes) == 3 and set(task_nodes) == cluster_nodes


@pytest.mark.slow
def test_a_node_with_its_own_folders_gets_the_checkpoint_and_images_through_ray(
    tmp_path: Path, tiny_checkpoint: Path, use_tiny_cache: Path
) -> None:
    """The worker node runs with a cache folder of its own and never sees the driver's paths
    in its tasks: the checkpoint and the user's image folder reach it through the object store
    and are written under its cache, once per content."""
    from tests.data.test_data import write_image_folder

    folder = write_image_folder(tmp_path / "driver" / "my-images", images_per_class=12)
    worker_cache = tmp_path / "worker-cache"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    worker_env = dict(env, TINYTUNE_CACHE=str(worker_cache))
    url = f"sqlite:///{tmp_path / 'cluster.db'}"
    with two_nodes(tmp_path, env, worker_env) as (gcs, dashboard, nodes):
        done = subprocess.run(
            [sys.executable, "-m", "tinytune.cli.main", "search", "--storage", url,
             "--ray-address", f"127.0.0.1:{gcs}", "--workers", "2", "--trials", "2",
             "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2", "--repeats", "1",
             "--dataset", f"imagefolder:{folder}", "--supernet", "ofa-proxyless-w0.35"],
            capture_output=True, text=True, env=env, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        task_nodes = evaluation_nodes(dashboard)
        cluster_nodes = set(nodes())

    assert set(task_nodes) == cluster_nodes  # the worker node trained some of them
    with open_store(url) as store:
        evaluations = store.evaluations("tinytune", fidelity="measured")
    assert evaluations and all(e.status == "ok" for e in evaluations)
    shipped = worker_cache / "shipped"
    checkpoints = list(shipped.glob("*/*.pt"))  # the driver's, from its own cache
    assert len(checkpoints) == 1
    (driver_copy,) = (use_tiny_cache / "supernets").rglob(checkpoints[0].name)
    assert checkpoints[0].read_bytes() == driver_copy.read_bytes()
    copies = list(shipped.glob("*/my-images"))
    assert len(copies) == 1
    for image in folder.rglob("*.png"):
        assert (copies[0] / image.relative_to(folder)).read_bytes() == image.read_bytes()


def evaluation_nodes(
    dashboard_port: int, name: str = "run_evaluation", at_least: int = 2, wait_s: float = 30
) -> list[str]:
    """The node of every finished task called ``name``, through Ray's state API (waiting up
    to ``wait_s`` for ``at_least`` of them)."""
    from ray.util.state import list_tasks

    deadline = time.monotonic() + wait_s
    while True:
        tasks = list_tasks(
            address=f"http://127.0.0.1:{dashboard_port}",
            filters=[("name", "=", name), ("state", "=", "FINISHED")],
            detail=True,
            timeout=10,
            raise_on_missing_output=False,
        )
        if len(tasks) >= at_least or time.monotonic() > deadline:  # events arrive late
            return [t.node_id for t in tasks]
        time.sleep(1)


def gpu_nodes(dashboard_port: int) -> set[str]:
    """The alive nodes that declare a GPU, through Ray's state API."""
    from ray.util.state import list_nodes

    found = list_nodes(
        address=f"http://127.0.0.1:{dashboard_port}",
        filters=[("state", "=", "ALIVE")],
        detail=True,
        timeout=10,
        raise_on_missing_output=False,
    )
    return {n.node_id for n in found if n.resources_total.get("GPU", 0) > 0}


# --- a mixed cluster: one node declares a GPU -------------------------------------------------


@pytest.mark.slow
def test_on_a_mixed_cluster_fine_tunes_run_only_on_the_gpu_node_and_the_rest_anywhere(
    tmp_path: Path,
    tiny_checkpoint: Path,
    use_tiny_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker node declares a GPU it does not have (Ray schedules by what nodes declare);
    a search with --gpus-per-trial 0.5 runs every fine-tune there, where no CUDA answers, so
    each falls back to the CPU and says so. Tasks that ask for no GPU run on both nodes."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    with two_nodes(tmp_path, env, env, worker_gpus=1) as (gcs, dashboard, nodes):
        done = subprocess.run(
            [sys.executable, "-m", "tinytune.cli.main", "search", "--storage", url,
             "--ray-address", f"127.0.0.1:{gcs}", "--workers", "2", "--trials", "2",
             "--epochs", "1", "--lr", "0.05", "--pretrain-steps", "2",
             "--gpus-per-trial", "0.5"],
            capture_output=True, text=True, env=env, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        fine_tune_nodes = evaluation_nodes(dashboard, at_least=3)
        with_gpu = gpu_nodes(dashboard)
        cluster_nodes = set(nodes())

        # tasks that ask for no GPU (here: four that each hold a CPU for a few seconds)
        def no_gpu(task: FinetuneTask) -> EvaluationResult:
            time.sleep(3)
            return EvaluationResult("ok")

        import ray

        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        assert not ray.is_initialized(), "another test left Ray running in this process"
        executor = RayExecutor(no_gpu, workers=2, address=f"127.0.0.1:{gcs}")
        try:
            for key in range(4):
                executor.submit(key, _blank_task())
            results: list[tuple[int, EvaluationResult]] = []
            deadline = time.monotonic() + 120
            while len(results) < 4 and time.monotonic() < deadline:
                results += executor.wait(timeout=1.0)
        finally:
            executor.close()
        assert sorted(key for key, _ in results) == [0, 1, 2, 3]
        # the state API hears of finished tasks late on a loaded machine
        cpu_task_nodes = evaluation_nodes(dashboard, name="no_gpu", at_least=4, wait_s=120)

    assert len(cluster_nodes) == 2 and len(with_gpu) == 1
    assert len(fine_tune_nodes) == 3  # the reference beside the budget of 2
    assert set(fine_tune_nodes) == with_gpu  # every fine-tune on the node with the GPU
    assert set(cpu_task_nodes) == cluster_nodes  # the others anywhere
    with open_store(url) as store:
        evaluations = store.evaluations("tinytune", fidelity="measured")
    assert len(evaluations) == 3 and all(e.status == "ok" for e in evaluations)
    assert all(e.details["device"] == "cpu" for e in evaluations)  # no CUDA behind the GPU
    out = " ".join(done.stdout.split())
    assert "workers trained on: cpu (" in out
    assert "--gpus-per-trial 0.5 reserved GPUs, but no worker saw one through CUDA" in out


@pytest.mark.slow
def test_gpus_per_trial_without_a_gpu_in_the_cluster_exits_2_before_pre_training(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local Ray instance on a machine whose GPUs are hidden declares none: the search is
    refused in one line, before the pre-training it asks for, rather than queueing fine-tunes
    that could never start."""
    import ray

    assert not ray.is_initialized(), "another test left Ray running in this process"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # Ray counts the GPUs it may see
    monkeypatch.setenv("TINYTUNE_CACHE", str(tmp_path / "cache"))  # no checkpoint in it
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    argv = ["search", "--storage", url, "--trials", "1", "--epochs", "1", "--lr", "0.05"]
    argv += ["--pretrain-steps", "2", "--workers", "1", "--gpus-per-trial", "0.5"]
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinytune: error: ")
    assert (
        "--gpus-per-trial 0.5 asks for GPUs, but no node of the Ray cluster started here has any"
        in err
    )
    assert elapsed < 60, f"took {elapsed:.1f} s"
    assert not ray.is_initialized()
    assert not list((tmp_path / "cache").rglob("*.pt"))  # not pre-trained


def test_a_workers_error_keeps_the_line_that_names_it() -> None:
    """Ray's import failure announces a traceback on its first line: the one line stored with
    the failed evaluation keeps the traceback's last line, which names the error."""
    from tinytune.search.execution.executor import _first_line

    announced = RuntimeError(
        "The remote function failed to import on the worker. sys.path ['/x']:\n\n"
        'Traceback (most recent call last):\n  File "m.py", line 1\n'
        "SyntaxError: invalid syntax\n"
    )
    assert _first_line(announced) == (
        "The remote function failed to import on the worker. sys.path ['/x']: … "
        "SyntaxError: invalid syntax"
    )
    assert _first_line(ValueError("bad value\nmore")) == "bad value"
    assert _first_line(ValueError("")) == "ValueError"
