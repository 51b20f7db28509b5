"""Measured accuracy: fine-tune a candidate's network on the target data and evaluate it on
held-out data.

The optimiser is what the device runs: plain SGD without momentum (MCUNetV3 trains with
"SGD + QAS without momentum"), with a cosine learning-rate decay. Convolution weights learn at
0.3 times the rate of biases, scales and the classifier, and the gradient norm is clipped:
without BatchNorm to steady it, a folded network fine-tuned in full diverges at rates that suit
bias-only schemes. The data order is drawn from a seeded generator. Accuracy is top-1 on the
test split, which training never sees; the validation accuracy is reported beside it.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinytune.data import Split, Splits
from tinytune.errors import ConfigError, Flag, OptionError
from tinytune.models import TrainNet
from tinytune.units import check_integer, check_real, check_seed

__all__ = ["MAX_EPOCHS", "FinetuneConfig", "FinetuneResult", "accuracy", "finetune"]

MAX_EPOCHS = 1000
"""The most epochs a fine-tune may run: twenty times the 50 that TinyTL and MCUNetV3 fine-tune
for. A time budget is checked between fine-tunes, so one of a mistyped length (``--epochs
80000000``) would run past it for days."""


@dataclass(frozen=True)
class FinetuneConfig:
    """How a candidate is fine-tuned."""

    epochs: int = 8
    batch_size: int = 32
    lr: float = 0.2
    weight_lr_scale: float = 0.3
    clip_norm: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        # the options of a search name these fields (tinytune.options): errors name them so
        check_integer(self.epochs, Flag("epochs"))
        check_integer(self.batch_size, Flag("batch_size"))
        check_real(self.lr, Flag("lr"))
        check_real(self.weight_lr_scale, "weight_lr_scale")
        if self.clip_norm is not None:
            check_real(self.clip_norm, "clip_norm")
        if not 1 <= self.epochs <= MAX_EPOCHS:
            raise OptionError("epochs", f"must lie in [1, {MAX_EPOCHS}], got {self.epochs}")
        if self.batch_size < 1:
            raise OptionError("batch_size", f"must be >= 1, got {self.batch_size}")
        if not 0.0 < self.weight_lr_scale <= 1.0:
            raise ConfigError(f"weight_lr_scale {self.weight_lr_scale} is out of range (0, 1]")
        if not 0.0 < self.lr < 10.0:
            raise OptionError("lr", f"must lie in (0, 10), got {self.lr}")
        check_seed(self.seed, "the fine-tuning seed")

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class FinetuneResult:
    """Measured top-1 accuracies (fractions) and the cost of measuring them."""

    accuracy: float
    val_accuracy: float
    train_loss: float
    wall_time_s: float
    steps: int


@torch.no_grad()
def accuracy(net: nn.Module, split: Split, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``net`` on ``split``."""
    correct = 0
    for i in range(0, len(split), batch_size):
        x = torch.tensor(split.x[i : i + batch_size])
        y = torch.tensor(split.y[i : i + batch_size])
        correct += int((net(x).argmax(dim=1) == y).sum())
    return correct / max(1, len(split))


PREFIX_CACHE_BYTES = 2 << 30
"""The most memory the outputs of a frozen prefix may take for one fine-tune (all three
splits); a larger set is run through the whole network at every step instead."""


@torch.no_grad()
def _prefix_outputs(
    net: TrainNet, x: np.ndarray, n: int, device: str | torch.device, batch_size: int = 256
) -> Tensor:
    return torch.cat(
        [
            net.prefix(torch.tensor(x[i : i + batch_size]).to(device), n)
            for i in range(0, len(x), batch_size)
        ]
    )


def _prefix_fits(net: TrainNet, splits: Splits, n: int, device: str | torch.device) -> bool:
    with torch.no_grad():
        one = net.prefix(torch.tensor(splits.train.x[:1]).to(device), n)
    images = len(splits.train) + len(splits.val) + len(splits.test)
    return one.numel() * one.element_size() * images <= PREFIX_CACHE_BYTES


@torch.no_grad()
def _accuracy(model: Callable[[Tensor], Tensor], x: Tensor, y: np.ndarray) -> float:
    labels = torch.tensor(y).to(x.device)
    correct = 0
    for i in range(0, len(x), 256):
        correct += int((model(x[i : i + 256]).argmax(dim=1) == labels[i : i + 256]).sum())
    return correct / max(1, len(x))


def finetune(
    net: nn.Module, splits: Splits, config: FinetuneConfig, device: str | torch.device = "cpu"
) -> FinetuneResult:
    """Train the parameters of ``net`` that require a gradient, then measure it.

    Where the update scheme leaves a prefix of a :class:`TrainNet` frozen (the stem and the
    first blocks: no weight, bias, scale or lite residual trained), its output for each image
    is computed once and the rest of the network trains on it: the same arithmetic (frozen
    folded convolutions, no augmentation) without repeating it every epoch.

    Args:
        net: the network, moved to ``device`` (and left there).
        splits: the data; each split goes to ``device`` once, as one tensor indexed per batch.
        config: how to train.
        device: where to train (``"cpu"``, ``"cuda"``); the data order is drawn on the CPU
            either way, so only the arithmetic differs between devices.
    """
    start = time.perf_counter()
    net.to(device)
    params = [p for p in net.parameters() if p.requires_grad]
    weights = [
        p for n, p in net.named_parameters() if p.requires_grad and n.endswith("weight_train")
    ]
    weight_ids = {id(w) for w in weights}
    others = [p for p in params if id(p) not in weight_ids]
    groups = [{"params": others, "base_lr": config.lr}]
    if weights:
        groups.append({"params": weights, "base_lr": config.lr * config.weight_lr_scale})
    opt = torch.optim.SGD(groups, lr=config.lr, momentum=0.0)
    rng = np.random.default_rng(config.seed)
    n = len(splits.train)
    per_epoch = math.ceil(n / config.batch_size)
    total = per_epoch * config.epochs
    step = 0
    losses: list[Tensor] = []
    cut = net.frozen_prefix() if isinstance(net, TrainNet) else 0
    model: Callable[[Tensor], Tensor] = net
    if cut and _prefix_fits(net, splits, cut, device):
        train_x, val_x, test_x = (
            _prefix_outputs(net, s.x, cut, device) for s in (splits.train, splits.val, splits.test)
        )
        model = functools.partial(net.forward_from, n=cut)
    else:
        train_x, val_x, test_x = (
            torch.tensor(s.x).to(device) for s in (splits.train, splits.val, splits.test)
        )
    train_y = torch.tensor(splits.train.y).to(device)
    net.train()
    for _ in range(config.epochs):
        order = torch.from_numpy(rng.permutation(n)).to(device)  # one move an epoch
        for i in range(0, n, config.batch_size):
            idx = order[i : i + config.batch_size]
            x = train_x[idx]  # (B, 3, R, R), or the prefix's (B, C, H, W)
            y = train_y[idx]
            for group in opt.param_groups:
                group["lr"] = 0.5 * group["base_lr"] * (1 + math.cos(math.pi * step / total))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, config.clip_norm)
            opt.step()
            losses.append(loss.detach())  # read back once, after training
            step += 1
    net.eval()
    val = _accuracy(model, val_x, splits.val.y)
    test = _accuracy(model, test_x, splits.test.y)
    tail = [float(loss) for loss in losses[-per_epoch:]]
    return FinetuneResult(
        accuracy=test,
        val_accuracy=val,
        train_loss=float(np.mean(tail)) if tail else float("nan"),
        wall_time_s=time.perf_counter() - start,
        steps=step,
    )
