"""Measured fine-tunes per minute with 1 and 2 local Ray workers, and where the time goes.

    python3 -m bench.workers [--trials 16] [--lr 1.6] [--workers 1 2] [--sampler random]
                             [--cluster] [--pair] [--grid N] [--niceness N]

Each setting runs ``tinytune.optimize`` on digits in a fresh SQLite database of its own (the
shipped checkpoint, the study's reference and baselines first, then the sampler; ``--lr`` fixed
so that no learning-rate grid runs), one after the other. The default random sampler draws the
same candidates whatever order results come back in, so both settings train the same networks
(TPE's proposals depend on that order). For each: the run's wall time, its measured
fine-tunes per minute, the seconds spent inside evaluations summed over the workers, the
workers' utilisation (that sum over wall time × workers) and the tail: how long the last
fine-tune ran while another worker had nothing left to do (finish of the last minus finish of
the one before it, each evaluation's stored finish time). Equal sums of evaluation time with 1
and 2 workers mean the workers do not slow each other down; the rest of the gap to 2× is idle
time (start-up, the tail). Each setting also reports the CPU seconds of the driver process
(all its threads; the first setting includes the modules imported on first use) and of Ray's
own processes (:class:`DaemonCpu`), which compete with the workers for the same cores.

``--cluster`` adds a third setting: 2 workers on a Ray cluster of two nodes on loopback (one CPU
each, ``tests/search/loopback.py``) reached with ``ray_address``, the worker node with a cache
folder of its own, so that the checkpoint reaches it through Ray's object store as it would reach
another host.

``--pair`` first measures the machine itself: one fine-tune of the ``mcunetv3`` preset (the
study's epochs, one thread) in a plain process, then two copies at once in two processes,
without Ray or a driver; the ratio of their times is what two cores lose to each other alone.
With ``--pair-preset full`` it does so with the reference's full fine-tuning instead, the
largest network of a search's first fine-tunes, and ``--threads 2`` adds the same fine-tune
alone with two torch threads: what the last fine-tune of a run would gain from the core that
the other worker leaves idle.

``--niceness N`` measures 2 workers N times at each of Ray's worker niceness (15, Ray's default,
and 0, set through ``RAY_worker_niceness`` before Ray starts), alternating: Ray lowers its
workers' priority below the driver's and every other process on the machine, which could cost
the fine-tunes time whenever those run.

``--grid N`` measures the learning-rate grid (12 fine-tunes before a study's first candidate)
on 2 workers, N times in each order, alternating: submitted in the families' order
(classifier, bias, sparse, full), longest predicted training step first
(:func:`tinytune.search.run.lr_grid.longest_first`), and longest first with the families that
compute a frozen prefix last and interleaved, as the search submits them
(:func:`tinytune.search.run.lr_grid.grid_order`); the grid's wall time runs from its first
submission to its last result, the Ray start-up left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness import DEFAULT_DATASET


class DaemonCpu:
    """The CPU seconds of Ray's own processes (GCS, raylet, agents, monitors: every process
    whose command line names Ray, its workers and this process left out) while the block runs,
    read from ``/proc`` every half second; a process's last reading counts, so those that Ray
    stops at shutdown count up to half a second short."""

    WORKER_PREFIXES = ("ray::IDLE", "ray::run_evaluation", "ray::evaluation", "ray::_")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.each: list[float] = []  # each process's CPU seconds, ascending
        self._last: dict[int, float] = {}
        self._workers: set[int] = set()
        self._stop = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def _read(self, pid: int) -> None:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "ray" not in cmd:
                return
            if cmd.startswith(self.WORKER_PREFIXES):  # a worker (once it has named itself)
                self._workers.add(pid)
                return
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return
        self._last[pid] = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and int(entry.name) != os.getpid():
                    self._read(int(entry.name))

    def __enter__(self) -> DaemonCpu:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.each = sorted(v for pid, v in self._last.items() if pid not in self._workers)
        self.seconds = sum(self.each)


def run(
    workers: int, trials: int, lr: float, sampler: str, folder: Path, address: str | None = None
) -> dict[str, Any]:
    import sqlalchemy as sa

    import tinytune

    url = f"sqlite:///{folder / 'workers.db'}"
    cpu = time.process_time()
    with DaemonCpu() as daemons:
        result = tinytune.optimize(
            DEFAULT_DATASET,
            trials=trials,
            lr=lr,
            workers=workers,
            storage=url,
            sampler=sampler,
            ray_address=address,
        )
    cpu = time.process_time() - cpu
    engine = sa.create_engine(url)
    with engine.connect() as c:
        done = c.execute(
            sa.text(
                "select created_at from tt_evaluations where status = 'ok' order by created_at"
            )
        ).all()
    engine.dispose()
    finished = [datetime.fromisoformat(str(row[0])) for row in done]  # SQLite: text
    tail = (finished[-1] - finished[-2]).total_seconds() if workers > 1 and len(done) > 1 else 0.0
    wall = result.wall_time_s
    return {
        "measured": result.counts.measured,
        "wall_s": wall,
        "per_minute": 60 * result.counts.measured / wall,
        "task_s": result.task_time_s,
        "utilisation": result.task_time_s / (wall * workers),
        "tail_s": tail,
        "driver_cpu_s": cpu,
        "ray_cpu_s": daemons.seconds,
        "ray_processes": len(daemons.each),
        "ray_cpu_each_s": (daemons.each[0], daemons.each[-1]) if daemons.each else (0.0, 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1.6)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument(
        "--sampler", default="random", help="random: the same candidates for every setting"
    )
    parser.add_argument(
        "--cluster", action="store_true", help="also 2 workers on two loopback Ray nodes"
    )
    parser.add_argument(
        "--pair", action="store_true", help="first, one fine-tune alone and two at once"
    )
    parser.add_argument("--pair-preset", default="mcunetv3", help="the preset --pair trains")
    parser.add_argument(
        "--threads", type=int, default=1, help="with --pair: also one fine-tune on this many"
    )
    parser.add_argument(
        "--grid", type=int, default=0, metavar="N", help="the learning-rate grid, N per order"
    )
    parser.add_argument(
        "--niceness",
        type=int,
        default=0,
        metavar="N",
        help="2 workers at niceness 15 and 0, N each",
    )
    args = parser.parse_args(argv)
    if args.pair:
        alone, both, threaded = pair(args.lr, args.pair_preset, args.threads)
        print(
            f"one {args.pair_preset} fine-tune alone {alone:.2f} s; two at once in two processes "
            f"{both[0]:.2f} s and {both[1]:.2f} s (x{max(both) / alone:.2f})",
            flush=True,
        )
        if threaded is not None:
            print(
                f"alone with {args.threads} threads {threaded:.2f} s "
                f"(x{alone / threaded:.2f} faster than one thread)",
                flush=True,
            )
    if args.grid:
        grid(args.grid)
        return 0
    if args.niceness:
        niceness(args.niceness, args.trials, args.lr, args.sampler)
        return 0
    rows: dict[int | str, dict[str, float]] = {}
    settings: list[int | str] = [*args.workers, *(["cluster"] if args.cluster else [])]
    for w in settings:
        with tempfile.TemporaryDirectory(prefix="tt-workers-") as tmp:
            if w == "cluster":
                rows[w] = run_on_cluster(args, Path(tmp))
            else:
                rows[w] = run(int(w), args.trials, args.lr, args.sampler, Path(tmp))
        r = rows[w]
        name = "2 workers on two nodes" if w == "cluster" else f"{w} worker(s)"
        print(
            f"{name}: {r['measured']} fine-tunes in {r['wall_s']:.1f} s = "
            f"{r['per_minute']:.2f} per minute; {r['task_s']:.1f} s inside evaluations, "
            f"utilisation {100 * r['utilisation']:.0f} %, tail {r['tail_s']:.1f} s; "
            f"driver {r['driver_cpu_s']:.1f} CPU s, Ray's own processes "
            f"{r.get('ray_cpu_s', float('nan')):.1f} CPU s"
            + (
                f" ({r['ray_processes']} processes, {r['ray_cpu_each_s'][0]:.1f}–"
                f"{r['ray_cpu_each_s'][1]:.1f} s each)"
                if r.get("ray_processes")
                else ""
            ),
            flush=True,
        )
    for w in (2, "cluster"):
        if 1 in rows and w in rows:
            print(f"{w if w == 'cluster' else '2 workers'} / 1 worker, fine-tunes per minute: "
                  f"{rows[w]['per_minute'] / rows[1]['per_minute']:.2f}")  # fmt: skip
    return 0


def _fine_tune(lr: float, preset: str = "mcunetv3", threads: int = 1) -> float:
    """Seconds of one measured fine-tune of a preset on the default sub-network, on digits."""
    import dataclasses

    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.evaluators import FinetuneTask, run_evaluation
    from tinytune.search import SearchConfig
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    config = SearchConfig(checkpoint="")
    spec = get_supernet(config.supernet)
    task = FinetuneTask(
        candidate=make_preset(preset, spec, default_subnet(spec)).to_json(),
        checkpoint=str(shipped_checkpoint(spec)),
        dataset=config.dataset,
        data_seed=config.data_seed,
        finetune=dataclasses.replace(config.finetune, lr=lr),
        threads=threads,
    )
    start = time.perf_counter()
    result = run_evaluation(task)
    if result.status != "ok":
        raise RuntimeError(f"the fine-tune failed: {result.error}")
    return time.perf_counter() - start


def pair(lr: float, preset: str, threads: int) -> tuple[float, list[float], float | None]:
    """One fine-tune alone, then two at once, each in a fresh process (after a warm-up), then
    (``threads`` > 1) one alone on that many threads."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    one = [(lr, preset, 1)]
    with context.Pool(1) as pool:
        pool.starmap(_fine_tune, one)  # data and checkpoint cached, as for a search's workers
    with context.Pool(1) as pool:
        alone = pool.starmap(_fine_tune, one)[0]
    with context.Pool(2) as pool:
        both = pool.starmap(_fine_tune, one * 2)
    threaded = None
    if threads > 1:
        with context.Pool(1) as pool:
            threaded = pool.starmap(_fine_tune, [(lr, preset, threads)])[0]
    return alone, both, threaded


NICENESS = "RAY_worker_niceness"  # Ray's system setting, as an environment variable


def niceness(rounds: int, trials: int, lr: float, sampler: str) -> None:
    """2 workers at Ray's default worker niceness and at 0, alternating, ``rounds`` times each."""
    for r in range(rounds):
        for nice in (15, 0):
            os.environ[NICENESS] = str(nice)  # read by the raylet that Ray starts
            with tempfile.TemporaryDirectory(prefix="tt-workers-") as tmp:
                row = run(2, trials, lr, sampler, Path(tmp))
            print(
                f"niceness {nice:>2}, round {r + 1}: {row['measured']} fine-tunes in "
                f"{row['wall_s']:.1f} s, {row['task_s']:.1f} s inside evaluations, "
                f"utilisation {100 * row['utilisation']:.0f} %, tail {row['tail_s']:.1f} s",
                flush=True,
            )
    os.environ.pop(NICENESS, None)


def grid(rounds: int) -> None:
    """The learning-rate grid on 2 workers in the families' order, longest first, and longest
    first with the families that compute a frozen prefix interleaved (the search's)."""
    import statistics

    import tinytune
    from tinytune.search.run import lr_grid as lr_module

    grid_order = lr_module.grid_order
    orders = {
        "families' order": lambda family, step_s, prefixed: list(family),
        "longest first": lambda family, step_s, prefixed: lr_module.longest_first(step_s),
        "longest first, the prefixes side by side": grid_order,
    }
    times: dict[str, list[float]] = {name: [] for name in orders}
    try:
        for i in range(rounds):
            for name, order in orders.items():
                lr_module.grid_order = order
                marks: list[float] = []

                def progress(event: object, marks: list[float] = marks) -> None:
                    if getattr(event, "kind", "") == "calibrating":
                        marks.append(time.monotonic())

                with tempfile.TemporaryDirectory(prefix="tt-grid-") as tmp:
                    tinytune.optimize(
                        DEFAULT_DATASET,
                        trials=1,
                        workers=2,
                        storage=f"sqlite:///{Path(tmp) / 'grid.db'}",
                        progress=progress,
                    )
                times[name].append(marks[-1] - marks[0])
                print(f"round {i + 1}, {name}: grid {times[name][-1]:.1f} s", flush=True)
    finally:
        lr_module.grid_order = grid_order
    medians = {name: statistics.median(t) for name, t in times.items()}
    before = medians["families' order"]
    print(
        f"grid on 2 workers, median of {rounds}: "
        + ", ".join(f"{name} {m:.1f} s (x{before / m:.2f})" for name, m in medians.items())
    )


def run_on_cluster(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """2 workers on two loopback nodes, the worker node with its own cache folder."""
    from tests.search import loopback  # run as python3 -m bench.workers: the root is on sys.path

    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    worker_env = dict(env, TINYTUNE_CACHE=str(folder / "worker-cache"))
    with loopback.two_nodes(folder, env, worker_env) as cluster:
        return run(2, args.trials, args.lr, args.sampler, folder, address=cluster.address)


if __name__ == "__main__":
    sys.exit(main())
