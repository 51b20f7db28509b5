"""SqueezeNet 1.1's fire modules, imported: two expansions concatenated along the channels,
max pools between them. A concatenation shares its quantization with its inputs (a copy of
channels forward, its gradient split along them backward), so it needs no kernel of its own;
it trains alike in C on the host, the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import FORMS, as_imported, check_trains_alike_in_c, images, save
from tests.networks.zoo import SqueezeNet
from tinytune.ir import trace
from tinytune.models import GraphNet, ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.quant import quantize
from tinytune.spaces import get_supernet, make_preset

SIZE = 48


@pytest.fixture(scope="module")
def module() -> torch.nn.Module:
    torch.manual_seed(0)
    return SqueezeNet().eval()


def _images(n: int, seed: int) -> torch.Tensor:
    return images(n, seed, SIZE)


@pytest.mark.parametrize("form", FORMS)
def test_fire_modules_compute_what_the_module_computes(
    module: torch.nn.Module, tmp_path: Path, form: str
) -> None:
    net = as_imported(save(module, _images(1, 0), tmp_path, form), module, 10)
    x = _images(3, 1)
    with torch.no_grad():
        assert torch.allclose(net(x), module(x), atol=1e-5)
    kinds = [op.kind for op in trace(net, x[:1]).ops]
    assert kinds.count("cat") == 4 and kinds.count("maxpool") == 2


def test_a_concatenation_shares_its_inputs_quantization(
    module: torch.nn.Module, tmp_path: Path
) -> None:
    path = save(module, _images(1, 0), tmp_path)
    net = build_candidate(make_preset("full", get_supernet(path)),
                          ImportedNetwork(read_network(path)), 10, [], seed=0)  # fmt: skip
    q = quantize(net, [_images(8, 2)])
    for op in q.graph.ops:
        if op.kind == "cat":
            assert all(q.acts[t] == q.acts[op.output] for t in op.inputs)


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["full"])  # every backward kernel the others call
def test_fire_modules_train_in_c_as_the_simulator_does_on_every_core(
    module: torch.nn.Module, tmp_path: Path, preset: str
) -> None:
    path = save(module, _images(1, 0), tmp_path)
    inputs = (_images(16, 2), _images(4, 3), _images(4, 4))
    check_trains_alike_in_c(path, preset, 10, inputs, tmp_path / "bundle")


def test_an_average_pool_of_r_by_r_windows_is_read_and_others_refused(tmp_path: Path) -> None:
    from tinytune.errors import ModelError

    class Pooled(torch.nn.Module):
        def __init__(self, pool: torch.nn.Module) -> None:
            super().__init__()
            self.conv, self.pool = torch.nn.Conv2d(3, 8, 3, padding=1), pool
            self.head, self.fc = torch.nn.Conv2d(8, 16, 1), torch.nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.head(self.pool(torch.relu(self.conv(x))))
            return self.fc(torch.relu(h).mean(dim=(2, 3)))

    torch.manual_seed(0)
    module = Pooled(torch.nn.AvgPool2d(2)).eval()
    path = tmp_path / "avg.pt2"
    torch.export.save(torch.export.export(module, (torch.zeros(1, 3, 15, 15),)), str(path))
    net = GraphNet(read_network(str(path)), 4, 15, torch.Generator().manual_seed(0)).eval()
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    x = torch.randn(2, 3, 15, 15)
    with torch.no_grad():  # 15 rows: the last one dropped, as nn.AvgPool2d(2) drops it
        assert torch.allclose(net(x), module(x), atol=1e-5)
    for pool, words in (
        (torch.nn.AvgPool2d(3, 1, 1), "an average pooling of 3x3 at stride 1x1, padded"),
        (torch.nn.AvgPool2d(2, ceil_mode=True), "an average pooling of 2x2 at stride 2x2"),
    ):
        path = tmp_path / "refused.pt2"
        program = torch.export.export(Pooled(pool).eval(), (torch.zeros(1, 3, 15, 15),))
        torch.export.save(program, str(path))
        with pytest.raises(ModelError, match=words):
            read_network(str(path))
