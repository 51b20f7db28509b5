"""A keyword network pre-trained on some words, searched on new words by new voices.

The workflow of on-device keyword learning: a depthwise-separable CNN (DS-CNN) is trained once on
a large folder (8 keywords, 60 synthesised speakers, ``bench.keywords``) as ``tinytune pretrain
--network ds-cnn`` trains it, and the device then learns other words (6, by 20 speakers it
never heard) from a few clips each. ``tinytune.optimize`` searches how to fine-tune it for that,
within 256 KB; every figure is chosen on validation and reported on test, the test speakers
held apart (:mod:`bench.transfer`).

    python3 -m bench.keywords_search --out /tmp/kws --seeds 0 1 2

Prints, per seed, the pre-training's own accuracy, the search's most accurate point within the
SRAM budget and full fine-tuning of the whole network (the study's reference), each with its
training memory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.harness import add_arguments
from bench.keywords import make
from bench.transfer import pretrain, report, search

PRETRAIN = {"speakers": 60, "takes": 2, "keywords": 8, "first": 0}
TARGET = {"speakers": 20, "takes": 2, "keywords": 6, "first": 8}


def run(out: Path, seed: int) -> dict[str, Any]:
    source, target = out / "pretrain", out / "target"
    if not source.is_dir():
        make(source, seed=100, **PRETRAIN)
    if not target.is_dir():
        make(target, seed=200, **TARGET)
    net, val, test = pretrain("ds-cnn", f"audio:{source}", seed)
    found = search(f"audio:{target}", net, (1, 49, 40), out, f"kws{seed}", seed)
    return found | {"pretrain": (val, test)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = add_arguments(parser, seeds=True).parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(report([run(args.out, seed) for seed in args.seeds], "8 words"))


if __name__ == "__main__":
    main()
