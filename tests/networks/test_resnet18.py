"""torchvision's ResNet-18 at an eighth of its width, imported: a 7×7 stem and a 3×3 stride-2
max pool before four stages of basic blocks. The max pool runs in fp32 as PyTorch's, in the
integer simulator and in C as the largest int8 value of each window, its gradient to the first
largest (PyTorch's choice, ties included); the network trains through it alike on the host,
the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.bundle.support import needs
from tests.networks.support import as_imported, check_trains_alike_in_c, images
from tests.networks.zoo import ResNet18, export, randomise_bn
from tinytune.hwmodels import plan_memory
from tinytune.ir import trace
from tinytune.models import GraphNet, ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.quant import kernels as K
from tinytune.spaces import get_supernet, make_preset

SIZE = 64


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    module = randomise_bn(ResNet18(width=0.125))
    path = tmp_path_factory.mktemp("r18") / "resnet18.pt2"
    export(module, path, SIZE)
    return module, path


def _images(n: int, seed: int) -> torch.Tensor:
    return images(n, seed, SIZE)


def test_resnet18_computes_what_the_module_computes(
    resnet18: tuple[torch.nn.Module, Path],
) -> None:
    module, path = resnet18
    net = as_imported(str(path), module, 1000)
    x = _images(3, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), module(x), atol=1e-5)
    pools = [m for m in net.modules() if type(m).__name__ == "MaxPool"]
    assert [(p.kernel, p.stride, p.padding) for p in pools] == [((3, 3), (2, 2), (1, 1))]


def test_resnet18_through_onnx_is_the_same_network(
    resnet18: tuple[torch.nn.Module, Path], tmp_path: Path
) -> None:
    module, path = resnet18
    onnx_path = tmp_path / "resnet18.onnx"
    torch.onnx.export(module, (torch.zeros(1, 3, SIZE, SIZE),), str(onnx_path), dynamo=False)
    x = _images(2, 5)
    outs = []
    for file in (path, onnx_path):
        net = GraphNet(read_network(str(file)), 10, SIZE, torch.Generator().manual_seed(0))
        with torch.no_grad():
            outs.append(net.eval()(x))
    assert torch.allclose(outs[0], outs[1], atol=1e-5)


@pytest.mark.parametrize("values", [(-128, 128), (-2, 2)], ids=["spread", "ties"])
@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "padding"),
    [((4, 9, 8), (3, 3), (2, 2), (1, 1)), ((3, 8, 8), (2, 2), (2, 2), (0, 0)),
     ((2, 7, 10), (3, 2), (1, 2), (1, 0))],
)  # fmt: skip
def test_int8_max_pool_is_pytorchs_on_int8_values(
    values: tuple[int, int],
    shape: tuple[int, int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(*values, (1, *shape), generator=g)
    ref = F.max_pool2d(x.double().requires_grad_(), kernel, stride, padding)
    _, _, h, w = x.shape
    bottom = (ref.shape[2] - 1) * stride[0] + kernel[0] - padding[0] - h
    right = (ref.shape[3] - 1) * stride[1] + kernel[1] - padding[1] - w
    pads = (padding[0], bottom, padding[1], right)
    assert torch.equal(K.maxpool_s8(x, kernel, stride, pads), ref.detach().long())
    gy = torch.randint(-127, 128, ref.shape, generator=g)
    xd = x.double().requires_grad_()
    F.max_pool2d(xd, kernel, stride, padding).backward(gy.double())
    c = K.maxpool_grad_input(K.Grad(gy, -6), x, kernel, stride, pads)
    assert torch.equal(c.values, xd.grad.long()) and c.exp == -6


def test_the_max_pool_keeps_its_input_where_a_gradient_flows(
    resnet18: tuple[torch.nn.Module, Path],
) -> None:
    _, path = resnet18
    spec = get_supernet(str(path))
    net = build_candidate(make_preset("full", spec), ImportedNetwork(read_network(str(path))),
                          10, [], seed=0)  # fmt: skip
    graph = trace(net, torch.zeros(1, 3, SIZE, SIZE))
    (pool,) = [op for op in graph.ops if op.kind == "maxpool"]
    report = plan_memory(graph, precision="int8")
    x = pool.inputs[0]
    (buffer,) = [b for b in report.buffers if b.name == f"t{x}"]
    assert buffer.end == 2 * len(graph.ops) - 1 - pool.index  # alive until its backward


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["full"])  # every backward kernel the others call
def test_resnet18_trains_in_c_as_the_simulator_does_on_every_core(
    resnet18: tuple[torch.nn.Module, Path], preset: str, tmp_path: Path
) -> None:
    _, path = resnet18
    inputs = (_images(16, 2), _images(4, 3), _images(4, 4))
    check_trains_alike_in_c(str(path), preset, 10, inputs, tmp_path / "bundle")
