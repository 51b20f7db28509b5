"""Networks that are not on square RGB images, imported: ARM's keyword DS-CNN on 1×49×10 MFCC
features (a 10×4 stride-2 stem padded as TensorFlow's "SAME") and a 1-D CNN over 6×1×64 IMU
windows (1×k convolutions, a 1×2 max pool). Their rectangular kernels and strides run in
fp32 as PyTorch's, in the integer simulator and in C, the same bytes on the host, the Cortex-M7
and the RV32IMC; an image data set cannot feed them, which the search says in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import check_trains_alike_in_c
from tests.networks.zoo import DSCNN, SensorCNN, SensorCNN1d, randomise_bn
from tinytune.ir import trace
from tinytune.models import GraphNet
from tinytune.networks import read_network
from tinytune.spaces import get_supernet

LR = 0.01
NETWORKS = {
    "ds-cnn": (DSCNN, (1, 49, 10)),
    "sensor": (SensorCNN, (6, 1, 64)),
    "sensor-1d": (SensorCNN1d, (6, 64)),  # Conv1d, MaxPool1d, AvgPool1d: read as (6, 1, 64)
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[torch.nn.Module, str]]:
    out = {}
    for name, (make_net, shape) in NETWORKS.items():
        torch.manual_seed(0)
        module = randomise_bn(make_net())
        path = tmp_path_factory.mktemp(name) / f"{name}.pt2"
        program = torch.export.export(module.eval(), (torch.zeros(1, *shape),))
        torch.export.save(program, str(path))
        out[name] = module, str(path)
    return out


def _inputs(name: str, n: int, seed: int) -> torch.Tensor:
    """Samples as tinytune feeds them: a 1-D network's (N, C, T) as (N, C, 1, T)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, *NETWORKS[name][1], generator=g) * 0.6).clamp(-1, 1)
    return x if x.dim() == 4 else x[:, :, None, :]


@pytest.mark.parametrize("name", list(NETWORKS))
def test_it_computes_what_the_module_computes(
    exported: dict[str, tuple[torch.nn.Module, str]], name: str
) -> None:
    module, path = exported[name]
    graph = read_network(path)
    net = GraphNet(graph, 5, graph.input_shape[2], torch.Generator().manual_seed(0)).eval()
    x = _inputs(name, 3, 1)
    assert net.input_shape == tuple(x.shape[1:])
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    with torch.no_grad():
        assert torch.allclose(net(x), module(x if name != "sensor-1d" else x[:, :, 0]), atol=1e-5)
    stem = trace(net, x[:1]).ops[0]
    if name == "ds-cnn":  # 10x4 at stride 2, "SAME": 4 rows above and 1 column left
        assert (stem.kernel_hw, stem.stride_hw, stem.attrs["padding"]) == ((10, 4), (2, 2), 4)
        assert stem.attrs["pad_left"] == 1 and stem.macs == 64 * 25 * 5 * 40
    else:
        assert (stem.kernel_hw, stem.stride_hw) == ((1, 5), (1, 2))


@pytest.mark.parametrize("form", ["pt2", "pt2 core", "onnx"])
def test_a_1d_network_reads_as_1xk_convolutions_over_c_by_1_by_t(
    tmp_path: Path, form: str
) -> None:
    torch.manual_seed(0)
    module = randomise_bn(SensorCNN1d())
    example = torch.zeros(1, 6, 64)
    path = tmp_path / ("net.onnx" if form == "onnx" else "net.pt2")
    if form == "onnx":
        torch.onnx.export(module, (example,), str(path), dynamo=False)
    else:
        program = torch.export.export(module, (example,))
        if form == "pt2 core":  # unsqueeze, a 2-D pool, squeeze; a mean over the length
            program = program.run_decompositions()
        torch.export.save(program, str(path))
    graph = read_network(str(path))
    assert graph.input_shape == (1, 6, 1, 64)
    net = GraphNet(graph, 5, 1, torch.Generator().manual_seed(0)).eval()
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    x = torch.randn(3, 6, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(net(x[:, :, None, :]), module(x), atol=1e-5)
    ops = trace(net, x[:1, :, None, :]).ops
    assert [(op.kernel_hw, op.stride_hw) for op in ops if op.kind == "conv"] == [
        ((1, 5), (1, 2)), ((1, 3), (1, 1)), ((1, 3), (1, 1)), ((1, 1), (1, 1))
    ]  # fmt: skip
    (pool,) = [op for op in ops if op.kind == "maxpool"]
    assert (pool.attrs["kernel_h"], pool.attrs["kernel_w"], pool.attrs["stride_w"]) == (1, 2, 2)


def test_a_1d_reshape_into_another_axis_is_refused(tmp_path: Path) -> None:
    class Sideways(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(6, 8, 3), torch.nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, T) to (N, C, T, 1)
            return self.fc(self.conv(x.unsqueeze(-1).expand(-1, -1, -1, 4)).mean(dim=(2, 3)))

    path = tmp_path / "s.pt2"
    torch.export.save(torch.export.export(Sideways(), (torch.zeros(1, 6, 16),)), str(path))
    with pytest.raises(Exception) as e:
        read_network(str(path))
    assert "\n" not in str(e.value) and "reshapes [1, 6, 1, 16] to [1, 6, 16, 1]" in str(e.value)


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("preset", ["full"])  # every backward kernel the others call
@pytest.mark.parametrize("name", list(NETWORKS))
def test_it_trains_in_c_as_the_simulator_does_on_every_core(
    exported: dict[str, tuple[torch.nn.Module, str]], name: str, preset: str, tmp_path: Path
) -> None:
    _, path = exported[name]
    height = _inputs(name, 1, 0).shape[2]
    # a sensor window at its size, a spectrogram at its frames and fewer (a keyword front-end's)
    assert get_supernet(path).resolutions == ((height,) if height == 1 else (24, 32, height))
    inputs = (_inputs(name, 16, 2), _inputs(name, 4, 3), _inputs(name, 4, 4))
    check_trains_alike_in_c(path, preset, 5, inputs, tmp_path / "bundle")


def test_samples_and_network_must_agree_before_anything_is_stored(
    exported: dict[str, tuple[torch.nn.Module, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import numpy as np

    from tests.networks.zoo import MobileNetV2, export
    from tinytune.cli.main import main

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imu.npz", X=rng.normal(size=(30, 6, 32)), y=np.arange(30) % 3)
    export(randomise_bn(MobileNetV2(0.35, stages=2)), tmp_path / "rgb.pt2", 32)
    db = tmp_path / "s.db"
    for network, words in (
        (None, "gives samples of 6x1x32, not images; search it with your own network of that"),
        (str(tmp_path / "rgb.pt2"), "takes a 3x32x32 input; data set"),
        (exported["sensor"][1], "takes a 6x1x64 input; data set"),
    ):
        argv = ["search", "--dataset", f"series:{tmp_path / 'imu.npz'}", "--trials", "2"]
        argv += ["--storage", f"sqlite:///{db}"] + (["--supernet", network] if network else [])
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
        assert not db.exists()


def test_windows_of_a_series_file_feed_a_1d_network(tmp_path: Path) -> None:
    import numpy as np

    from tinytune.data import get_dataset
    from tinytune.spaces.networks import check_network_input

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "imu.npz", X=rng.normal(size=(30, 6, 64)), y=np.arange(30) % 3)
    data = get_dataset(f"series:{tmp_path / 'imu.npz'}")
    torch.manual_seed(0)
    module = randomise_bn(SensorCNN1d(classes=3))
    path = tmp_path / "imu.pt2"
    torch.export.save(torch.export.export(module, (torch.zeros(1, 6, 64),)), str(path))
    check_network_input(str(path), data.name, data.input_shape)  # (6, 1, 64) both
    graph = read_network(str(path))
    net = GraphNet(graph, 3, data.resolution, torch.Generator().manual_seed(0)).eval()
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    x = torch.from_numpy(np.array(data.load(data.resolution).test.x))
    with torch.no_grad():  # the window as the module takes it, (N, C, T)
        assert torch.allclose(net(x), module(x[:, :, 0]), atol=1e-5)


@pytest.mark.parametrize("form", ["pt2", "onnx"])
def test_1d_branches_concatenated_along_their_channels(tmp_path: Path, form: str) -> None:
    from tests.networks.support import as_imported, save

    class Branches(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = (
                torch.nn.Conv1d(6, 8, 3, padding=1),
                torch.nn.Conv1d(6, 8, 5, padding=2),
            )
            self.fc = torch.nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # dim -2 of (N, C, T): channels
            h = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=-2)
            return self.fc(h.mean(dim=-1))

    torch.manual_seed(0)
    module = Branches().eval()
    x = torch.randn(2, 6, 32)
    net = as_imported(save(module, x[:1], tmp_path, form), module, 3)
    with torch.no_grad():
        assert torch.allclose(net(x[:, :, None, :]), module(x), atol=1e-5)
