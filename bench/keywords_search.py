"""A keyword network pre-trained on some words, searched on new words by new voices.

The workflow of on-device keyword learning: a depthwise-separable CNN (DS-CNN) is trained once on
a large folder (8 keywords, 60 synthesised speakers, ``bench.keywords``), exported with
``torch.export``, and the device then learns other words (6, by 20 speakers it never heard) from
a few clips each. ``tinytune.optimize`` searches how to fine-tune it for that, within 256 KB;
every figure is chosen on validation and reported on test, the test speakers held apart.

    python3 -m bench.keywords_search --out /tmp/kws --seeds 0 1 2

Prints, per seed, the pre-training's own accuracy, the search's most accurate point within the
SRAM budget and full fine-tuning of the whole network (the study's reference), each with its
training memory.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from bench.harness import add_arguments, table
from bench.keywords import make

PRETRAIN = {"speakers": 60, "takes": 2, "keywords": 8, "first": 0}
TARGET = {"speakers": 20, "takes": 2, "keywords": 6, "first": 8}
EPOCHS = 30


def ds_cnn(classes: int) -> Any:
    """A DS-CNN for 1x49x40 log-mel features: a strided stem, four separable blocks, a pool."""
    from torch import nn

    def block(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        ]

    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        *block(32, 32), *block(32, 48, 2), *block(48, 48), *block(48, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )  # fmt: skip


def pretrain(folder: Path, seed: int) -> tuple[Any, float, float]:
    """The DS-CNN trained on the folder's training split (Adam, :data:`EPOCHS` epochs); its
    validation and test accuracy."""
    import torch

    from tinytune.data import get_dataset

    data = get_dataset(f"audio:{folder}")
    splits = data.load(data.resolution)
    torch.manual_seed(seed)
    net = ds_cnn(data.num_classes)
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    x, y = torch.tensor(splits.train.x), torch.tensor(splits.train.y)
    for _ in range(EPOCHS):
        net.train()
        order = torch.randperm(len(y))
        for i in range(0, len(y), 32):
            batch = order[i : i + 32]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        val, test = (
            float((net(torch.tensor(s.x)).argmax(1).numpy() == s.y).mean())
            for s in (splits.val, splits.test)
        )
    return net, val, test


def run(out: Path, seed: int) -> dict[str, Any]:
    import torch

    import tinytune

    source, target = out / "pretrain", out / "target"
    if not source.is_dir():
        make(source, seed=100, **PRETRAIN)
    if not target.is_dir():
        make(target, seed=200, **TARGET)
    net, val, test = pretrain(source, seed)
    storage = f"sqlite:///{out / f'seed{seed}.db'}"
    result = tinytune.optimize(
        f"audio:{target}",
        supernet=net,
        example_input=torch.zeros(1, 1, 49, 40),
        study=f"kws{seed}",
        storage=storage,
        seed=seed,
        trials=8,
        inline=True,
    )
    view = tinytune.load(f"kws{seed}", storage)
    best = max(result.front, key=lambda p: p.val_accuracy or 0.0)
    full = view.reference
    return {
        "seed": seed,
        "pretrain": (val, test),
        "best": (best.scheme, best.val_accuracy, best.test_accuracy, best.memory_bytes),
        "full": None
        if full is None
        else (full.val_accuracy, full.test_accuracy, full.memory_bytes),
    }


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


HEADERS = (
    "seed",
    "pre-training (8 words) val / test",
    "best within 256 KB: scheme, val / test, SRAM",
    "full fine-tuning val / test, SRAM",
)


def _cells(r: dict[str, Any]) -> list[str]:
    scheme, val, test, memory = r["best"]
    full = r["full"]
    return [
        str(r["seed"]),
        f"{_pct(r['pretrain'][0])} / {_pct(r['pretrain'][1])} %",
        f"{scheme}, {_pct(val)} / {_pct(test)} %, {memory / 1024:.0f} KB",
        "–" if full is None else f"{_pct(full[0])} / {_pct(full[1])} %, {full[2] / 1024:.0f} KB",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = add_arguments(parser, seeds=True).parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [run(args.out, seed) for seed in args.seeds]
    print(table(HEADERS, [_cells(r) for r in rows]))
    best = [r["best"][2] for r in rows]
    full = [r["full"][1] for r in rows if r["full"] is not None]
    print(
        f"median test: best within the budget {_pct(statistics.median(best))} %, "
        f"full fine-tuning {_pct(statistics.median(full)) if full else '–'} %"
    )


if __name__ == "__main__":
    main()
