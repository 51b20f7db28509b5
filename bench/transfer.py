"""What the benchmarks of a user's own network share: pre-train it on one folder, then search
how to fine-tune it on another (new classes, new speakers or machines) and report the search's
most accurate point within the SRAM budget beside full fine-tuning of the whole network.

Every figure is chosen on validation and reported on test; the test split's sources (speakers,
machines) are never seen in training, since the data set holds each source in one split.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import add_arguments, table


@dataclass(frozen=True)
class Transfer:
    """One benchmark: the folders its generator ``make(out, seed=..., **folder)`` writes, the
    data kind they are read as (``audio`` or ``series``), the built-in network pre-trained on
    the first and its samples' ``shape``, and what the pre-training learns, in words."""

    make: Callable[..., int]
    pretrain: dict[str, int]
    target: dict[str, int]
    kind: str
    network: str
    shape: tuple[int, ...]
    study: str
    learned: str

    def run(self, out: Path, seed: int) -> dict[str, Any]:
        """Pre-train on the first folder, search the second (each written once into ``out``);
        the search's best point, full fine-tuning and the pre-training's own accuracy."""
        source, target = out / "pretrain", out / "target"
        if not source.is_dir():
            self.make(source, seed=100, **self.pretrain)
        if not target.is_dir():
            self.make(target, seed=200, **self.target)
        net, val, test = pretrain(self.network, f"{self.kind}:{source}", seed)
        found = search(f"{self.kind}:{target}", net, self.shape, out, f"{self.study}{seed}", seed)
        return found | {"pretrain": (val, test)}

    def main(self, doc: str) -> None:
        """The command line of a benchmark script whose module docstring is ``doc``."""
        parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
        parser.add_argument("--out", type=Path, required=True)
        args = add_arguments(parser, seeds=True).parse_args()
        args.out.mkdir(parents=True, exist_ok=True)
        print(report([self.run(args.out, seed) for seed in args.seeds], self.learned))


def pretrain(network: str, dataset: str, seed: int) -> tuple[Any, float, float]:
    """The built-in ``network`` trained on ``dataset`` as ``tinytune pretrain --network`` trains
    it (:func:`tinytune.builtin_networks.pretrain_network`: 30 epochs, the best on validation
    kept); its validation and test accuracy."""
    from tinytune.builtin_networks import pretrain_network

    trained = pretrain_network(network, dataset, seed=seed)
    return trained.module, trained.val_accuracy, trained.test_accuracy


def search(
    dataset: str, net: Any, shape: tuple[int, ...], out: Path, study: str, seed: int
) -> dict[str, Any]:
    """``tinytune.optimize`` of ``net`` (input ``shape``) on ``dataset`` with the default
    options but 8 measured fine-tunes, inline; its most accurate front point (chosen on
    validation) and the study's reference (full fine-tuning)."""
    import torch

    import tinytune

    storage = f"sqlite:///{out / f'{study}.db'}"
    result = tinytune.optimize(
        dataset,
        supernet=net,
        example_input=torch.zeros(1, *shape),
        study=study,
        storage=storage,
        seed=seed,
        trials=8,
        inline=True,
    )
    best = max(result.front, key=lambda p: p.val_accuracy or 0.0)
    full = tinytune.load(study, storage).reference
    return {
        "seed": seed,
        "best": (best.scheme, best.val_accuracy, best.test_accuracy, best.memory_bytes),
        "full": None
        if full is None
        else (full.val_accuracy, full.test_accuracy, full.memory_bytes),
    }


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def report(rows: list[dict[str, Any]], source: str) -> str:
    """The table of the runs (``source``: what the pre-training learned, e.g. ``8 words``) and
    the median test accuracies."""
    headers = (
        "seed",
        f"pre-training ({source}) val / test",
        "best within 256 KB: scheme, val / test, SRAM",
        "full fine-tuning val / test, SRAM",
    )
    cells = []
    for r in rows:
        scheme, val, test, memory = r["best"]
        full = r["full"]
        cells.append(
            [
                str(r["seed"]),
                f"{_pct(r['pretrain'][0])} / {_pct(r['pretrain'][1])} %",
                f"{scheme}, {_pct(val)} / {_pct(test)} %, {memory / 1024:.0f} KB",
                "–"
                if full is None
                else f"{_pct(full[0])} / {_pct(full[1])} %, {full[2] / 1024:.0f} KB",
            ]
        )
    best = [r["best"][2] for r in rows]
    full = [r["full"][1] for r in rows if r["full"] is not None]
    return (
        table(headers, cells)
        + f"\nmedian test: best within the budget {_pct(statistics.median(best))} %, "
        + f"full fine-tuning {_pct(statistics.median(full)) if full else '–'} %"
    )
