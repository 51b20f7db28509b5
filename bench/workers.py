"""Measured fine-tunes per minute with 1 and 2 local Ray workers, and where the time goes.

    python3 bench/workers.py [--trials 16] [--lr 1.6] [--workers 1 2] [--sampler random]
                             [--cluster]

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
time (start-up, the tail).

``--cluster`` adds a third setting: 2 workers on a Ray cluster of two nodes on loopback (one CPU
each, :mod:`tinytune.search.loopback`) reached with ``ray_address``, the worker node with a cache
folder of its own, so that the checkpoint reaches it through Ray's object store as it would reach
another host.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from datetime import datetime
from pathlib import Path


def run(
    workers: int, trials: int, lr: float, sampler: str, folder: Path, address: str | None = None
) -> dict[str, float]:
    import sqlalchemy as sa

    import tinytune

    url = f"sqlite:///{folder / 'workers.db'}"
    result = tinytune.optimize(
        "digits",
        trials=trials,
        lr=lr,
        workers=workers,
        storage=url,
        sampler=sampler,
        ray_address=address,
    )
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
    args = parser.parse_args(argv)
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
            f"utilisation {100 * r['utilisation']:.0f} %, tail {r['tail_s']:.1f} s",
            flush=True,
        )
    for w in (2, "cluster"):
        if 1 in rows and w in rows:
            print(f"{w if w == 'cluster' else '2 workers'} / 1 worker, fine-tunes per minute: "
                  f"{rows[w]['per_minute'] / rows[1]['per_minute']:.2f}")  # fmt: skip
    return 0


def run_on_cluster(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """2 workers on two loopback nodes, the worker node with its own cache folder."""
    from tinytune.search import loopback

    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    worker_env = dict(env, TINYTUNE_CACHE=str(folder / "worker-cache"))
    with loopback.two_nodes(folder, env, worker_env) as cluster:
        return run(2, args.trials, args.lr, args.sampler, folder, address=cluster.address)


if __name__ == "__main__":
    sys.exit(main())
