"""The device's accuracy of the exported point: a search's best point within the default budget,
its fp32 figure on the front against its training as the bundle trains it, seed by seed.

For each seed the search is that of ``bench.limit`` (the same databases in ``--out``: a seed
searched there is read, not searched again). Its front's most accurate point on validation is
trained as ``tinytune export`` measures it before writing the manifest's ``measured_int8``: int8,
batch 1, QAS, :data:`~tinytune.search.run.verify_int8.INT8_EPOCHS` epochs, the rate halved after
each, the first epoch's rate chosen on validation from
:data:`~tinytune.search.run.verify_int8.INT8_LRS`, on the same train/validation partitions as
its fp32 measurement. The gap is fp32 minus int8, on test; test is reported, never chosen on.

    python3 -m bench.folders symbols /tmp/symbols
    python3 -m bench.device_gap --dataset imagefolder:/tmp/symbols --seeds 0 1 2 3 4 \\
        [--options "--epochs 16"] [--out DIR] [--workers 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.harness import head, machine, row, write_json
from bench.limit import database, search_arguments, searched_points


def _device(job: tuple[dict[str, Any], str]) -> dict[str, Any]:
    """One point trained as the device trains it (a worker process)."""
    from tinytune import load
    from tinytune.evaluators import run_evaluation
    from tinytune.exporting import device_task

    point, storage = job
    found = load(storage=storage).candidate(point["key"])
    result = run_evaluation(device_task(found, str(found.checkpoint)))  # export's default seed
    if result.status != "ok":
        raise RuntimeError(result.error)
    return {
        "val": result.val_accuracy,
        "test": result.accuracy,
        "lr": result.details["lr"],
        "tried": result.details["tried"],
        "seconds": round(result.wall_time_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    search_arguments(parser)
    args = parser.parse_args(argv)
    points = searched_points(args)
    jobs = [(p, database(args.out, p["seed"])) for p in points]
    with ProcessPoolExecutor(args.workers) as pool:
        device = list(pool.map(_device, jobs))
    print(f"{args.dataset} {args.options or '(no options)'}; {machine()}")
    print(head(["seed", "point", "SRAM", "fp32 val / test", "int8 val / test", "lr", "gap"]))
    rows = []
    for p, d in zip(points, device, strict=True):
        gap = 100 * (p["test"] - d["test"])
        rows.append({"point": p, "int8": d, "gap_pp": gap})
        print(
            row(
                [
                    p["seed"],
                    p["scheme"],
                    f"{p['memory_bytes'] / 1024:.0f} KB",
                    f"{100 * p['val']:.1f} / {100 * p['test']:.1f}",
                    f"{100 * d['val']:.1f} / {100 * d['test']:.1f}",
                    f"{d['lr']:g}",
                    f"{gap:+.1f} pp",
                ]
            )
        )
    fp32 = statistics.median(r["point"]["test"] for r in rows)
    int8 = statistics.median(r["int8"]["test"] for r in rows)
    gaps = statistics.median(r["gap_pp"] for r in rows)
    print(
        f"median test: fp32 {100 * fp32:.1f} %, int8 {100 * int8:.1f} %; median gap {gaps:+.1f} pp"
    )
    if args.json:
        write_json(args.json, {"options": args.options, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
