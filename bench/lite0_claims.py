"""TinyTL's and MCUNetV3's claims on EfficientNet-Lite0 with its ImageNet weights, on an image
folder: accuracy chosen on validation, test reported, memory from the planner.

* **MCUNetV3's headline.** A front point within 256 KB of SRAM and the STM32F746's flash (the
  candidate key of a study's point, ``--study``/``--storage``/``--key``) against full
  fine-tuning of the *same* sub-network at the same resolution, both re-measured on
  ``--repeats`` train/validation partitions (the test split fixed) at each rate of their
  family's grid, the rate chosen on the mean validation accuracy; and against full fine-tuning
  of the *whole* Lite0 at ``--large`` px, whose peak memory is PyTorch's (fp32, every gradient
  kept to the end of the step: the planner's ``deferred`` update, tested equal to autograd's).
* **TinyTL's.** Lite residuals and biases (the ``tinytl`` preset) against full fine-tuning of
  the whole Lite0 at ``--large`` px, each with its fp32 peak memory.

    python3 -m bench.letters /tmp/letters
    tinytune search --dataset imagefolder:/tmp/letters --storage sqlite:///letters.db
    python3 -m bench.lite0_claims /tmp/letters --storage sqlite:///letters.db --key KEY
        [--large 128] [--repeats 5] [--large-repeats 2] [--full-rates 0.2 0.4 0.8]
        [--sparse-rates 0.8 1.6 3.2] [--workers 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.harness import IMAGE_NETWORK, add_arguments, head, row, write_json

NETWORK = IMAGE_NETWORK


def _measure(job: tuple[str, str, str, float, int]) -> dict[str, Any]:
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation

    candidate, checkpoint, dataset, lr, repeats = job
    r = run_evaluation(
        FinetuneTask(
            candidate=candidate,
            checkpoint=checkpoint,
            dataset=dataset,
            data_seed=0,
            finetune=FinetuneConfig(lr=lr),
            threads=1,
            repeats=repeats,
        )
    )
    if r.status != "ok":
        raise RuntimeError(r.error)
    return {"lr": lr, "val": r.val_accuracy, "test": r.accuracy, "s": r.wall_time_s}


def _memory(candidate: Any) -> dict[str, int]:
    from tinytune.evaluators.hardware import HardwareConfig, hardware_cost
    from tinytune.models import build_candidate
    from tinytune.models.ofa_adapter import build_ofa_supernet

    network = build_ofa_supernet(candidate.spec, 10)
    net = build_candidate(candidate, network, 10, calibration=[])
    fp32 = hardware_cost(net, HardwareConfig(precision="fp32", update="deferred"))[1]
    int8 = hardware_cost(net, HardwareConfig(), candidate.schedule)[1]  # as the device runs it
    return {"fp32_deferred": fp32.arena_bytes, "int8_fused": int8.arena_bytes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--key", required=True, help="the front point's candidate key")
    parser.add_argument("--study", default="tinytune")
    parser.add_argument("--large", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--large-repeats", type=int, default=2)
    parser.add_argument("--full-rates", type=float, nargs="+", default=[0.2, 0.4, 0.8])
    parser.add_argument("--sparse-rates", type=float, nargs="+", default=[0.8, 1.6, 3.2])
    parser.add_argument("--workers", type=int, default=2)
    add_arguments(parser, json=True)
    args = parser.parse_args(argv)

    from dataclasses import replace

    import tinytune
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    spec = get_supernet(NETWORK)
    checkpoint = str(pretrained_weights(spec))
    dataset = f"imagefolder:{args.folder}"
    point = tinytune.load(study=args.study, storage=args.storage).candidate(args.key).candidate
    whole = replace(default_subnet(spec, "max"), resolution=args.large)
    same = make_preset("full", spec, point.subnet)
    large = f"whole Lite0 at {args.large} px"
    full, tinytl = make_preset("full", spec, whole), make_preset("tinytl", spec, whole)
    rows = {
        "front point": (point, args.sparse_rates, args.repeats),
        "full, same sub-network": (same, args.full_rates, args.repeats),
        f"full, {large}": (full, args.full_rates, args.large_repeats),
        f"tinytl, {large}": (tinytl, args.sparse_rates, args.large_repeats),
    }
    jobs = {
        (name, lr): (c.to_json(), checkpoint, dataset, lr, repeats)
        for name, (c, grid, repeats) in rows.items()
        for lr in grid
    }
    with ProcessPoolExecutor(args.workers) as pool:
        done = dict(zip(jobs, pool.map(_measure, jobs.values()), strict=True))
    result: dict[str, Any] = {}
    for name, (c, grid, repeats) in rows.items():
        tried = [done[(name, lr)] for lr in grid]
        best = max(tried, key=lambda r: (r["val"], -r["lr"]))
        result[name] = {"candidate": c.to_dict(), "repeats": repeats, "tried": tried,
                        "chosen": best, **_memory(c)}  # fmt: skip
    print(head(["", "val / test", "rate", "repeats", "fp32 peak (PyTorch)", "int8 arena"]))
    for name, r in result.items():
        b = r["chosen"]
        print(
            row(
                [
                    name,
                    f"{100 * b['val']:.1f} / {100 * b['test']:.1f} %",
                    f"{b['lr']:g}",
                    r["repeats"],
                    f"{r['fp32_deferred'] / 1024:.0f} KB",
                    f"{r['int8_fused'] / 1024:.0f} KB",
                ]
            )
        )
    names = list(result)
    big = result[names[2]]
    for name in (names[0], names[1], names[3]):
        r = result[name]
        print(
            f"{name}: {100 * (r['chosen']['val'] - big['chosen']['val']):+.1f} / "
            f"{100 * (r['chosen']['test'] - big['chosen']['test']):+.1f} pp val / test against "
            f"{names[2]}; {big['fp32_deferred'] / r['int8_fused']:.1f}x less memory "
            f"(its int8 arena against the whole network's PyTorch fp32 peak), "
            f"{big['fp32_deferred'] / r['fp32_deferred']:.1f}x in fp32"
        )
    gap = result[names[0]]["chosen"]["val"] - result[names[1]]["chosen"]["val"]
    print(f"front point against full fine-tuning of its sub-network: {100 * gap:+.1f} pp val")
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
