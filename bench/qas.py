"""Device accuracy against the search's float32 accuracy, with and without QAS.

For each preset on the default sub-network of ``ofa-proxyless-w0.35`` (the shipped checkpoint)
and ``digits``: the search's float32 fine-tune (batch 32, 8 epochs, each family's rate from the
search's grid, chosen on validation), and the device's training — int8, batch 1, the integer
step that the bundle's C step matches bit for bit
(:func:`tinytune.evaluators.device.int8_finetune`) — with QAS and without it, over a grid of
per-image learning rates, each chosen on validation and its test accuracy reported.

    python3 bench/qas.py [--presets last bias-only mcunetv3] [--epochs 2]
        [--lrs 0.0125 0.05] [--json OUT]

One torch thread. The integer step runs in the simulator (tens of ms an image), so a preset
takes minutes per rate and epoch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["last", "bias-only", "mcunetv3"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lrs", nargs="+", type=float, default=[0.0125, 0.05])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch

    from tinytune.checkpoints import ensure_checkpoint
    from tinytune.data import get_dataset
    from tinytune.evaluators import FinetuneConfig, run_evaluation
    from tinytune.evaluators.device import int8_finetune
    from tinytune.evaluators.task import network_on_data
    from tinytune.models import load_supernet
    from tinytune.quant import quantize
    from tinytune.search.lr import FAMILIES, family_of
    from tinytune.spaces import get_supernet, make_preset

    torch.set_num_threads(1)
    spec = get_supernet("ofa-proxyless-w0.35")
    checkpoint = ensure_checkpoint(spec)
    supernet = load_supernet(spec, checkpoint)
    rows: dict[str, Any] = {}
    for preset in args.presets:
        candidate = make_preset(preset, spec)
        splits = get_dataset("digits").load(candidate.subnet.resolution)
        fp32 = []
        for lr in FAMILIES[family_of(candidate, spec)].grid:
            r = run_evaluation(
                {
                    "candidate": candidate.to_json(),
                    "checkpoint": str(checkpoint),
                    "dataset": "digits",
                    "data_seed": 0,
                    "finetune": FinetuneConfig(lr=lr).to_dict(),
                    "threads": 1,
                }
            )
            fp32.append({"lr": lr, "val": r["val_accuracy"], "test": r["accuracy"]})
        row: dict[str, Any] = {"fp32": max(fp32, key=lambda t: t["val"]), "fp32_tried": fp32}
        net, calib = network_on_data(candidate, supernet, splits, 10, 0)
        base = quantize(net, calib)
        from tinytune.evaluators.device import int8_accuracy

        row["int8_before"] = {
            "val": int8_accuracy(base, splits.val),
            "test": int8_accuracy(base, splits.test),
        }
        for qas in (True, False):
            tried = []
            for lr in args.lrs:
                start = time.perf_counter()
                result = int8_finetune(base.clone(), splits, epochs=args.epochs, lr=lr, qas=qas)
                tried.append(
                    {
                        "lr": lr,
                        "val": result.val_accuracy,
                        "test": result.accuracy,
                        "s": round(time.perf_counter() - start, 1),
                    }
                )
                print(f"{preset} qas={qas} {tried[-1]}", flush=True)
            key = "int8_qas" if qas else "int8_no_qas"
            row[key] = max(tried, key=lambda t: t["val"])
            row[key + "_tried"] = tried
        rows[preset] = row
        print(f"{preset}: {json.dumps({k: v for k, v in row.items() if 'tried' not in k})}")
    print("\npreset      fp32 val/test     int8+QAS val/test   int8 no QAS val/test")
    for preset, row in rows.items():
        cells = [
            f"{100 * row[k]['val']:.1f} / {100 * row[k]['test']:.1f}"
            for k in ("fp32", "int8_qas", "int8_no_qas")
        ]
        print(f"{preset:10s}  " + "   ".join(f"{c:17s}" for c in cells))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
