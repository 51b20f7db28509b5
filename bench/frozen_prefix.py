"""Fine-tunes per minute with a frozen prefix computed once against the whole network run at
every step, side by side in one process (one torch thread), on EfficientNet-Lite0 and an image
folder.

Each scheme is fine-tuned both ways in alternating order, ``--rounds`` times; the table gives
the median wall time of each way, their ratio and the accuracies (identical both ways: the
prefix's arithmetic is the same, computed once).

    python3 -m bench.letters /tmp/letters
    python3 -m bench.frozen_prefix /tmp/letters [--resolution 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path

from bench.harness import IMAGE_NETWORK, head, row

SCHEMES = ("last", "bias-only", "mcunetv3", "tinytl", "full")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--resolution", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--network", default=IMAGE_NETWORK)
    args = parser.parse_args(argv)

    import torch

    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.data import get_dataset
    from tinytune.evaluators import FinetuneConfig
    from tinytune.evaluators.task import network_on_data
    from tinytune.models import load_supernet
    from tinytune.spaces import SubnetConfig, default_subnet, get_supernet, make_preset

    finetune_module = importlib.import_module("tinytune.evaluators.finetune")
    torch.set_num_threads(1)
    spec = get_supernet(args.network)
    network = load_supernet(spec, ensure_checkpoint(spec))
    dataset = get_dataset(f"imagefolder:{args.folder}")
    splits = dataset.load(args.resolution)
    subnet = SubnetConfig(args.resolution, default_subnet(spec).stages)
    limit = finetune_module.PREFIX_CACHE_BYTES
    print(f"{spec.name}, {args.resolution} px, {len(splits.train)} training images, 8 epochs")
    print(
        head(
            [
                "scheme",
                "frozen prefix",
                "once: median s",
                "every step: median s",
                "ratio",
                "val / test",
            ]
        )
    )
    for name in SCHEMES:
        candidate = make_preset(name, spec, subnet)
        times: dict[bool, list[float]] = {True: [], False: []}
        results = set()
        for r in range(args.rounds):
            for once in (True, False) if r % 2 == 0 else (False, True):
                finetune_module.PREFIX_CACHE_BYTES = limit if once else 0
                net, _ = network_on_data(candidate, network, splits, dataset.num_classes, 0)
                result = finetune_module.finetune(net, splits, FinetuneConfig(lr=1.6))
                times[once].append(result.wall_time_s)
                results.add((round(result.val_accuracy, 4), round(result.accuracy, 4)))
        finetune_module.PREFIX_CACHE_BYTES = limit
        once, every = statistics.median(times[True]), statistics.median(times[False])
        accuracy = " / ".join(f"{100 * a:.1f} %" for a in sorted(results)[0])
        same = "" if len(results) == 1 else " (differ)"
        print(
            row(
                [
                    name,
                    f"{net.frozen_prefix()} of {len(net.stages())}",
                    f"{once:.2f}",
                    f"{every:.2f}",
                    f"{every / once:.2f}×",
                    f"{accuracy}{same}",
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
