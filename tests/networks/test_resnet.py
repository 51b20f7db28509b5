"""MLPerf Tiny's ResNet-8, imported: its blocks end in a ReLU after the sum, which tinytune runs
as one op (the sum clamped, its 1-bit mask kept for backward) in fp32, in the integer simulator
and in C, the same bytes on the host, the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import as_imported, check_trains_alike_in_c, images
from tests.networks.zoo import ResNet8, export, randomise_bn
from tinytune.hwmodels import plan_memory
from tinytune.ir import trace
from tinytune.models import ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.spaces import get_supernet, make_preset

SIZE = 32


@pytest.fixture(scope="module")
def resnet8(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    module = randomise_bn(ResNet8())
    path = tmp_path_factory.mktemp("r8") / "resnet8.pt2"
    export(module, path, SIZE)
    return module, path


def _images(n: int, seed: int) -> torch.Tensor:
    return images(n, seed, SIZE)


def test_resnet8_computes_what_the_module_computes(
    resnet8: tuple[torch.nn.Module, Path],
) -> None:
    module, path = resnet8
    net = as_imported(str(path), module, 10)
    x = _images(3, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), module(x), atol=1e-5)
    adds = [m for m in net.modules() if type(m).__name__ == "Add"]
    assert [a.act for a in adds] == ["relu"] * 3


def test_the_sums_relu_keeps_a_mask_where_a_gradient_flows(
    resnet8: tuple[torch.nn.Module, Path],
) -> None:
    _, path = resnet8
    spec = get_supernet(str(path))
    net = build_candidate(make_preset("bias-only", spec), ImportedNetwork(read_network(str(path))),
                          10, [], seed=0)  # fmt: skip
    graph = trace(net, torch.zeros(1, 3, SIZE, SIZE))
    adds = [op for op in graph.ops if op.kind == "add"]
    assert [op.act for op in adds] == ["relu"] * 3
    report = plan_memory(graph, precision="int8")
    masks = {b.name for b in report.buffers if b.name.endswith(":mask")}
    assert {f"{op.name}:mask" for op in adds} <= masks


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["bias-only", "full"])
def test_resnet8_trains_in_c_as_the_simulator_does_on_every_core(
    resnet8: tuple[torch.nn.Module, Path], preset: str, tmp_path: Path
) -> None:
    _, path = resnet8
    inputs = (_images(16, 2), _images(4, 3), _images(4, 4))
    check_trains_alike_in_c(str(path), preset, 10, inputs, tmp_path / "bundle")
