"""TinyTL's lite residual branches on a user's network: a network's stages are its blocks (a
MobileNetV2's inverted residuals whether or not they add a shortcut, a DS-CNN's separable
blocks), a branch spans a stage from its input to the map it hands on (before a global pool,
after squeeze-and-excitation), along one axis on a 1-D network, and trains in C as the
simulator does, byte for byte, on the host, the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import check_trains_alike_in_c, exported_zoo, samples
from tinytune.errors import ConfigError
from tinytune.ir import trace
from tinytune.models import ImportedNetwork, build_candidate
from tinytune.models.graphnet import GraphStage
from tinytune.models.layers import LiteResidual
from tinytune.networks import read_network
from tinytune.spaces import (
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    block_count,
    get_supernet,
    make_preset,
    subnet_params,
    suggest_candidate,
)

NAMES = ["mbv2", "ds-cnn", "sensor-1d", "v3", "resnet8"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return exported_zoo(NAMES, tmp_path_factory)


def _build(path: str, candidate: Candidate) -> torch.nn.Module:
    return build_candidate(candidate, ImportedNetwork(read_network(path)), 5, [], seed=0)


def test_a_mobilenets_stages_are_its_blocks(exported: dict[str, str]) -> None:
    spec = get_supernet(exported["mbv2"])
    # the stem; the first block (depthwise, projection); 16 inverted residuals, those with a
    # stride or a new width included; the 1x1 head and the pool
    assert spec.stage_convs == (1, 2, *[3] * 16, 1)
    dscnn = get_supernet(exported["ds-cnn"])
    assert dscnn.stage_convs == (1, 2, 2, 2, 2)  # the stem, four separable blocks


@pytest.mark.parametrize("name", NAMES)
def test_tinytl_puts_a_branch_on_every_block_but_the_first_and_it_adds_zero(
    exported: dict[str, str], name: str
) -> None:
    spec = get_supernet(exported[name])
    candidate = make_preset("tinytl", spec)
    # block b is stage b + 1 (stage 0 the stem's), as on a built-in network: none on block 0
    # nor on a head's stage (a MobileNet's 1×1 head)
    head = {"mbv2": 1, "v3": 1}.get(name, 0)
    blocks = len(spec.stage_convs) - 1 - head
    assert block_count(spec, candidate.subnet) == blocks
    assert candidate.lite_residual.blocks == tuple(range(1, blocks))
    net = _build(exported[name], candidate).eval()
    plain = _build(exported[name], make_preset("bias-only", spec)).eval()
    stages = [m for m in net.modules() if isinstance(m, GraphStage)]
    assert [s.lite is not None for s in stages] == [False, False] + [True] * (blocks - 1) + [
        False
    ] * head
    x = samples(name, 3, 1)
    with torch.no_grad():  # a new branch's last GroupNorm scales by 0: it adds exactly 0
        assert torch.equal(net(x), plain(x))
    trained = {n for n, p in net.named_parameters() if p.requires_grad}
    # two convolutions, the first GroupNorm's scale and bias, the second's scale
    assert sum(".lite." in n for n in trained) == 5 * (blocks - 1)
    assert len(net.convs()) == candidate.n_convs  # the branches' convolutions are apart


def test_a_branch_spans_the_stage_to_the_map_it_hands_on(exported: dict[str, str]) -> None:
    spec = get_supernet(exported["v3"])
    net = _build(exported["v3"], make_preset("tinytl", spec))
    graph = trace(net, samples("v3", 1, 0))
    by_output = {op.output: op for op in graph.ops}
    adds = [op for op in graph.ops if op.name.endswith(".lite_add")]
    assert len(adds) == 1  # block 1 (stage 2); none on block 0, none on the head
    # block 0 (stage 1) holds squeeze-and-excitation: a stage never ends between its product
    # and the projection after it
    block0 = [op.kind for op in graph.ops if op.name.startswith("stages_.1.")]
    assert block0[-2:] == ["mul", "conv"]
    # block 1: onto its residual sum
    assert by_output[adds[0].inputs[0]].kind == "add"
    # the last block of a ResNet: onto its map, before the network's global pool
    spec = get_supernet(exported["resnet8"])
    net = _build(exported["resnet8"], make_preset("tinytl", spec))
    graph = trace(net, samples("resnet8", 1, 0))
    last = [op for op in graph.ops if op.name.endswith(".lite_add")][-1]
    assert graph.ops[last.index + 1].kind == "gap"
    assert graph.consumers()[last.output] == [last.index + 1]


def test_a_branch_on_a_sensor_window_runs_along_its_one_axis(exported: dict[str, str]) -> None:
    spec = get_supernet(exported["sensor-1d"])
    net = _build(exported["sensor-1d"], make_preset("tinytl", spec))
    branches = [m for m in net.modules() if isinstance(m, LiteResidual)]
    # inputs of 32 and 8 samples, pooled by 2: the last kernel shrinks to 3 taps (TinyTL)
    assert [b.conv1.kernel_hw for b in branches] == [(1, 5), (1, 3)]
    assert [(b.pool.ratio, b.pool.ratio_w) for b in branches] == [(1, 2)] * 2  # type: ignore[union-attr]
    assert [(b.conv1.stride, b.conv1.stride_w) for b in branches] == [(1, 4), (1, 1)]
    x = samples("sensor-1d", 2, 0)
    assert net(x).shape == (2, 5)


def test_the_search_samples_branches_on_the_last_stages(exported: dict[str, str]) -> None:
    spec = get_supernet(exported["resnet8"])
    n = len(spec.stage_convs) - 1  # its blocks: the stages after the stem's (no 1×1 head)
    trial = optuna.trial.FixedTrial(
        {"scheme": "joint", "lr_blocks": 2, "lr_kernel": 3, "lr_groups": 2,
         "lr_downsample": 2, "lr_expand": 0.5, "bias_last_k": 2, "n_weight": 0,
         **subnet_params(make_preset("last", spec).subnet, spec)}
    )  # fmt: skip
    candidate = suggest_candidate(trial, spec)
    assert candidate.lite_residual.blocks == (n - 2, n - 1)
    with pytest.raises(ConfigError) as e:
        Candidate(spec.name, candidate.subnet, LiteResidualConfig(((n, LiteResidualBranch()),)),
                  candidate.update)  # fmt: skip
    assert "\n" not in str(e.value) and f"allowed blocks: 1 to {n - 1}" in str(e.value)


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("name", ["ds-cnn", "sensor-1d", "resnet8"])
def test_tinytl_trains_in_c_as_the_simulator_does_on_every_core(
    exported: dict[str, str], name: str, tmp_path: Path
) -> None:
    inputs = (samples(name, 16, 2), samples(name, 4, 3), samples(name, 4, 4))
    check_trains_alike_in_c(exported[name], "tinytl", 5, inputs, tmp_path / "bundle")
