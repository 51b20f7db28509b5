"""Networks whose classifier reads a flattened map, and dense layers before it: TensorFlow Lite
Micro's micro_speech model (a convolution, then a dense layer over its flattened 25×20 map) and
a 1-D sensor CNN with a dense hidden layer. A dense layer over a flattened map is the
convolution whose kernel is the whole map; one over features, a 1×1 convolution — so they train,
plan, quantize and run in C as convolutions do. Such a network keeps its exported size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import make, needs, parse_dump, replay, write_test_bundle
from tests.networks.zoo import SensorMLP, TinyConv, randomise_bn
from tinytune.ir import trace
from tinytune.models import GraphNet, ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.quant import quantize
from tinytune.spaces import get_supernet, make_preset

LR = 0.01
NETWORKS = {"micro_speech": (TinyConv, (1, 49, 40)), "sensor-mlp": (SensorMLP, (3, 32))}


def _save(name: str, folder: Path, form: str) -> tuple[torch.nn.Module, str]:
    make_net, shape = NETWORKS[name]
    torch.manual_seed(0)
    module = randomise_bn(make_net())
    example = torch.zeros(1, *shape)
    path = folder / ("net.onnx" if form == "onnx" else "net.pt2")
    if form == "onnx":
        torch.onnx.export(module, (example,), str(path), dynamo=False)
    else:
        program = torch.export.export(module, (example,))
        torch.export.save(
            program.run_decompositions() if form == "pt2 core" else program, str(path)
        )
    return module, str(path)


def _inputs(name: str, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, *NETWORKS[name][1], generator=g) * 0.6).clamp(-1, 1)
    return x if x.dim() == 4 else x[:, :, None, :]  # a window as (N, C, 1, T)


@pytest.mark.parametrize("form", ["pt2", "pt2 core", "onnx"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_dense_layers_compute_what_the_module_computes(
    name: str, form: str, tmp_path: Path
) -> None:
    module, path = _save(name, tmp_path, form)
    graph = read_network(path)
    net = GraphNet(graph, 5, graph.input_shape[2], torch.Generator().manual_seed(0)).eval()
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    x = _inputs(name, 3, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), module(x if name != "sensor-mlp" else x[:, :, 0]), atol=1e-5)
    convs = [op for op in trace(net, x[:1]).ops if op.kind == "conv"]
    if name == "sensor-mlp":  # the dense layer: the whole 1 x 8 map of 8 channels
        assert convs[-1].kernel_hw == (1, 8) and convs[-1].act == "relu"
    assert get_supernet(path).resolutions == (graph.input_shape[2],)  # its exported size


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["bias-only", "full"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_dense_layers_train_in_c_as_the_simulator_does_on_every_core(
    name: str, preset: str, tmp_path: Path
) -> None:
    _, path = _save(name, tmp_path, "pt2")
    spec = get_supernet(path)
    net = build_candidate(make_preset(preset, spec), ImportedNetwork(read_network(path)), 5, [],
                          seed=0)  # fmt: skip
    quantized = quantize(net, [_inputs(name, 16, 2)])
    folder = tmp_path / "bundle"
    _, train, evaluation = write_test_bundle(
        folder, quantized, _inputs(name, 4, 3), _inputs(name, 4, 4), lr=LR, epochs=2
    )
    dump = parse_dump(make(folder, "run-host", build="build-dump", defs="-DTT_DUMP"))
    assert replay(quantized, LR, train, evaluation, dump) == 8  # every byte, every step
    host = make(folder, "run-host")
    assert "smoke test passed" in host
    for target in ("run-cortex-m7", "run-rv32imc"):
        assert _trained(make(folder, target)) == _trained(host), target


def _trained(text: str) -> list[str]:
    keep = ("epoch ", "saved ", "after ", "smoke test passed")
    return [line for line in text.splitlines() if line.startswith(keep)]
