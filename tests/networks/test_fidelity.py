"""tinytune's fp32 fine-tune of an imported network is a plain PyTorch loop training the same
parameters of the user's own module: the same data order, seed, rates and clipping give the
same losses and the same trained parameters. BatchNorm keeps its running statistics (the
module in eval mode, dropout off), so a folded bias trains as the BatchNorm's β does."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.networks.zoo import MobileNetV2, SmallV3, export, randomise_bn
from tinytune.data import Split, Splits, get_dataset
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.models import ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.spaces import get_supernet, make_preset

SIZE = 32
CONFIG = FinetuneConfig(epochs=2, batch_size=32, lr=0.05, seed=3)


@pytest.fixture(scope="module")
def digits() -> Splits:
    splits = get_dataset("digits").load(SIZE)
    keep = 256  # a quarter of the training split: 8 steps an epoch
    train = Split(np.asarray(splits.train.x)[:keep], splits.train.y[:keep])
    return Splits(train, splits.val, splits.test)


def _reference(module: nn.Module, trained: list[nn.Parameter], splits: Splits) -> list[float]:
    """The losses of a plain PyTorch loop over ``trained``: FinetuneConfig's data order (a
    permutation an epoch from the seed), cosine rate per step, gradient clipping, SGD."""
    cfg = CONFIG
    opt = torch.optim.SGD(trained, lr=cfg.lr, momentum=0.0)
    rng = np.random.default_rng(cfg.seed)
    x, y = torch.tensor(splits.train.x), torch.tensor(splits.train.y)
    n = len(y)
    total, step, losses = math.ceil(n / cfg.batch_size) * cfg.epochs, 0, []
    module.eval()  # BatchNorm on its running statistics, dropout off
    for _ in range(cfg.epochs):
        order = torch.from_numpy(rng.permutation(n))
        for i in range(0, n, cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            for group in opt.param_groups:
                group["lr"] = 0.5 * cfg.lr * (1 + math.cos(math.pi * step / total))
            loss = F.cross_entropy(module(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, cfg.clip_norm)
            opt.step()
            losses.append(float(loss))
            step += 1
    return losses


def _fine_tuned(path: Path, preset: str, splits: Splits) -> tuple[nn.Module, float, float]:
    spec = get_supernet(str(path))
    net = build_candidate(
        make_preset(preset, spec), ImportedNetwork(read_network(str(path))), 10, [], seed=7
    )
    head = copy.deepcopy(net.classifier)
    result = finetune(net, splits, CONFIG)
    return head, result.train_loss, result.accuracy


@pytest.mark.parametrize(
    ("network", "head_name"), [("mobilenetv2", "classifier.1"), ("smallv3", "fc")]
)
@pytest.mark.parametrize("preset", ["last", "bias-only"])
def test_a_fine_tune_is_the_plain_pytorch_loop_on_the_users_module(
    network: str, head_name: str, preset: str, digits: Splits, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    module = MobileNetV2(0.35, stages=4) if network == "mobilenetv2" else SmallV3()
    module = randomise_bn(module)
    export(module, tmp_path / "net.pt2", SIZE)
    head, loss, accuracy = _fine_tuned(tmp_path / "net.pt2", preset, digits)

    # the user's module with the same new classifier, training what the preset trains
    old: nn.Linear = module.get_submodule(head_name)
    new = nn.Linear(old.in_features, 10)
    new.weight.data, new.bias.data = head.weight.detach().clone(), head.bias.detach().clone()
    parent, _, leaf = head_name.rpartition(".")
    setattr(module.get_submodule(parent) if parent else module, leaf, new)
    for p in module.parameters():
        p.requires_grad_(False)
    trained = [new.weight, new.bias]
    if preset == "bias-only":  # every convolution's bias: its BatchNorm's β where it has one
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d) or (isinstance(m, nn.Conv2d) and m.bias is not None):
                trained.append(m.bias)
    for p in trained:
        p.requires_grad_(True)
    losses = _reference(module, trained, digits)
    per_epoch = math.ceil(len(digits.train) / CONFIG.batch_size)
    assert loss == pytest.approx(float(np.mean(losses[-per_epoch:])), abs=1e-4)
    with torch.no_grad():
        x, y = torch.tensor(digits.test.x), torch.tensor(digits.test.y)
        reference_accuracy = float((module(x).argmax(1) == y).float().mean())
    assert accuracy == pytest.approx(reference_accuracy, abs=1.5 / len(y))
