"""Small built-in networks for samples that are not images, and their pre-training.

A keyword folder (``audio:PATH``) or a sensor-window folder (``series:PATH``) has no pretrained
supernet: the search fine-tunes a network of the user's (``--supernet FILE``). Where the user has
none, ``tinytune pretrain --network NAME --dataset DATA --out FOLDER`` trains one of these on a
larger folder of theirs (other words, other machines) and writes it as a ``torch.export`` file
that the search then takes as ``--supernet FOLDER/NAME.pt2``:

* ``ds-cnn``: a depthwise-separable CNN (after Zhang et al., 2017, "Hello Edge") for a 1×H×W
  spectrogram (the 1×49×40 log-mel features of ``audio:``): a 3×3 stride-2 stem of 32 filters,
  four separable blocks (3×3 depthwise, 1×1 pointwise; 32, 48 stride 2, 48, 64 stride 2), a
  global average pool and the classifier; each convolution followed by BatchNorm and ReLU.
* ``cnn-1d``: a 1-D CNN for a C×1×T window of C channels, written with 2-D layers of 1×k
  kernels: a 1×7 stride-2 stem of 16 filters, three separable blocks (1×5 depthwise stride 2,
  1×1 pointwise; 24, 32, 48), a global average pool and the classifier.

**The recipe** (:func:`pretrain_network`): Adam at 3e-3, batches of 32 drawn in a seeded order,
``epochs`` epochs over the training split; the weights of the epoch with the best validation
accuracy (the first of equals) are kept, and their validation and test accuracy reported. No
weight is downloaded or shipped: the network is what this recipe makes of the user's folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinytune.errors import ConfigError, DataError, flag

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "BUILTIN_NETWORKS",
    "PretrainedNetwork",
    "build_network",
    "check_name",
    "pretrain_network",
    "save_network",
]

BUILTIN_NETWORKS = {
    "ds-cnn": "a DS-CNN for a 1xHxW spectrogram (audio: log-mel features)",
    "cnn-1d": "a 1-D CNN for a Cx1xT sensor window (series:)",
}
"""The built-in networks, by name, with the samples each takes."""

EPOCHS = 30
"""Epochs of pre-training unless told otherwise."""
LR = 3e-3
"""Adam's learning rate."""
BATCH = 32
"""Samples a step."""

EpochProgress = Callable[[int, int, float], None]
"""Called as ``(epoch, epochs, validation accuracy)`` after each epoch."""


def _separable(cin: int, cout: int, kernel: Any, stride: Any, padding: Any) -> list[nn.Module]:
    """A depthwise ``kernel`` convolution of ``stride``, then a 1x1 one to ``cout`` channels,
    each followed by BatchNorm and ReLU."""
    from torch import nn

    return [
        nn.Conv2d(cin, cin, kernel, stride, padding, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU(),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    ]


def _ds_cnn(shape: tuple[int, int, int], classes: int) -> nn.Module:
    from torch import nn

    def block(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
        return _separable(cin, cout, 3, stride, 1)

    return nn.Sequential(
        nn.Conv2d(shape[0], 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        *block(32, 32), *block(32, 48, 2), *block(48, 48), *block(48, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )  # fmt: skip


def _cnn_1d(shape: tuple[int, int, int], classes: int) -> nn.Module:
    from torch import nn

    def block(cin: int, cout: int) -> list[nn.Module]:
        return _separable(cin, cout, (1, 5), (1, 2), (0, 2))

    return nn.Sequential(
        nn.Conv2d(shape[0], 16, (1, 7), (1, 2), (0, 3), bias=False), nn.BatchNorm2d(16),
        nn.ReLU(), *block(16, 24), *block(24, 32), *block(32, 48),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, classes),
    )  # fmt: skip


def check_name(name: str) -> None:
    """Raises ConfigError unless ``name`` is a built-in network's."""
    if name not in BUILTIN_NETWORKS:
        known = ", ".join(BUILTIN_NETWORKS)
        raise ConfigError(f"unknown built-in network {name!r}; expected one of: {known}")


def build_network(name: str, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """The built-in network ``name`` for samples of ``shape`` (C, H, W) and ``classes``
    outputs, freshly initialised (seed torch first for a repeatable one).

    Raises:
        ConfigError: an unknown name, or samples the network does not take.
    """
    check_name(name)
    c, h, w = shape
    size = "x".join(map(str, shape))
    if name == "ds-cnn":
        if c != 1 or h < 8 or w < 8:
            raise ConfigError(
                f"ds-cnn takes a 1xHxW spectrogram of at least 8x8 (audio:), the samples are "
                f"{size}; for a sensor window (Cx1xT) use cnn-1d"
            )
        return _ds_cnn(shape, classes)
    if h != 1 or w < 16:
        raise ConfigError(
            f"cnn-1d takes a Cx1xT window of at least 16 steps (series:), the samples are "
            f"{size}; for a spectrogram (1xHxW) use ds-cnn"
        )
    return _cnn_1d(shape, classes)


@dataclass(frozen=True)
class PretrainedNetwork:
    """A built-in network trained on a data set, and what its training measured.

    Attributes:
        module: the network, in eval mode.
        name, dataset: the built-in network and the data set it was trained on.
        shape: (C, H, W) of its samples.
        class_names: its outputs' classes.
        epochs, best_epoch: the epochs trained, and the one whose weights were kept (from 1).
        val_accuracy, test_accuracy: of the weights kept.
        seed: seeds the initialisation and the batches' order.
        seconds: the wall time of the training.
    """

    module: Any
    name: str
    dataset: str
    shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    epochs: int
    best_epoch: int
    val_accuracy: float
    test_accuracy: float
    seed: int
    seconds: float

    def record(self) -> dict[str, Any]:
        """What ``<name>.json`` states beside the network's file."""
        return {
            "network": self.name,
            "dataset": self.dataset,
            "input_shape": list(self.shape),
            "class_names": list(self.class_names),
            "recipe": {"optimizer": "Adam", "lr": LR, "batch": BATCH, "epochs": self.epochs},
            "best_epoch": self.best_epoch,
            "val_accuracy": self.val_accuracy,
            "test_accuracy": self.test_accuracy,
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
        }


def pretrain_network(
    name: str,
    dataset: str,
    *,
    epochs: int = EPOCHS,
    seed: int = 0,
    progress: EpochProgress | None = None,
) -> PretrainedNetwork:
    """Train the built-in network ``name`` on the training split of ``dataset`` by the recipe
    of the module docstring.

    Raises:
        ConfigError: an unknown network, samples it does not take, or epochs below 1.
        DataError: a data set of images (they have pretrained supernets).
    """
    import torch

    from tinytune.data import SeriesDataset, get_dataset

    if not 1 <= epochs <= 1000:
        raise ConfigError(flag("epochs") + f" must lie in [1, 1000], got {epochs}")
    start = time.perf_counter()
    data = get_dataset(dataset, seed=seed)
    if not isinstance(data, SeriesDataset):
        raise DataError(
            f"data set {dataset!r} holds images; the built-in networks are for audio: and "
            "series: samples (images have pretrained supernets: 'tinytune pretrain --supernet "
            "NAME')"
        )
    shape = data.input_shape
    torch.manual_seed(seed)
    net = build_network(name, shape, data.num_classes)
    splits = data.load(data.resolution)
    best = _train(net, splits, epochs, seed, progress)
    net.load_state_dict(best.state)
    net.eval()
    return PretrainedNetwork(
        net,
        name,
        data.name,
        shape,
        tuple(data.class_names),
        epochs,
        best.epoch,
        best.val,
        _accuracy(net, splits.test),
        seed,
        time.perf_counter() - start,
    )


@dataclass
class _Best:
    epoch: int
    val: float
    state: dict[str, Any]


def _accuracy(net: nn.Module, split: Any) -> float:
    import torch

    net.eval()
    with torch.no_grad():
        predicted = net(torch.tensor(split.x)).argmax(1).numpy()
    return float((predicted == split.y).mean())


def _train(
    net: nn.Module, splits: Any, epochs: int, seed: int, progress: EpochProgress | None
) -> _Best:
    """Adam over the training split; the state of the epoch of best validation accuracy."""
    import copy

    import torch

    generator = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), LR)
    x, y = torch.tensor(splits.train.x), torch.tensor(splits.train.y)
    best = _Best(0, -1.0, {})
    for epoch in range(1, epochs + 1):
        net.train()
        order = torch.randperm(len(y), generator=generator)
        for i in range(0, len(y), BATCH):
            batch = order[i : i + BATCH]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            opt.step()
        val = _accuracy(net, splits.val)
        if val > best.val:
            best = _Best(epoch, val, copy.deepcopy(net.state_dict()))
        if progress is not None:
            progress(epoch, epochs, val)
    return best


def save_network(trained: PretrainedNetwork, folder: Path) -> Path:
    """Write ``<name>.pt2`` (``torch.export``: what ``--supernet`` takes) and ``<name>.json``
    (:meth:`PretrainedNetwork.record`, with the file's SHA-256) into ``folder``; the
    ``.pt2``'s path."""
    import torch

    from tinytune.hashing import sha256_file

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trained.name}.pt2"
    example = (torch.zeros(1, *trained.shape),)
    torch.export.save(torch.export.export(trained.module, example), str(path))
    record = trained.record() | {"file": path.name, "sha256": sha256_file(path)}
    (folder / f"{trained.name}.json").write_text(json.dumps(record, indent=2) + "\n")
    return path
