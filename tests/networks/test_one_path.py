"""The built-in network exported with torch.export and searched as a user's file is the same
network: for each preset, the same planned arena and predicted step on the device, and, with
the BatchNorm statistics it was exported with (the built-in supernet re-estimates them on the
target data; a file keeps its own), the same fine-tune, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tinytune.checkpoints import shipped_checkpoint
from tinytune.data import get_dataset
from tinytune.evaluators.finetune import FinetuneConfig, finetune
from tinytune.evaluators.hardware import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels import get_device
from tinytune.models import ImportedNetwork, build_candidate, load_supernet
from tinytune.models.ofa_adapter import extract_subnet
from tinytune.networks import read_network
from tinytune.spaces import default_subnet, get_supernet, make_preset

BUILT_IN = "ofa-proxyless-w0.35"
PRESETS = ("last", "bias-only", "mcunetv3", "full")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    """The shipped supernet and its default sub-network exported to a file, as a user would
    export the network they trained."""
    spec = get_supernet(BUILT_IN)
    supernet = load_supernet(spec, shipped_checkpoint(spec))
    subnet = default_subnet(spec)
    static = extract_subnet(supernet, spec, subnet, copy=True).eval()
    example = torch.zeros(1, 3, subnet.resolution, subnet.resolution)
    path = tmp_path_factory.mktemp("export") / "proxyless.pt2"
    torch.export.save(torch.export.export(static, (example,)), str(path))
    return supernet, path


@pytest.mark.parametrize("preset", PRESETS)
def test_the_file_plans_and_predicts_as_the_built_in_network(
    exported: tuple[torch.nn.Module, Path], preset: str
) -> None:
    _, path = exported
    built_in, mine = get_supernet(BUILT_IN), get_supernet(str(path))
    device = get_device("stm32f746")
    a = HardwareEvaluator(built_in, 10, HardwareConfig(), device)(make_preset(preset, built_in))
    b = HardwareEvaluator(mine, 10, HardwareConfig(), device)(make_preset(preset, mine))
    assert make_preset(preset, mine).n_convs == make_preset(preset, built_in).n_convs
    assert a.arena_bytes == b.arena_bytes
    assert a.flash_bytes == b.flash_bytes
    assert a.latency_s == b.latency_s


@pytest.mark.parametrize("preset", ["last", "bias-only", "mcunetv3"])
def test_the_file_fine_tunes_as_the_built_in_network(
    exported: tuple[torch.nn.Module, Path], preset: str
) -> None:
    supernet, path = exported
    built_in, mine = get_supernet(BUILT_IN), get_supernet(str(path))
    resolution = default_subnet(built_in).resolution
    splits = get_dataset("digits").load(resolution)
    config = FinetuneConfig(epochs=1, lr=0.1, seed=2)
    nets = (
        build_candidate(
            make_preset(preset, built_in), supernet, 10, [], seed=4, recalibrate=False
        ),
        build_candidate(
            make_preset(preset, mine), ImportedNetwork(read_network(str(path))), 10, [], seed=4
        ),
    )
    a, b = (finetune(net, splits, config) for net in nets)
    assert (a.val_accuracy, a.accuracy) == (b.val_accuracy, b.accuracy)
    assert a.train_loss == pytest.approx(b.train_loss, abs=1e-6)
    assert a.accuracy > 0.5  # a trained network's features, not chance
