"""A user's own network from file to device: searched (``--supernet FILE``), its front point
exported, and the bundle's example printing the host's bytes on the Cortex-M7 and the RV32IMC
under QEMU. Slow: a search of four fine-tunes and three builds."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.bundle.support import make, needs
from tests.networks.zoo import (
    MobileNetV2,
    ResNet8,
    ResNet18,
    SmallV3,
    export,
    keyword_features,
    pretrained_dscnn,
    randomise_bn,
)
from tinytune.cli.main import main
from tinytune.data.logmel import LogMelSpec
from tinytune.hwmodels.frontend import frontend_units

pytestmark = pytest.mark.slow

SIZE = 32


def _search_and_export(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: list[str] = ()
) -> tuple[Path, dict]:
    storage = f"sqlite:///{tmp_path / 'mine.db'}"
    common = ["--storage", storage, "--study", "mine"]
    argv = ["search", "--supernet", str(path), *data, "--trials", "4", "--epochs", "2", "--inline"]
    argv += common
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["pareto", "--json", *common]) == 0
    points = json.loads(capsys.readouterr().out)
    point = next(p for p in points if p["on_front"] and not p["reference"])
    out = tmp_path / "bundle"
    argv = ["export", "--trial", str(point["trial"]), "-o", str(out), "--no-measure-int8"]
    argv += ["--samples", "8", "--epochs", "2"]  # a short example: three cores run it
    assert main([*argv, *common]) == 0
    return out, point


def _bytes_printed(text: str) -> list[str]:
    """The lines the example prints about what it trained: its epochs' counts and the saved
    parameters' CRC-32."""
    return [line for line in text.splitlines() if re.match(r"(epoch \d|saved \d)", line)]


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize("network", ["mobilenetv2", "resnet8", "resnet18"])
def test_an_exported_network_is_searched_exported_and_trains_alike_on_every_core(
    network: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    module = {
        "mobilenetv2": lambda: MobileNetV2(0.35, stages=4),
        "resnet8": ResNet8,
        "resnet18": lambda: ResNet18(width=0.125),  # a 7x7 stem and a max pool
    }[network]()
    export(randomise_bn(module), tmp_path / "net.pt2", 64 if network == "resnet18" else SIZE)
    bundle, point = _search_and_export(tmp_path / "net.pt2", tmp_path, capsys)
    manifest = json.loads((bundle / "manifest.json").read_text())
    # the front's SRAM is the bundle's: its arena (the planner's, exactly), static data, stack
    assert manifest["memory"]["sram_bytes"] == point["memory_bytes"]
    host = make(bundle, "run-host")
    assert "smoke test passed" in host
    printed = _bytes_printed(host)
    assert printed
    for target in ("run-cortex-m7", "run-rv32imc"):
        assert _bytes_printed(make(bundle, target)) == printed, target


@needs("host")
def test_an_onnx_model_is_searched_and_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(1)
    net = randomise_bn(SmallV3(), seed=1)
    torch.onnx.export(
        net, (torch.zeros(1, 3, SIZE, SIZE),), str(tmp_path / "v3.onnx"), dynamo=False
    )
    bundle, _ = _search_and_export(tmp_path / "v3.onnx", tmp_path, capsys)
    assert "smoke test passed" in make(bundle, "run-host")


@needs("cortex-m7")
@needs("rv32imc")
def test_a_keyword_network_is_searched_on_its_features_and_trains_alike_on_every_core(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ARM's DS-CNN, trained here on six words of 49x10 features, searched on four others
    (``series:``), exported, and its bundle fed the int8 features as they are."""
    import numpy as np

    net = pretrained_dscnn()
    program = torch.export.export(net, (torch.zeros(1, 1, 49, 10),))
    torch.export.save(program, str(tmp_path / "kws.pt2"))
    x, y = keyword_features([0, 2, 5, 7], 40, seed=1)
    np.savez(tmp_path / "words.npz", X=x, y=y, classes=np.array(["yes", "no", "up", "down"]))
    data = ["--dataset", f"series:{tmp_path / 'words.npz'}"]
    bundle, point = _search_and_export(tmp_path / "kws.pt2", tmp_path, capsys, data)
    assert point["test_accuracy"] > 0.5  # four words: chance is 25 %
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["memory"]["sram_bytes"] == point["memory_bytes"]
    assert manifest["input"]["shape"] == [1, 49, 10] and "normalisation" in manifest["input"]
    assert "tt_quantize_rgb888" not in (bundle / "tt_model.h").read_text()
    assert manifest["input"]["frontend"]["function"] == "tt_input_from_values"
    host = make(bundle, "run-host")
    assert "smoke test passed" in host
    # the example makes each input of the archive's float64 values, as the device would
    windows = manifest["example"]["train_samples"] + manifest["example"]["eval_samples"]
    assert f"front-end: {windows}/{windows} windows give the search's input, byte" in host
    printed = [line for line in host.splitlines() if line.startswith("front-end")]
    printed += _bytes_printed(host)
    for target in ("run-cortex-m7", "run-rv32imc"):
        out = make(bundle, target)
        front = [line for line in out.splitlines() if line.startswith("front-end")]
        assert front + _bytes_printed(out) == printed, target


@needs("aarch64")
@needs("cortex-m7")
@needs("cortex-m4")
@needs("cortex-m0plus")
@needs("rv32imc")
def test_a_keyword_bundle_makes_the_searchs_features_of_its_clips_on_every_core(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], use_session_cache: Path
) -> None:
    """The built-in DS-CNN trained on WAV clips (``tinytune pretrain --network ds-cnn``),
    searched on their log-mel features (``audio:``) and exported: the example makes each input
    of its recorded clip with ``tt_input_from_pcm16`` and compares it with the features the
    search computed of the same WAV file, byte for byte, then trains on them; every core prints
    the host's bytes, and the arena is the planner's."""
    from bench.keywords import make as make_clips

    make_clips(tmp_path / "words", speakers=8, takes=1, keywords=3)
    data = ["--dataset", f"audio:{tmp_path / 'words'}"]
    assert (
        main(["pretrain", "--network", "ds-cnn", *data, "--out", str(tmp_path), "--epochs", "3"])
        == 0
    )
    bundle, point = _search_and_export(tmp_path / "ds-cnn.pt2", tmp_path, capsys, data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    frontend = manifest["input"]["frontend"]
    # the front's memory: the planner's arena, the static data beside it (the engine's, and
    # the front-end's scratch) and the stack
    memory = manifest["memory"]
    assert memory["static_bytes"] > frontend["scratch_bytes"] > 0 and memory["stack_bytes"] > 0
    assert memory["sram_bytes"] == sum(memory[f"{p}_bytes"] for p in ("arena", "static", "stack"))
    assert memory["sram_bytes"] == point["memory_bytes"]
    # the front-end of the point's frames (the search tries 49, 32 and 24)
    spec = LogMelSpec().at(manifest["input"]["shape"][1])
    assert (frontend["function"], frontend["bands"], frontend["frames"], frontend["hop"]) == (
        "tt_input_from_pcm16",
        spec.bands,
        spec.frames,
        spec.hop,
    )
    clips = manifest["example"]["train_samples"] + manifest["example"]["eval_samples"]
    host = make(bundle, "run-host")
    assert f"front-end: {clips}/{clips} clips give the search's input, byte for byte" in host
    assert "smoke test passed" in host
    printed = [line for line in host.splitlines() if line.startswith(("front-end", "epoch"))]
    printed += _bytes_printed(host)[-1:]
    assert "smoke test passed" in make(bundle, "run-host-asan")
    from tinytune.hwmodels.measurements import load_measurements

    make(bundle, "run-profile-rv32imc")  # the front-end's time beside the step's
    measured = load_measurements(bundle / "build" / "profile-rv32imc.json")
    frontend_s, machine = measured.measurements[0].frontend_s, measured.machine
    assert frontend_s is not None  # 49 FFTs of 512 points: 9.5 M instructions retired
    instructions = frontend_s * machine["clock_hz"] / machine["cycles_per_instruction"]
    fit = json.loads(
        resources.files("tinytune.hwmodels").joinpath("data/frontend.json").read_text()
    )
    rate = fit["cores"]["RV32IMC"]["instructions_per_unit"]
    assert instructions == pytest.approx(np.dot(rate, frontend_units(spec)), rel=0.01)
    for target in ("aarch64", "cortex-m7", "cortex-m4", "cortex-m0plus", "rv32imc"):
        out = make(bundle, f"run-{target}")
        assert [
            line for line in out.splitlines() if line.startswith(("front-end", "epoch"))
        ] + _bytes_printed(out)[-1:] == printed, target
