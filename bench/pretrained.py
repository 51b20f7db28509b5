"""EfficientNet-Lite0 with its ImageNet weights, measured: what it costs where it is cut, how
its photographs classify, and which BatchNorm statistics transfer.

    python3 -m bench.pretrained costs                    # seconds
    python3 -m bench.pretrained photos                   # seconds
    python3 -m bench.letters /tmp/letters
    python3 -m bench.pretrained statistics /tmp/letters  # minutes on two cores
    python3 -m bench.pretrained cuts /tmp/letters        # about 15 minutes on two cores
    python3 -m bench.pretrained depth /tmp/letters       # minutes on two cores
    python3 -m bench.pretrained padding /tmp/letters     # about 10 minutes on two cores
    python3 -m bench.m7_instructions --sample 8 --supernet efficientnet-lite0 --out lite0-m7.json
    python3 -m bench.pretrained latency lite0-m7.json     # the built-in profile's error

* ``costs``: peak training SRAM (int8, batch 1, the bundle's fused updates), flash (weights and
  the engine's code) and the STM32F746's predicted step latency of each preset at each cut and
  input resolution.
* ``photos``: the ImageNet class and probability of the photographs scikit-image ships, with
  symmetric padding (the ``ofa`` network that holds the weights) and with TensorFlow's "SAME"
  padding that the weights were trained with and tinytune's training network pads with (the
  reference implementation, ``efficientnet_lite_pytorch``, a test dependency; the training
  network gives its logits, ``tests/models/test_pretrained.py``).
* ``statistics``: each family's preset fine-tuned on an image folder (the default
  sub-network, rates 0.4 and 1.6, 8 epochs, two train/validation partitions), once with the
  ImageNet BatchNorm statistics folded and once with statistics re-estimated on 256 training
  images, as tinytune does for a supernet's sub-networks.
* ``cuts``: the sparse MCUNetV3-style preset and full fine-tuning at a few cuts and
  resolutions around 256 KB, each at two rates of its family's grid, on two partitions, the
  peak SRAM beside: how the default sub-network was chosen.
* ``depth``: Once-for-All's elastic depth taken without retraining: the sparse preset on the
  default sub-network with the last block of none, one, two or three of its stages left out,
  fine-tuned as the search does (rates 0.8 and 1.6, two partitions).
* ``padding``: the linear probe (``last``) and the sparse update (``mcunetv3``) of the default
  cut at 64 and 128 px, and the linear probe of the whole network at 128 px, with the stride-2
  convolutions padded symmetrically (k // 2 on each side) and as TensorFlow's "SAME" that the
  weights were trained with (tinytune's padding); each at its family's three rates on five
  train/validation partitions, the rate chosen on validation, the test split fixed.
* ``latency``: the STM32F746's built-in profile of the bundle's kernels (fitted on
  ``ofa-proxyless-w0.35`` bundles) against Lite0 bundles' instruction counts under QEMU.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import replace
from pathlib import Path

from bench.harness import DEFAULT_DEVICE, IMAGE_NETWORK, head, row

NETWORK = IMAGE_NETWORK
PRESETS = ("last", "bias-only", "mcunetv3", "tinytl", "full")


def costs() -> None:
    from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.spaces import SubnetConfig, default_subnet, get_supernet, make_preset

    spec = get_supernet(NETWORK)
    budget = 256 * 1024
    evaluator = HardwareEvaluator(spec, 10, HardwareConfig(), get_device(DEFAULT_DEVICE), budget)
    whole = default_subnet(spec, "max").stages
    rows, patched = [], []
    for stages in spec.stage_counts:
        last = sum(spec.stage_max_depth[:stages])
        for resolution in (48, 64, 96, 128, 160):
            cells, fitted = [], []
            for name in PRESETS:
                candidate = make_preset(name, spec, SubnetConfig(resolution, whole[:stages]))
                cost = evaluator(candidate)
                cells.append(
                    f"{cost.arena_bytes / 1024:.0f} / {cost.flash_bytes / 1024:.0f} / "
                    f"{1000 * (cost.latency_s or 0):.0f}"
                )
                scheduled = evaluator.schedule(candidate)
                if not scheduled.schedule.patched:
                    fitted.append("whole" if cost.arena_bytes <= budget else "–")
                    continue
                p = evaluator(scheduled)
                over = (p.latency_s or 0) / (cost.latency_s or 1) - 1
                mark = "" if p.arena_bytes <= budget else " (over)"
                fitted.append(
                    f"{p.arena_bytes / 1024:.0f}{mark} / {1000 * (p.latency_s or 0):.0f} "
                    f"(+{100 * over:.0f} %), {scheduled.schedule.patches}:"
                    f"{scheduled.schedule.blocks}"
                )
            rows.append(row([f"block {last}", resolution, *cells]))
            patched.append(row([f"block {last}", resolution, *fitted]))
    print("Whole images: SRAM KB / flash KB / step ms on the STM32F746, 10 classes")
    print(head(["cut after", "px", *PRESETS]))
    print("\n".join(rows))
    print()
    print(
        "Patch by patch where whole images exceed 256 KB (--patches auto): SRAM KB / step ms "
        "(recomputation), N:B"
    )
    print(head(["cut after", "px", *PRESETS]))
    print("\n".join(patched))


def photos() -> None:
    import numpy as np
    import torch
    from efficientnet_lite_pytorch import EfficientNet
    from PIL import Image
    from skimage import data

    from tinytune.models import load_supernet
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import get_supernet

    spec = get_supernet(NETWORK)
    symmetric = load_supernet(spec, pretrained_weights(spec)).eval()
    print(head(["photo", "px", "symmetric padding", "TensorFlow's SAME (tinytune's)"]))
    for resolution in (224, 128):
        reference = EfficientNet.from_name(NETWORK, image_size=resolution)
        reference.load_state_dict(torch.load(pretrained_weights(spec), weights_only=True))
        reference.eval()
        for name in ("chelsea", "coffee", "astronaut", "rocket"):
            image = Image.fromarray(getattr(data, name)()).convert("RGB")
            image = image.resize((resolution, resolution), Image.BILINEAR)
            x = torch.tensor(np.asarray(image), dtype=torch.float32).permute(2, 0, 1)[None]
            x = (x / 255.0 - 0.5) / 0.5
            with torch.no_grad():
                cells = []
                for net in (symmetric, reference):
                    p = net(x).softmax(dim=1)[0]
                    cells.append(f"class {int(p.argmax())}, p = {float(p.max()):.2f}")
            print(row([name, resolution, *cells]))


def statistics(folder: Path) -> None:
    import statistics as stats

    import torch

    from tinytune.data import get_dataset, repeated
    from tinytune.evaluators import FinetuneConfig
    from tinytune.evaluators.finetune import finetune
    from tinytune.evaluators.task import CALIBRATION_SAMPLES
    from tinytune.models import build_candidate, load_supernet
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import default_subnet, get_supernet, make_preset

    torch.set_num_threads(1)
    spec = get_supernet(NETWORK)
    network = load_supernet(spec, pretrained_weights(spec))
    subnet = default_subnet(spec)
    dataset = get_dataset(f"imagefolder:{folder}")
    loaded = dataset.load(subnet.resolution)
    print(f"default sub-network ({subnet.resolution} px, cut after block 7), mean of 2 partitions")
    print(head(["preset", "statistics", "val / test at 0.4", "val / test at 1.6"]))
    for name in ("last", "bias-only", "mcunetv3"):
        candidate = make_preset(name, spec, subnet)
        for label, recalibrate in (("ImageNet (tinytune)", False), ("re-estimated", True)):
            cells = []
            for lr in (0.4, 1.6):
                runs = []
                for repeat in range(2):
                    splits = repeated(loaded, repeat, 0)
                    calibration = torch.tensor(splits.train.x[:CALIBRATION_SAMPLES]).split(64)
                    net = build_candidate(
                        candidate, network, dataset.num_classes, calibration, 0, recalibrate
                    )
                    runs.append(finetune(net, splits, FinetuneConfig(lr=lr)))
                val = stats.mean(r.val_accuracy for r in runs)
                test = stats.mean(r.accuracy for r in runs)
                cells.append(f"{100 * val:.1f} / {100 * test:.1f}")
            print(row([name, label, *cells]), flush=True)


def _sram_and_accuracy(candidate: object, folder: Path, lr: float) -> tuple[str, str]:
    """The cells ``peak SRAM`` and ``val / test`` of a candidate fine-tuned as the search does (two
    partitions, one torch thread)."""
    import torch

    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation
    from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import get_supernet

    torch.set_num_threads(1)
    spec = get_supernet(NETWORK)
    evaluator = HardwareEvaluator(
        spec, 10, HardwareConfig(), get_device(DEFAULT_DEVICE), 256 * 1024
    )  # scheduled as the search schedules it (patch by patch where whole images exceed 256 KB)
    scheduled = evaluator.schedule(candidate)  # type: ignore[arg-type]
    patches = scheduled.schedule
    result = run_evaluation(
        FinetuneTask(
            candidate=candidate.to_json(),  # type: ignore[attr-defined]
            checkpoint=str(pretrained_weights(spec)),
            dataset=f"imagefolder:{folder}",
            data_seed=0,
            finetune=FinetuneConfig(lr=lr),
            threads=1,
            repeats=2,
        )
    )
    where = f" ({patches.patches}:{patches.blocks})" if patches.patched else ""
    return (
        f"{evaluator(scheduled).arena_bytes / 1024:.0f} KB{where}",
        f"{100 * result.val_accuracy:.1f} / {100 * result.accuracy:.1f}",
    )


def _cut_job(job: tuple[Path, int, int, str, float]) -> str:
    from tinytune.spaces import SubnetConfig, default_subnet, get_supernet, make_preset

    folder, resolution, stages, name, lr = job
    spec = get_supernet(NETWORK)
    subnet = SubnetConfig(resolution, default_subnet(spec, "max").stages[:stages])
    last = sum(spec.stage_max_depth[:stages])
    cells = _sram_and_accuracy(make_preset(name, spec, subnet), folder, lr)
    return row([f"block {last}", resolution, name, f"{lr:g}", *cells])


def _depth_job(job: tuple[Path, tuple[int, ...], float]) -> str:
    from tinytune.spaces import StageConfig, default_subnet, get_supernet, make_preset

    folder, dropped, lr = job
    spec = get_supernet(NETWORK)
    subnet = default_subnet(spec)
    stages = tuple(
        StageConfig(stage.ks[:-1], stage.e[:-1]) if s in dropped else stage
        for s, stage in enumerate(subnet.stages)
    )
    candidate = make_preset("mcunetv3", spec, replace(subnet, stages=stages))
    left_out = ", ".join(f"stage {s}" for s in dropped) or "none"
    blocks = sum(subnet.depths) - len(dropped) + 1
    return row([left_out, blocks, f"{lr:g}", *_sram_and_accuracy(candidate, folder, lr)])


def depth(folder: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    jobs = [
        (folder, dropped, lr) for dropped in ((), (2,), (1, 2), (0, 1, 2)) for lr in (0.8, 1.6)
    ]
    print(head(["last block left out of", "blocks", "rate", "peak SRAM", "val / test"]))
    with ProcessPoolExecutor(2) as pool:
        for line in pool.map(_depth_job, jobs):
            print(line, flush=True)


PADDING_RATES = (0.8, 1.6, 3.2)  # the search's grid of the classifier and sparse families
PADDING_PARTITIONS = 5


def _padding_job(job: tuple[Path, str, int, bool, bool, float]) -> tuple[float, float]:
    """Mean validation and test accuracy over the partitions of one preset at one rate, the
    stride-2 convolutions padded "SAME" or symmetrically."""
    import statistics as stats

    import torch

    from tinytune.data import get_dataset, repeated
    from tinytune.evaluators import FinetuneConfig
    from tinytune.evaluators.finetune import finetune
    from tinytune.models import build_candidate
    from tinytune.models.layers import SAME
    from tinytune.spaces import SubnetConfig, default_subnet, make_preset

    folder, name, resolution, whole, same, lr = job
    torch.set_num_threads(1)
    spec, network = _lite0()
    stages = default_subnet(spec, "max" if whole else "min").stages
    candidate = make_preset(name, spec, SubnetConfig(resolution, stages))
    loaded = get_dataset(f"imagefolder:{folder}").load(resolution)
    runs = []
    for repeat in range(PADDING_PARTITIONS):
        net = build_candidate(candidate, network, 10, calibration=[], seed=0)
        if not same:
            for conv in net.convs():
                if conv.padding == SAME:
                    conv.padding = conv.kernel_size // 2
        runs.append(finetune(net, repeated(loaded, repeat, 0), FinetuneConfig(lr=lr)))
    return stats.mean(r.val_accuracy for r in runs), stats.mean(r.accuracy for r in runs)


@functools.cache
def _lite0() -> tuple[object, object]:
    from tinytune.models import load_supernet
    from tinytune.models.pretrained import pretrained_weights
    from tinytune.spaces import get_supernet

    spec = get_supernet(NETWORK)
    return spec, load_supernet(spec, pretrained_weights(spec))


def padding(folder: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    settings = [
        (name, resolution, whole)
        for name, resolution, whole in (
            ("last", 64, False),
            ("mcunetv3", 64, False),
            ("last", 128, False),
            ("mcunetv3", 128, False),
            ("last", 128, True),
        )
    ]
    jobs = [
        (folder, name, resolution, whole, same, lr)
        for name, resolution, whole in settings
        for same in (False, True)
        for lr in PADDING_RATES
    ]
    with ProcessPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(_padding_job, jobs), strict=True))
    print(f"mean of {PADDING_PARTITIONS} partitions at the rate best on validation")
    print(head(["preset", "cut after", "px", "padding", "rate", "val / test"]))
    for name, resolution, whole in settings:
        for same in (False, True):
            scores = {
                lr: results[(folder, name, resolution, whole, same, lr)] for lr in PADDING_RATES
            }
            lr = max(PADDING_RATES, key=lambda r: scores[r][0])  # the first of equals
            val, test = scores[lr]
            print(
                row(
                    [
                        name,
                        "block 15 + head" if whole else "block 7",
                        resolution,
                        "SAME" if same else "symmetric",
                        f"{lr:g}",
                        f"{100 * val:.1f} / {100 * test:.1f}",
                    ]
                )
            )


def latency(path: Path) -> None:
    from tinytune.hwmodels import PRECISIONS, predict_latency
    from tinytune.hwmodels.measurements import load_measurements
    from tinytune.hwmodels.registry import get_device

    device = get_device(DEFAULT_DEVICE)
    width = PRECISIONS[device.precision].activation
    file = load_measurements(path)
    print(head(["network", "measured ms", "predicted ms", "error"]))
    errors = []
    for m in file.measurements:
        predicted = predict_latency(m.graph, device.coefficients, width).train_step_s
        errors.append(predicted / m.train_step_s - 1)
        print(
            row(
                [
                    m.name,
                    f"{1000 * m.train_step_s:.1f}",
                    f"{1000 * predicted:.1f}",
                    f"{100 * errors[-1]:+.1f} %",
                ]
            )
        )
    magnitudes = sorted(abs(e) for e in errors)
    print(
        f"{len(errors)} bundles: median |error| {100 * magnitudes[len(magnitudes) // 2]:.1f} %, "
        f"largest {100 * magnitudes[-1]:.1f} %"
    )


def cuts(folder: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    jobs = [
        (folder, resolution, stages, name, lr)
        for resolution, stages in ((64, 3), (48, 4), (80, 3), (64, 4), (80, 4))
        for name, rates in (("mcunetv3", (1.6, 3.2)), ("full", (0.4, 0.8)))
        for lr in rates
    ]
    print(head(["cut after", "px", "preset", "rate", "peak SRAM", "val / test"]))
    with ProcessPoolExecutor(2) as pool:
        for line in pool.map(_cut_job, jobs):
            print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("costs")
    sub.add_parser("photos")
    for name in ("statistics", "cuts", "depth", "padding"):
        sub.add_parser(name).add_argument("folder", type=Path)
    sub.add_parser("latency").add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.what == "costs":
        costs()
    elif args.what == "photos":
        photos()
    elif args.what == "cuts":
        cuts(args.folder)
    elif args.what == "depth":
        depth(args.folder)
    elif args.what == "padding":
        padding(args.folder)
    elif args.what == "latency":
        latency(args.file)
    else:
        statistics(args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
