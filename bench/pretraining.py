"""How well a pre-trained supernet transfers to ``digits``: a linear probe and fine-tunes.

For each checkpoint, on the default sub-network of the search (``default_subnet``: the smallest,
at the middle resolution) and the data set's own stratified split:

* **linear probe**: multinomial logistic regression (scikit-learn, L2, features standardised on
  the training split) on the globally pooled features, its inverse regularisation C chosen on
  validation from a small grid; BatchNorm statistics are re-estimated on training images and
  folded first, as the search builds every candidate;
* **fine-tunes** with the project's own evaluator (``run_evaluation``) for the ``full`` and the
  ``last`` (classifier-only) presets, over a grid of learning rates and epochs; the setting with
  the best validation accuracy is chosen and its test accuracy reported (ties: the earlier one
  in the grid).

    python3 -m bench.pretraining CHECKPOINT [CHECKPOINT ...] [--labels old new]
        [--full-lr 0.1 0.2 0.4] [--last-lr 0.2 0.5 1.0] [--epochs 8 16] [--half-check] [--json OUT]

One torch thread; the whole run for one checkpoint takes minutes on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import DEFAULT_DATASET, DEFAULT_SUPERNET, add_arguments, write_json


def probe(checkpoint: Path, seed: int = 0) -> dict[str, Any]:
    """Linear-probe validation and test accuracy of the default sub-network's pooled features."""
    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from tinytune.data import get_dataset
    from tinytune.evaluators.task import network_on_data
    from tinytune.models import load_supernet
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(DEFAULT_SUPERNET)
    candidate = make_preset("last", spec)
    splits = get_dataset(DEFAULT_DATASET, seed=seed).load(candidate.subnet.resolution)
    net, _ = network_on_data(candidate, load_supernet(spec, checkpoint), splits, 10, seed)
    net.eval()

    @torch.no_grad()
    def features(x: np.ndarray) -> np.ndarray:
        h = net.prefix(torch.tensor(x), len(net.stages()))  # what reaches the classifier
        return h.flatten(1).numpy()

    scaler = StandardScaler().fit(features(splits.train.x))
    f_train, f_val, f_test = (
        scaler.transform(features(s.x)) for s in (splits.train, splits.val, splits.test)
    )
    best: dict[str, Any] = {}
    for c in (0.01, 0.1, 1.0, 10.0):
        clf = LogisticRegression(C=c, max_iter=3000).fit(f_train, splits.train.y)
        val = float(clf.score(f_val, splits.val.y))
        if not best or val > best["val"]:
            best = {"C": c, "val": val, "test": float(clf.score(f_test, splits.test.y))}
    best["dim"] = int(f_train.shape[1])
    return best


def half_check(checkpoint: Path, seed: int = 0) -> dict[str, float]:
    """How far a float16 round trip of the checkpoint moves the default sub-network: the
    largest change of its pooled features on digits' test split (relative to their largest
    magnitude) and the share of test images whose linear-probe prediction is unchanged."""
    import tempfile

    import torch

    from tinytune.data import get_dataset
    from tinytune.evaluators.task import network_on_data
    from tinytune.models import load_supernet, save_supernet
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(DEFAULT_SUPERNET)
    candidate = make_preset("last", spec)
    splits = get_dataset(DEFAULT_DATASET, seed=seed).load(candidate.subnet.resolution)
    full = load_supernet(spec, checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "half.pt"
        save_supernet(full, spec, None, path, half=True)
        half = load_supernet(spec, path)
    outs = []
    for supernet in (full, half):
        net, _ = network_on_data(candidate, supernet, splits, 10, seed)
        net.eval()
        with torch.no_grad():
            outs.append(net(torch.tensor(splits.test.x)))
    delta = float((outs[0] - outs[1]).abs().max() / outs[0].abs().max())
    same = float((outs[0].argmax(1) == outs[1].argmax(1)).float().mean())
    return {"max_relative_change": delta, "same_prediction": same}


def finetunes(
    checkpoint: Path, preset: str, lrs: list[float], epochs: list[int], seed: int = 0
) -> dict[str, Any]:
    """The ``preset`` fine-tuned with every (lr, epochs); the validation-best one reported."""
    from tinytune.evaluators import FinetuneConfig, FinetuneTask, run_evaluation
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet(DEFAULT_SUPERNET)
    candidate = make_preset(preset, spec)
    tried = []
    for n_epochs in epochs:
        for lr in lrs:
            config = FinetuneConfig(epochs=n_epochs, batch_size=16, lr=lr, seed=seed)
            result = run_evaluation(
                FinetuneTask(
                    candidate=candidate.to_json(),
                    checkpoint=str(checkpoint),
                    dataset=DEFAULT_DATASET,
                    data_seed=seed,
                    finetune=config,
                    threads=1,
                )
            )
            if result.status != "ok":
                raise RuntimeError(result.error)
            tried.append(
                {
                    "lr": lr,
                    "epochs": n_epochs,
                    "val": result.val_accuracy,
                    "test": result.accuracy,
                    "s": round(result.wall_time_s, 1),
                }
            )
            print(f"  {preset:5s} lr {lr:<5g} epochs {n_epochs:<3d} {tried[-1]}", flush=True)
    best = max(tried, key=lambda t: t["val"])  # max keeps the first of equals
    return {"best": best, "tried": tried}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--labels", nargs="+")
    parser.add_argument("--full-lr", nargs="+", type=float, default=[0.1, 0.2, 0.4])
    parser.add_argument("--last-lr", nargs="+", type=float, default=[0.2, 0.5, 1.0])
    parser.add_argument("--epochs", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--no-finetune", action="store_true", help="linear probe only")
    parser.add_argument("--presets", nargs="+", default=["full", "last"], choices=["full", "last"])
    parser.add_argument(
        "--half-check", action="store_true", help="also measure a float16 round trip's effect"
    )
    add_arguments(parser, json=True, help={"json": "write the results here"})
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    labels = args.labels or [p.name for p in args.checkpoints]
    results = {}
    for label, path in zip(labels, args.checkpoints, strict=True):
        start = time.perf_counter()
        print(f"{label}: {path}", flush=True)
        entry: dict[str, Any] = {"checkpoint": str(path), "probe": probe(path)}
        print(f"  probe {entry['probe']}", flush=True)
        if args.half_check:
            entry["half"] = half_check(path)
            print(f"  float16 round trip {entry['half']}", flush=True)
        if not args.no_finetune:
            for preset in args.presets:
                lrs = args.full_lr if preset == "full" else args.last_lr
                entry[preset] = finetunes(path, preset, lrs, args.epochs)
        entry["wall_s"] = round(time.perf_counter() - start, 1)
        results[label] = entry
    print(
        "\ncheckpoint         probe val/test    full val/test (lr, ep)    last val/test (lr, ep)"
    )
    for label, e in results.items():
        row = f"{label:18s} {e['probe']['val']:.3f}/{e['probe']['test']:.3f}"
        for preset in ("full", "last"):
            if preset in e:
                b = e[preset]["best"]
                row += f"      {b['val']:.3f}/{b['test']:.3f} ({b['lr']:g}, {b['epochs']})"
        print(row)
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
