"""Networks whose classifier reads a flattened map, and dense layers before it: TensorFlow Lite
Micro's micro_speech model (a convolution, then a dense layer over its flattened 25×20 map) and
a 1-D sensor CNN with a dense hidden layer. A dense layer over a flattened map is the
convolution whose kernel is the whole map; one over features, a 1×1 convolution — so they train,
plan, quantize and run in C as convolutions do. Such a network keeps its exported size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import FORMS, as_imported, check_trains_alike_in_c, save
from tests.networks.zoo import SensorMLP, TinyConv, V3Head, randomise_bn
from tinytune.ir import trace
from tinytune.spaces import get_supernet

NETWORKS = {"micro_speech": (TinyConv, (1, 49, 40)), "sensor-mlp": (SensorMLP, (3, 32))}


def _module(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return randomise_bn(NETWORKS[name][0]())


def _samples(name: str, n: int, seed: int) -> torch.Tensor:
    """Samples as the module takes them: (N, 1, 49, 40) features, or (N, C, T) windows."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, *NETWORKS[name][1], generator=g) * 0.6).clamp(-1, 1)


def _fed(x: torch.Tensor) -> torch.Tensor:
    """As tinytune feeds them: a window (N, C, T) as (N, C, 1, T)."""
    return x if x.dim() == 4 else x[:, :, None, :]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(NETWORKS))
def test_dense_layers_compute_what_the_module_computes(
    name: str, form: str, tmp_path: Path
) -> None:
    module = _module(name)
    path = save(module, _samples(name, 1, 0), tmp_path, form)
    net = as_imported(path, module, 5)
    x = _samples(name, 3, 1)
    with torch.no_grad():
        assert torch.allclose(net(_fed(x)), module(x), atol=1e-5)
    convs = [op for op in trace(net, _fed(x[:1])).ops if op.kind == "conv"]
    if name == "sensor-mlp":  # the dense layer: the whole 1 x 8 map of 8 channels
        assert convs[-1].kernel_hw == (1, 8) and convs[-1].act == "relu"
    assert get_supernet(path).resolutions == (net.input_shape[1],)  # its exported size


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["full"])  # every backward kernel the others call
@pytest.mark.parametrize("name", list(NETWORKS))
def test_dense_layers_train_in_c_as_the_simulator_does_on_every_core(
    name: str, preset: str, tmp_path: Path
) -> None:
    path = save(_module(name), _samples(name, 1, 0), tmp_path)
    inputs = tuple(_fed(_samples(name, n, seed)) for n, seed in ((16, 2), (4, 3), (4, 4)))
    check_trains_alike_in_c(path, preset, 5, inputs, tmp_path / "bundle")


@pytest.mark.parametrize("form", FORMS)  # core ATen spells hard-swish and hard-sigmoid out
def test_a_dense_layer_over_pooled_features_is_a_1x1_convolution(
    form: str, tmp_path: Path
) -> None:
    """MobileNetV3's classifier: a linear layer and hard-swish over the pooled features, then
    the classifier; the network still takes other input sizes."""
    torch.manual_seed(0)
    module = randomise_bn(V3Head())
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1)).clamp(-1, 1)
    path = save(module, x[:1], tmp_path, form)
    net = as_imported(path, module, 10)
    with torch.no_grad():
        assert torch.allclose(net(x), module.eval()(x), atol=1e-5)
    last = [op for op in trace(net, x[:1]).ops if op.kind == "conv"][-1]
    assert (last.kernel_hw, last.act, last.params.weight_shape) == (
        (1, 1),
        "hswish",
        (128, 96, 1, 1),
    )
    assert get_supernet(path).resolutions == (16, 24, 32)
