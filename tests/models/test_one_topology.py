"""The built-in families through the op graph give the numbers of the fixed stem → blocks →
head network they went through before (``TrainNet``, recorded from it at commit bcc3ed9 with
these very calls): the hardware model's arena, flash and predicted step, and the built
network's logits, on the default network, EfficientNet-Lite0 cut after 3 and 4 stages, an OFA
MobileNetV3 (squeeze-and-excitation, h-swish, a head after the pool) and an MCUNet-zoo config.
A fine-tune's or an int8 step's numbers are not recorded: they round differently on another
processor (one validation image of a seeded fine-tune; an int8 rounding that flips)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.test_config_networks import write_zoo_network
from tinytune.checkpoints import shipped_checkpoint
from tinytune.data import get_dataset
from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels import get_device
from tinytune.models import build_candidate, load_supernet
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.models.pretrained import pretrained_weights
from tinytune.spaces import Candidate, SubnetConfig, default_subnet, get_supernet, make_preset

# (network, stages kept at 64 px or None for the default sub-network, preset):
# (arena bytes, flash bytes, predicted step s on an STM32F746); the arenas as TrainNet gave
# them, the flash and the step with today's engine code estimate and Cortex-M7 profile
HARDWARE = {
    ("proxyless", None, "last"): (30760, 233650, 0.01875995364762852),
    ("proxyless", None, "bias-only"): (44664, 272730, 0.0903351118788364),
    ("proxyless", None, "mcunetv3"): (56936, 270778, 0.0432452102848641),
    ("proxyless", None, "tinytl"): (77732, 338474, 0.13881876288668188),
    ("proxyless", None, "full"): (246906, 297602, 0.13074040092437422),
    ("lite0", 3, "tinytl"): (244264, 472362, 1.32921061025755),
    ("lite0", 3, "mcunetv3"): (164168, 379762, 0.4405292081639655),
    ("lite0", 4, "bias-only"): (183272, 919762, 1.2236874669623865),
    ("mbv3", None, "tinytl"): (303907, 2643422, 0.5886886991761168),
    ("mbv3", None, "mcunetv3"): (205208, 2436566, 0.22368003553694812),
    ("zoo", None, "tinytl"): (193672, 239034, 1.4151646028599483),
    ("zoo", None, "mcunetv3"): (108712, 157490, 0.3820887470671053),
    ("zoo", None, "full"): (604904, 179650, 1.1066116847846108),
}
# float64 logits of the built network (BatchNorm re-estimated on 16 images and folded, a new
# classifier seeded 4) on digits' training images 0 and 7, recorded from ``TrainNet`` at bcc3ed9
LOGITS_IMAGES = [0, 7]
LOGITS = {
    ("proxyless", None, "tinytl"): (
        (0.0397232483, 0.21482759, 0.0570530824, 0.13541656, -0.0725812444,
         -0.0280772677, -0.03566765, 0.0545597784, 0.00158695257, -0.0208860109),
        (-0.0220369178, 0.126082568, 0.0623382478, 0.0234027781, 0.261813266,
         -0.0337835661, -0.0344585477, -0.0723900324, 0.166352317, -0.0824213505),
    ),
    ("lite0", 3, "mcunetv3"): (
        (-2.34374603, -1.45253647, -5.78357437, -2.34480321, 1.10163151,
         -3.45439407, 0.614921961, 4.62634469, -3.10632422, 1.96926435),
        (-2.81304984, -1.75665758, -4.69245671, -0.147660377, -1.19394346,
         -1.97006007, 0.754118968, 5.26363322, -0.921664255, 3.13294649),
    ),
    ("lite0", 4, "bias-only"): (
        (-4.51421585, 3.79723573, -1.75435603, -1.56777029, -0.708735531,
         5.85208733, -0.0362280412, 0.571841995, -0.0368727558, 0.840875504),
        (-3.72052937, 1.81776674, -0.630675573, -0.907753911, -0.85250194,
         4.54294837, 0.37866867, -0.148656471, -1.02416863, -0.438322687),
    ),
    ("mbv3", None, "tinytl"): (
        (0.0317550411, 0.0424686529, -0.0195559571, 0.0288324478, 0.0615426639,
         0.0125378359, 0.030790651, 0.0505081811, 0.00976446141, 0.00602023187),
        (0.0111202025, 0.0548892242, -0.0297441841, 0.0356034625, 0.00706688244,
         0.0132928241, -0.0194579534, -0.0536047021, -0.0290072786, 0.0339985516),
    ),
    ("zoo", None, "tinytl"): (
        (-0.0487888623, -0.101856706, -0.0291735901, 0.057807982, -0.050577075,
         -0.0664634494, 0.0238102417, 0.0761817698, 0.0191046496, 0.0751734882),
        (-0.0487887801, -0.101856694, -0.0291735181, 0.057807952, -0.0505769124,
         -0.0664634823, 0.0238104549, 0.0761815069, 0.0191047587, 0.0751735688),
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
    arena, flash, latency = HARDWARE[key]
    assert (cost.arena_bytes, cost.flash_bytes) == (arena, flash)
    # a sum of float64 products: numpy's vectorised dot may round its last bit otherwise on
    # another processor
    assert cost.latency_s == pytest.approx(latency, rel=1e-12)


@pytest.mark.parametrize("key", list(LOGITS), ids=lambda k: f"{k[0]}/{k[1]}/{k[2]}")
def test_the_network_computes_as_before(
    key: tuple[str, int | None, str], zoo: tuple[Path, Path]
) -> None:
    """The same modules with the same weights: the network in float64 gives the recorded
    logits. The tolerance is the float32 BatchNorm statistics', which round differently on
    another processor's kernels (a wrong padding, role or branch moves the logits by far
    more)."""
    net, splits = _network(key, zoo)
    x = torch.tensor(splits.train.x[LOGITS_IMAGES], dtype=torch.float64)
    with torch.no_grad():
        logits = net.eval().double()(x)
    expected = torch.tensor(LOGITS[key], dtype=torch.float64)
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
