"""What the imported-network tests share: a module saved in each form a user exports, the
network built with the module's own classifier, and the check that a candidate's C step is the
simulator's, byte for byte, and prints the same on the host, the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.bundle.support import make, parse_dump, replay, write_test_bundle
from tests.networks import zoo
from tinytune.hwmodels import plan_memory
from tinytune.ir import block_end, plan_patches
from tinytune.models import GraphNet, ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.quant import quantize
from tinytune.spaces import get_supernet, make_preset

FORMS = ("pt2", "pt2 core", "onnx")
"""torch.export's program, the same after ``run_decompositions()`` (core ATen), and ONNX."""


def images(n: int, seed: int, size: int) -> torch.Tensor:
    """``n`` random RGB images of ``size`` × ``size`` in [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 3, size, size, generator=g) * 2 - 1).clamp(-1, 1)


ZOO: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "mbv2": (lambda: zoo.MobileNetV2(0.35, 10), (3, 32, 32)),
    "ds-cnn": (zoo.DSCNN, (1, 49, 10)),
    "sensor-1d": (zoo.SensorCNN1d, (6, 64)),
    "v3": (lambda: zoo.SmallV3(10), (3, 32, 32)),
    "resnet8": (zoo.ResNet8, (3, 32, 32)),
    "resnet18": (lambda: zoo.ResNet18(0.125, 10), (3, 32, 32)),
    "squeezenet": (zoo.SqueezeNet, (3, 32, 32)),
}
"""Networks of the zoo by name, each with the input it is exported for (C, H, W), or (C, T)."""


def exported_zoo(names: list[str], folders: pytest.TempPathFactory) -> dict[str, str]:
    """Each named network of :data:`ZOO` (seed 0, BatchNorm statistics of a trained one)
    exported by ``torch.export``: name -> its file."""
    out = {}
    for name in names:
        make_net, shape = ZOO[name]
        torch.manual_seed(0)
        out[name] = save(
            zoo.randomise_bn(make_net()), torch.zeros(1, *shape), folders.mktemp(name)
        )
    return out


def samples(name: str, n: int, seed: int) -> torch.Tensor:
    """``n`` samples for network ``name`` of :data:`ZOO` as tinytune feeds them: images in
    [-1, 1], other inputs of spread 0.6 clamped to it, a 1-D network's (N, C, T) as
    (N, C, 1, T)."""
    shape = ZOO[name][1]
    if shape[0] == 3:
        return images(n, seed, shape[1])
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, *shape, generator=g) * 0.6).clamp(-1, 1)
    return x if x.dim() == 4 else x[:, :, None, :]


def save(module: torch.nn.Module, example: torch.Tensor, folder: Path, form: str = "pt2") -> str:
    """``module`` (in eval mode) exported at ``example``'s shape in ``form`` into ``folder``."""
    module = module.eval()
    path = folder / ("net.onnx" if form == "onnx" else "net.pt2")
    if form == "onnx":
        torch.onnx.export(module, (example,), str(path), dynamo=False)
    else:
        program = torch.export.export(module, (example,))
        if form == "pt2 core":
            program = program.run_decompositions()
        torch.export.save(program, str(path))
    return str(path)


def as_imported(path: str, module: torch.nn.Module, n_classes: int) -> GraphNet:
    """The network of ``path`` at its exported size, in eval mode, with ``module``'s own
    classifier (``module.fc``) in place of the new one: it computes what ``module`` does."""
    graph = read_network(path)
    net = GraphNet(graph, n_classes, graph.input_shape[2], torch.Generator().manual_seed(0))
    net.classifier.weight.data = module.fc.weight.detach().clone()
    net.classifier.bias.data = module.fc.bias.detach().clone()
    return net.eval()


def check_trains_alike_in_c(
    path: str,
    preset: str,
    n_classes: int,
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    folder: Path,
    lr: float = 0.01,
    patches: tuple[int, int] | None = None,
) -> None:
    """The ``preset`` candidate of the network in ``path``, quantized on ``inputs[0]``, bundled
    with ``inputs[1]`` to train on and ``inputs[2]`` to evaluate for two epochs: its C step
    replayed in the simulator byte for byte, every step, and the host's training printed alike
    on the Cortex-M7 and the RV32IMC. ``patches``: (n, B), the frozen prefix run in n × n
    patches over the stem and the first B blocks, in the arena that plan sizes."""
    calibration, train_x, eval_x = inputs
    net = build_candidate(
        make_preset(preset, get_supernet(path)), ImportedNetwork(read_network(path)),
        n_classes, [], seed=0,
    )  # fmt: skip
    quantized = quantize(net, [calibration])
    report = None
    if patches is not None:
        plan = plan_patches(quantized.graph, patches[0], block_end(quantized.graph, patches[1]))
        report = plan_memory(quantized.graph, precision="int8", patches=plan)
    program, train, evaluation = write_test_bundle(
        folder, quantized, train_x, eval_x, lr=lr, epochs=2, report=report
    )
    if report is not None:
        assert program.arena_bytes == report.arena_bytes
        assert sum(c.kernel == "window_s8" for c in program.calls) >= len(plan.patches)
    dump = parse_dump(make(folder, "run-host", build="build-dump", defs="-DTT_DUMP"))
    assert replay(quantized, lr, train, evaluation, dump) == 8  # every byte, every step
    host = make(folder, "run-host")
    assert "smoke test passed" in host
    for target in ("run-cortex-m7", "run-rv32imc"):
        assert trained(make(folder, target)) == trained(host), target


def trained(text: str) -> list[str]:
    """What an example prints of its training: each epoch's loss and count, the saved
    parameters' CRC-32, the restore and the verdict."""
    keep = ("epoch ", "saved ", "after ", "smoke test passed")
    return [line for line in text.splitlines() if line.startswith(keep)]
