"""Accuracy at the limit: a search's best point within the default budget against full
fine-tuning of the whole EfficientNet-Lite0 at 128 px, on the same partitions, seed by seed.

For each seed, ``tinytune search`` runs as a user runs it (``--seed`` and ``--data-seed`` the
seed, the default budget, the recipe ``--options`` add; a seed whose database is in ``--out`` is
read, not searched again), and its front's most accurate point on validation (the one of less
SRAM among equals) is read with its test accuracy and memory. The reference, full fine-tuning
of the whole Lite0 at ``--large`` px with the study's stored fine-tuning settings (epochs, batch,
weight decay, augmentation), is measured on the study's data seed and train/validation
partitions at each rate of ``--rates``, the rate chosen on validation. Test is reported, never
chosen on.

    python3 -m bench.folders symbols /tmp/symbols
    python3 -m bench.limit --dataset imagefolder:/tmp/symbols --seeds 0 1 2 3 4 \\
        [--options "--augment crop-flip --epochs 16"] [--rates 0.1 0.2 0.4] [--large 128] \\
        [--out DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import IMAGE_NETWORK, add_arguments, head, machine, row, with_root, write_json


def search_point(dataset: str, seed: int, options: list[str], out: Path) -> dict[str, Any]:
    """One default search, its best point within the budget, and how the study fine-tunes (its
    stored settings, which the reference is fine-tuned with)."""
    from tinytune import load

    db = _path(out, seed)
    storage = f"sqlite:///{db}"
    argv = ["tinytune", "search", "--dataset", dataset, "--storage", storage]
    argv += ["--seed", str(seed), "--data-seed", str(seed), *options]
    start, seconds = time.perf_counter(), None
    if not db.exists():  # a finished seed's database is read again, not searched again
        done = subprocess.run(argv, env=with_root(), capture_output=True, text=True, check=False)
        seconds = round(time.perf_counter() - start, 1)
        if done.returncode != 0:
            raise SystemExit(f"seed {seed}: {done.stderr.strip().splitlines()[-1:]}")
    view = load(storage=storage)
    best = max(view.front, key=lambda p: (p.val_accuracy, -p.memory_bytes))
    settings = view.space.finetune
    if settings is None:
        raise SystemExit(f"seed {seed}: {db} records no fine-tuning settings")
    return {
        "seed": seed,
        "search_s": seconds,
        "key": best.candidate_key,
        "scheme": best.scheme,
        "val": best.val_accuracy,
        "test": best.test_accuracy,
        "memory_bytes": best.memory_bytes,
        "flash_bytes": best.flash_bytes,
        "repeats": settings.repeats or _repeats(dataset, seed),
        "recipe": {
            "epochs": settings.epochs,
            "batch_size": settings.batch_size,
            "weight_decay": settings.weight_decay,
            "augment": settings.augment,
        },
        "candidate": view.candidate(best.candidate_key).candidate.to_dict(),
    }


def _repeats(dataset: str, seed: int) -> int:
    """The train/validation partitions a search of ``dataset`` measures on by default."""
    from tinytune.data import get_dataset, val_repeats

    return val_repeats(get_dataset(dataset, seed=seed).split_sizes()[1])


def _reference(job: tuple[str, int, int, float, int, dict[str, Any]]) -> dict[str, Any]:
    """Full fine-tuning of the whole network at one rate on the seed's partitions."""
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    dataset, seed, large, lr, repeats, recipe = job
    spec = get_supernet(IMAGE_NETWORK)
    whole = make_preset("full", spec, replace(default_subnet(spec, "max"), resolution=large))
    result = run_evaluation(
        FinetuneTask(
            candidate=whole.to_json(),
            checkpoint=str(pretrained_weights(spec)),
            dataset=dataset,
            data_seed=seed,
            finetune=FinetuneConfig(lr=lr, seed=seed, **recipe),
            threads=1,
            repeats=repeats,
        )
    )
    if result.status != "ok":
        raise RuntimeError(result.error)
    return {"seed": seed, "lr": lr, "val": result.val_accuracy, "test": result.accuracy}


def _path(out: Path, seed: int) -> Path:
    return out / f"limit-{seed}.db"


def database(out: Path, seed: int) -> str:
    """The storage URL of a seed's search in ``out``."""
    return f"sqlite:///{_path(out, seed)}"


def search_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the seeds' searches (shared with ``bench.device_gap``)."""
    parser.add_argument("--options", default="", help="added to every search, e.g. '--epochs 16'")
    parser.add_argument("--out", type=Path, default=Path("/tmp/limit"))
    parser.add_argument("--workers", type=int, default=2)
    add_arguments(parser, dataset=True, seeds=True, json=True)


def searched_points(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each seed's best point, searched now unless its database is in ``--out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    options = shlex.split(args.options)
    return [search_point(args.dataset, s, options, args.out) for s in args.seeds]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.1, 0.2, 0.4])
    parser.add_argument("--large", type=int, default=128)
    search_arguments(parser)
    args = parser.parse_args(argv)
    points = searched_points(args)
    jobs = [
        (args.dataset, p["seed"], args.large, lr, p["repeats"], p["recipe"])
        for p in points
        for lr in args.rates
    ]
    with ProcessPoolExecutor(args.workers) as pool:
        tried = list(pool.map(_reference, jobs))
    print(f"{args.dataset} {args.options or '(no options)'}; {machine()}")
    print(head(["seed", "best point val / test", "SRAM", "scheme", "full, whole Lite0", "gap"]))
    rows = []
    for p in points:
        ref = max((r for r in tried if r["seed"] == p["seed"]), key=lambda r: (r["val"], -r["lr"]))
        rows.append({"point": p, "reference": ref, "gap_pp": 100 * (ref["test"] - p["test"])})
        print(
            row(
                [
                    p["seed"],
                    f"{100 * p['val']:.1f} / {100 * p['test']:.1f}",
                    f"{p['memory_bytes'] / 1024:.0f} KB",
                    p["scheme"],
                    f"{100 * ref['val']:.1f} / {100 * ref['test']:.1f} (lr {ref['lr']:g})",
                    f"{rows[-1]['gap_pp']:+.1f} pp",
                ]
            )
        )
    median = statistics.median(r["point"]["test"] for r in rows)
    reference = statistics.median(r["reference"]["test"] for r in rows)
    print(
        f"median test: best point {100 * median:.1f} %, full fine-tuning {100 * reference:.1f} %"
    )
    if args.json:
        write_json(args.json, {"options": args.options, "rows": rows, "tried": tried})
    return 0


if __name__ == "__main__":
    sys.exit(main())
