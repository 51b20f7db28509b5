"""The built-in families through the op graph give the numbers of the fixed stem → blocks →
head network they went through before (``TrainNet``, recorded from it at commit bcc3ed9 with
these very calls): the hardware model's arena, flash and predicted step, a seeded fine-tune's
accuracies and loss, and the int8 simulator's first training steps, on the default network,
EfficientNet-Lite0 cut after 3 and 4 stages, an OFA MobileNetV3 (squeeze-and-excitation,
h-swish, a head after the pool) and an MCUNet-zoo config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.test_config_networks import write_zoo_network
from tinytune.checkpoints import shipped_checkpoint
from tinytune.data import get_dataset
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels import get_device
from tinytune.models import build_candidate, load_supernet
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.models.pretrained import pretrained_weights
from tinytune.quant import quantize, train_step
from tinytune.spaces import Candidate, SubnetConfig, default_subnet, get_supernet, make_preset

# (network, stages kept at 64 px or None for the default sub-network, preset):
# (arena bytes, flash bytes, predicted step s on an STM32F746)
HARDWARE = {
    ("proxyless", None, "last"): (30760, 228530, 0.019460858738050674),
    ("proxyless", None, "bias-only"): (44664, 267610, 0.0902984081310343),
    ("proxyless", None, "mcunetv3"): (56936, 265658, 0.0473981673610752),
    ("proxyless", None, "tinytl"): (77732, 333354, 0.1398825698828348),
    ("proxyless", None, "full"): (246906, 292482, 0.1558732040108209),
    ("lite0", 3, "tinytl"): (244264, 467242, 1.1898725119671973),
    ("lite0", 3, "mcunetv3"): (164168, 374642, 0.32919606950607355),
    ("lite0", 4, "bias-only"): (183272, 914642, 0.9936343886847993),
    ("mbv3", None, "tinytl"): (303907, 2638302, 0.5656997604425965),
    ("mbv3", None, "mcunetv3"): (205208, 2431446, 0.22067557510468602),
    ("zoo", None, "tinytl"): (193672, 233914, 1.3385522141927502),
    ("zoo", None, "mcunetv3"): (108712, 152370, 0.3230236231558026),
    ("zoo", None, "full"): (604904, 174530, 0.978403346359419),
}
# validation and test accuracy, mean training loss of one epoch on digits (lr 0.05, seed 2;
# one torch thread, as every test runs)
FINETUNE = {
    ("proxyless", None, "tinytl"): (0.6100278551532033, 0.5821727019498607, 2.0399961085880505),
    ("lite0", 3, "mcunetv3"): (0.3788300835654596, 0.3732590529247911, 2.2180603427045487),
    ("mbv3", None, "tinytl"): (0.17270194986072424, 0.18662952646239556, 2.2633147800669953),
}
# the losses of four int8 steps (images 0-3 of digits' training split, labels 0-3, lr 0.01)
INT8_LOSSES = {
    ("proxyless", None, "tinytl"): (
        2.310166094084886, 2.1501224378987365, 2.232439087954202, 2.308613821137303
    ),
    ("lite0", 3, "mcunetv3"): (
        7.644845839996386, 31.92000961325909, 60.08727666735649, 31.9512852281468
    ),
    ("mbv3", None, "tinytl"): (
        2.270280296147514, 2.2531342349663026, 2.2823006226603235, 2.264608156769642
    ),
    ("zoo", None, "tinytl"): (
        2.3482755451729616, 2.4033072960391406, 2.333653342116382, 2.2479821282483496
    ),
}  # fmt: skip
NAMES = {
    "proxyless": "ofa-proxyless-w0.35",
    "lite0": "efficientnet-lite0",
    "mbv3": "ofa-mbv3-w1.0",
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_zoo_network(tmp_path_factory.mktemp("zoo"))


def _candidate(key: tuple[str, int | None, str], zoo: tuple[Path, Path]) -> Candidate:
    name, stages, preset = key
    spec = get_supernet(str(zoo[0]) if name == "zoo" else NAMES[name])
    if stages is None:
        return make_preset(preset, spec)
    return make_preset(preset, spec, SubnetConfig(64, default_subnet(spec, "max").stages[:stages]))


def _supernet(name: str, candidate: Candidate, zoo: tuple[Path, Path]) -> torch.nn.Module:
    spec = candidate.spec
    if name == "zoo":
        return load_supernet(spec, zoo[1])
    if name == "mbv3":
        return build_ofa_supernet(spec, 1000, seed=0)
    path = pretrained_weights(spec) if spec.fixed else shipped_checkpoint(spec)
    return load_supernet(spec, path)


def _network(key: tuple[str, int | None, str], zoo: tuple[Path, Path]):  # type: ignore[no-untyped-def]
    candidate = _candidate(key, zoo)
    splits = get_dataset("digits").load(candidate.subnet.resolution)
    calibration = [torch.tensor(splits.train.x[:16], dtype=torch.float32)]
    net = build_candidate(candidate, _supernet(key[0], candidate, zoo), 10, calibration, seed=4)
    return net, splits


@pytest.mark.parametrize("key", list(HARDWARE), ids=lambda k: f"{k[0]}/{k[1]}/{k[2]}")
def test_the_hardware_model_prices_each_candidate_as_before(
    key: tuple[str, int | None, str], zoo: tuple[Path, Path]
) -> None:
    candidate = _candidate(key, zoo)
    cost = HardwareEvaluator(candidate.spec, 10, HardwareConfig(), get_device("stm32f746"))(
        candidate
    )
    assert (cost.arena_bytes, cost.flash_bytes, cost.latency_s) == HARDWARE[key]


@pytest.mark.parametrize("key", list(FINETUNE), ids=lambda k: f"{k[0]}/{k[2]}")
def test_a_seeded_fine_tune_is_as_before(
    key: tuple[str, int | None, str], zoo: tuple[Path, Path]
) -> None:
    net, splits = _network(key, zoo)
    result = finetune(net, splits, FinetuneConfig(epochs=1, lr=0.05, seed=2))
    val, test, loss = FINETUNE[key]
    assert (result.val_accuracy, result.accuracy) == (val, test)
    assert result.train_loss == pytest.approx(loss, abs=1e-6)


@pytest.mark.parametrize("key", list(INT8_LOSSES), ids=lambda k: f"{k[0]}/{k[2]}")
def test_the_int8_steps_are_as_before(
    key: tuple[str, int | None, str], zoo: tuple[Path, Path]
) -> None:
    net, splits = _network(key, zoo)
    x = torch.tensor(splits.train.x[:4], dtype=torch.float32)
    quantized = quantize(net, [x])
    images = quantized.quantize_input(x)
    losses = [train_step(quantized, images[i : i + 1], i, 0.01).loss for i in range(4)]
    assert losses == pytest.approx(INT8_LOSSES[key], abs=1e-9)
