"""The learning-rate grid over seeds and train/validation partitions: how much of a study's
choice of rate, and of the accuracy it then reports, is the split's and the seed's noise.

    python3 -m bench.lr_grid [--seeds 0 1 2 3 4] [--partitions 3] [--epochs 8 ...]
        [--families classifier bias sparse full] [--json OUT] [--from-json IN]
        [--write docs/bench/lr-grid.md [--section lr-grid]]

For each seed and each family of :data:`tinytune.search.run.lr_grid.FAMILIES`, the family's preset
on the default sub-network is fine-tuned at each rate of its grid exactly as a study's grid
fine-tunes it (digits, the shipped checkpoint, batch 32, one thread), on ``--partitions``
train/validation partitions (:func:`tinytune.data.repeated`: partition 0 is the one a study
measures on; the test split is the same for all). The rate is then chosen by each of these
rules, and the test accuracy of the partition-0 fine-tune at the chosen rate (what the study
would report) is given with its median and range over the seeds:

* ``partition 0``: the study's own rule (:func:`tinytune.search.run.lr_grid.choose`) on
  partition 0;
* ``mean of k``: the same rule on the mean validation accuracy of partitions 0 to k-1 (a grid
  measured on k partitions, k times its cost);
* ``one SE``: the smallest rate whose partition-0 validation accuracy is within one binomial
  standard error of the best (Breiman's one-standard-error rule, applied to the rate).

The table also gives, per family, the test accuracy at each fixed rate (median over seeds, and
the mean over the partitions' fine-tunes), for comparison. With several ``--epochs``, a table
per length, then one more: each family's rate and length chosen together on partition 0's
validation (the best; on a tie the fewer epochs, then the smaller rate), against each length's
own choice of rate. ``--write`` replaces the text
between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` (``--section NAME``, default
``lr-grid``). About 15 to 20 minutes on two cores for five seeds and three partitions at 8
epochs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.harness import (
    DEFAULT_DATASET,
    DEFAULT_SUPERNET,
    add_arguments,
    head,
    read_json,
    write_json,
)
from bench.harness import row as table_row
from bench.markers import write_section

SUPERNET = DEFAULT_SUPERNET
DATASET = DEFAULT_DATASET

# One fine-tune at one rate: its validation and test accuracy on each partition.
Grid = Mapping[float, Mapping[str, Sequence[float]]]


def measure(job: tuple[int, str, float, int, int]) -> dict[str, Any]:
    """Fine-tune the family's preset at one rate on each partition, as a study's grid does."""
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation
    from tinytune.search.run.lr_grid import FAMILIES
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    seed, family, lr, partitions, epochs = job
    spec = get_supernet(SUPERNET)
    candidate = make_preset(FAMILIES[family].preset, spec, default_subnet(spec))
    result = run_evaluation(
        FinetuneTask(
            candidate=candidate.to_json(),
            checkpoint=str(shipped_checkpoint(spec)),
            dataset=DATASET,
            data_seed=0,
            finetune=FinetuneConfig(lr=lr, seed=seed, epochs=epochs),
            repeats=partitions,
            threads=1,
        )
    )
    if result.status != "ok":
        raise SystemExit(f"seed {seed}, {family} at {lr}: {result.error}")
    details = result.details
    return {
        "seed": seed,
        "family": family,
        "lr": lr,
        "epochs": epochs,
        "val": details.get("val_accuracies", [result.val_accuracy]),
        "test": details.get("test_accuracies", [result.accuracy]),
        "wall_time_s": result.wall_time_s,
    }


def mean_of(k: int) -> Callable[[Grid], float]:
    """The rule that chooses on the mean validation accuracy of the first ``k`` partitions,
    by the study's own rule (best, the smaller rate on a tie)."""
    from tinytune.evaluators import EvaluationResult
    from tinytune.search.run.lr_grid import choose

    def rule(grid: Grid) -> float:
        results = {
            lr: EvaluationResult("ok", val_accuracy=statistics.fmean(r["val"][:k]))
            for lr, r in grid.items()
        }
        return choose("bench", results, default=min(grid)).lr

    return rule


def one_se(grid: Grid, n_val: int) -> float:
    """The smallest rate whose partition-0 validation accuracy is within one binomial standard
    error (of the best's, on ``n_val`` images) of the best."""
    best = max(r["val"][0] for r in grid.values())
    se = math.sqrt(best * (1.0 - best) / n_val)
    return min(lr for lr, r in grid.items() if r["val"][0] >= best - se - 1e-12)


def rules(partitions: int, n_val: int) -> dict[str, Callable[[Grid], float]]:
    """The rules compared, by name."""
    named: dict[str, Callable[[Grid], float]] = {"partition 0 (the study's)": mean_of(1)}
    for k in range(2, partitions + 1):
        named[f"mean of {k} partitions"] = mean_of(k)
    named["one SE (partition 0)"] = lambda grid: one_se(grid, n_val)
    return named


def grids(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, dict[float, Any]]]:
    """``family -> seed -> lr -> row``, the families in the order of
    :data:`tinytune.search.run.lr_grid.FAMILIES`."""
    from tinytune.search.run.lr_grid import FAMILIES

    out: dict[str, dict[int, dict[float, Any]]] = {}
    for family in FAMILIES:
        for row in rows:
            if row["family"] == family:
                out.setdefault(family, {}).setdefault(row["seed"], {})[row["lr"]] = row
    return out


def _pct(values: Sequence[float]) -> str:
    return (
        f"{100 * statistics.median(values):.1f} ({100 * min(values):.1f}–{100 * max(values):.1f})"
    )


def summary(data: Mapping[str, Any]) -> str:
    """The markdown section: per family, each rule's chosen rates and the reported test
    accuracy over the seeds, and each fixed rate's."""
    rows, n_val = data["rows"], data["n_val"]
    partitions = min(len(r["val"]) for r in rows)
    named = rules(partitions, n_val)
    every = sorted({r["seed"] for r in rows})
    lines = [
        f"{len(every)} seeds ({', '.join(map(str, every))}), {partitions} train/validation "
        f"partitions, {data['epochs']} epochs, digits ({n_val} validation images); test "
        "accuracy of the partition-0 fine-tune at the chosen rate, median (range) over the seeds:",
        "",
        head(
            [
                "family",
                "rule or rate",
                "rate per seed",
                "test, reported",
                "test, mean of partitions",
            ]
        ),
    ]
    for family, by_seed in grids(rows).items():
        seeds = sorted(by_seed)  # a family's own (merged measurements may differ)
        for name, rule in named.items():
            chosen = [rule(by_seed[s]) for s in seeds]
            reported = [by_seed[s][lr]["test"][0] for s, lr in zip(seeds, chosen, strict=True)]
            means = [
                statistics.fmean(by_seed[s][lr]["test"][:partitions])
                for s, lr in zip(seeds, chosen, strict=True)
            ]
            rates = " ".join(f"{lr:g}" for lr in chosen)
            lines.append(table_row([family, name, rates, _pct(reported), _pct(means)]))
        for lr in sorted(by_seed[seeds[0]]):
            reported = [by_seed[s][lr]["test"][0] for s in seeds]
            means = [statistics.fmean(by_seed[s][lr]["test"][:partitions]) for s in seeds]
            lines.append(table_row([family, f"fixed {lr:g}", "", _pct(reported), _pct(means)]))
    return "\n".join(lines)


def chosen_pair(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Of one seed's fine-tunes of a family at several rates and lengths, the one with the best
    partition-0 validation accuracy; on a tie the fewer epochs, then the smaller rate (the
    study's rule for its rate, with the cheaper length first)."""
    return max(rows, key=lambda r: (r["val"][0], -r["epochs"], -r["lr"]))


def length_summary(data: Mapping[str, Any]) -> str:
    """The markdown table of each family's rate and length chosen together on partition 0,
    against each length's own choice of rate: per seed the choice, and the partition-0
    validation and test accuracy at it (median and range over the seeds)."""
    from tinytune.search.run.lr_grid import FAMILIES

    rows = data["rows"]
    lengths = sorted({r["epochs"] for r in rows})
    every = sorted({r["seed"] for r in rows})
    lines = [
        f"{len(every)} seeds ({', '.join(map(str, every))}), {' and '.join(map(str, lengths))} "
        "epochs, partition 0; the rate, or the rate and the length, chosen on its validation "
        "(on a tie the fewer epochs, then the smaller rate), median (range) over the seeds:",
        "",
        head(["family", "chosen among", "rate / epochs per seed", "validation", "test, reported"]),
    ]
    pools = [(f"the rates at {e} epochs", (e,)) for e in lengths]
    pools.append(("the rates and the lengths", tuple(lengths)))
    for family in FAMILIES:
        by_seed: dict[int, list[Mapping[str, Any]]] = {}
        for row in rows:
            if row["family"] == family:
                by_seed.setdefault(row["seed"], []).append(row)
        seeds = sorted(by_seed)
        for label, allowed in pools:
            pooled = [[r for r in by_seed[s] if r["epochs"] in allowed] for s in seeds]
            chosen = [chosen_pair(rows) for rows in pooled if rows]  # the seeds measured so
            if not chosen:
                continue
            pairs = " ".join(f"{r['lr']:g}/{r['epochs']}" for r in chosen)
            val = _pct([r["val"][0] for r in chosen])
            test = _pct([r["test"][0] for r in chosen])
            lines.append(table_row([family, label, pairs, val, test]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tinytune.search.run.lr_grid import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(
        parser,
        seeds=True,
        json=True,
        from_json="one",
        write="one",
        help={
            "json": "write the measurements here",
            "from_json": "summarise earlier measurements",
            "write": "replace a section of this file",
        },
    )
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--epochs", type=int, nargs="+", default=[8])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--section", default="lr-grid", help="the section's name")
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    from tinytune.options import MAX_EPOCHS

    if not all(1 <= epochs <= MAX_EPOCHS for epochs in args.epochs):
        parser.error(f"--epochs: every length must lie in [1, {MAX_EPOCHS}], got {args.epochs}")
    if args.from_json:
        data = read_json(args.from_json)
        for row in data["rows"]:  # files of one length once kept it only beside the rows
            row.setdefault("epochs", data["epochs"])
    else:
        from tinytune.data import get_dataset

        jobs = [
            (seed, family, lr, args.partitions, epochs)
            for family in args.families
            for seed in args.seeds
            for epochs in sorted(set(args.epochs))
            for lr in FAMILIES[family].grid
        ]
        rows = []
        with ProcessPoolExecutor(args.workers) as pool:
            for row in pool.map(measure, jobs):
                rows.append(row)
                print(
                    f"seed {row['seed']} {row['family']} {row['lr']:g}, {row['epochs']} epochs: "
                    "val "
                    + " ".join(f"{100 * v:.1f}" for v in row["val"])
                    + ", test "
                    + " ".join(f"{100 * v:.1f}" for v in row["test"]),
                    flush=True,
                )
        n_val = len(get_dataset(DATASET, seed=0).load(8).val)
        lengths = sorted(set(args.epochs))
        data = {
            "epochs": lengths[0] if len(lengths) == 1 else lengths,
            "n_val": n_val,
            "rows": rows,
        }
        if args.json:
            write_json(args.json, data)
    lengths = sorted({row["epochs"] for row in data["rows"]})
    if len(lengths) == 1:
        text = summary(data)
    else:  # a table per length, then the rate and the length chosen together
        tables = [
            summary({**data, "epochs": e, "rows": [r for r in data["rows"] if r["epochs"] == e]})
            for e in lengths
        ]
        text = "\n\n".join([*tables, length_summary(data)])
    print(text)
    if args.write:
        write_section(args.write, args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
