"""An EfficientNet-B0-style network, imported: SiLU (swish) after its convolutions and a sigmoid
gate in its squeeze-and-excitation, each an int8 table activation (its output and derivative
tables in flash) as h-swish is. SiLU comes as ``aten.silu`` from ``torch.export``, and as
x · sigmoid(x) from core ATen and ONNX, which the readers fuse back into one activation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import FORMS, as_imported, check_trains_alike_in_c, images, save
from tests.networks.zoo import TinyEfficientNet, randomise_bn
from tinytune.ir import trace

SIZE = 32


@pytest.fixture(scope="module")
def module() -> torch.nn.Module:
    torch.manual_seed(0)
    return randomise_bn(TinyEfficientNet())


def _images(n: int, seed: int) -> torch.Tensor:
    return images(n, seed, SIZE)


@pytest.mark.parametrize("form", FORMS)
def test_silu_and_the_sigmoid_gate_compute_what_the_module_computes(
    module: torch.nn.Module, tmp_path: Path, form: str
) -> None:
    net = as_imported(save(module, _images(1, 0), tmp_path, form), module, 10)
    x = _images(3, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), module(x), atol=1e-5)
    acts = [op.act for op in trace(net, x[:1]).ops if op.kind == "conv"]
    # stem; per block expansion, depthwise, SE reduce and gate, projection; head
    assert acts == ["silu"] + ["silu", "silu", "silu", "sigmoid", "none"] * 3 + ["silu"]


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["full"])  # every backward kernel the others call
def test_table_activations_train_in_c_as_the_simulator_does_on_every_core(
    module: torch.nn.Module, tmp_path: Path, preset: str
) -> None:
    path = save(module, _images(1, 0), tmp_path)
    inputs = (_images(16, 2), _images(4, 3), _images(4, 4))
    check_trains_alike_in_c(path, preset, 10, inputs, tmp_path / "bundle")
