"""Patch-based execution of a user's network's frozen prefix (MCUNetV2): its stem's stage and
the first blocks after it run patch by patch, with rectangular kernels and strides (a DS-CNN's
10×4 stride-2 stem), a ResNet's max pool and its sum with its ReLU, a SqueezeNet's Fire modules
(a concatenation), a sensor's window along time; the patched output equals the whole-image
one bit for bit, the hardware model schedules it under a budget, and the C step
trains as the simulator does, byte for byte, on the host, the Cortex-M7 and the RV32IMC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.bundle.support import needs
from tests.networks.support import ZOO, check_trains_alike_in_c, exported_zoo, samples
from tinytune.errors import ConfigError
from tinytune.evaluators import HardwareConfig, HardwareEvaluator
from tinytune.hwmodels import get_device
from tinytune.ir import block_end, patch_blocks, plan_patches
from tinytune.models import ImportedNetwork, build_candidate
from tinytune.networks import read_network
from tinytune.quant import QuantizedNet, forward, forward_patched, quantize
from tinytune.spaces import Schedule, get_supernet, make_preset


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return exported_zoo(list(ZOO), tmp_path_factory)


def _quantized(path: str, name: str, preset: str = "last") -> QuantizedNet:
    net = build_candidate(
        make_preset(preset, get_supernet(path)), ImportedNetwork(read_network(path)), 5, [],
        seed=0,
    )  # fmt: skip
    return quantize(net, [samples(name, 8, 2)])


@pytest.mark.parametrize(
    ("name", "blocks", "n"),
    [
        ("mbv2", 3, 2),
        ("mbv2", 1, 4),
        ("ds-cnn", 2, 3),
        ("ds-cnn", 0, 5),
        ("resnet8", 2, 2),
        ("resnet18", 1, 2),
        ("resnet18", 3, 2),
        ("squeezenet", 2, 3),
        ("squeezenet", 4, 2),
        ("sensor-1d", 1, 4),
        ("sensor-1d", 1, 3),
    ],
)
def test_the_stage_patch_by_patch_equals_the_whole_image(
    exported: dict[str, str], name: str, blocks: int, n: int
) -> None:
    q = _quantized(exported[name], name)
    plan = plan_patches(q.graph, n, block_end(q.graph, blocks))
    kinds = {op.kind for op in q.graph.ops[: plan.stage_end]}
    assert ("cat" in kinds) == (name == "squeezenet" and blocks > 1)
    assert ("maxpool" in kinds) == (name.startswith(("resnet18", "squeezenet")) and blocks > 0)
    x = q.quantize_input(samples(name, 1, 5))
    whole = forward(q, x).acts[plan.output]
    assert torch.equal(forward_patched(q, x, plan), whole)
    assert len(whole.unique()) > 16  # not a constant tensor
    patched, whole_macs = plan.macs(q.graph)
    if blocks:  # the overlap is recomputed (a stem alone computes each output once)
        assert patched > whole_macs
    else:
        assert patched == whole_macs


def test_a_sensors_window_is_patched_along_time(exported: dict[str, str]) -> None:
    q = _quantized(exported["sensor-1d"], "sensor-1d")
    plan = plan_patches(q.graph, 4, block_end(q.graph, 1))
    assert [(w.r0, w.r1) for w in plan.patches] == [(0, 1)] * 4  # 1 x 4, not 4 x 4
    assert [w.w for w in plan.patches] == [8, 8, 8, 8]  # 32 steps in four
    with pytest.raises(ConfigError) as e:
        plan_patches(q.graph, 40, block_end(q.graph, 1))
    assert "\n" not in str(e.value) and "allowed: 1 .. 32" in str(e.value)


def test_blocks_are_the_stages_after_the_stem(exported: dict[str, str]) -> None:
    q = _quantized(exported["ds-cnn"], "ds-cnn")
    assert patch_blocks(q.graph) == len(get_supernet(exported["ds-cnn"]).stage_convs) - 1
    stem = block_end(q.graph, 0)
    assert [op.kind for op in q.graph.ops[:stem]] == ["conv"]  # the stem's stage alone
    assert q.graph.ops[stem].name.startswith("stages_.1.")


def test_squeeze_and_excitation_ends_what_can_run_patch_by_patch(
    exported: dict[str, str],
) -> None:
    q = _quantized(exported["v3"], "v3")
    plan_patches(q.graph, 2, block_end(q.graph, 0))  # the stem
    with pytest.raises(ConfigError) as e:
        plan_patches(q.graph, 2, block_end(q.graph, 1))  # its global pool needs the whole map
    assert "\n" not in str(e.value) and "is a gap" in str(e.value)


def test_the_hardware_model_schedules_patches_on_a_users_network(
    exported: dict[str, str],
) -> None:
    spec = get_supernet(exported["mbv2"])
    device = get_device("stm32f746")
    evaluator = HardwareEvaluator(spec, 5, HardwareConfig(), device)
    assert evaluator.patch_choices  # a search may ask for patches
    candidate = make_preset("last", spec)
    whole = evaluator(candidate)
    asked = evaluator.schedule(
        type(candidate)(candidate.supernet, candidate.subnet, candidate.lite_residual,
                        candidate.update, Schedule(2, 0))
    )  # fmt: skip
    assert asked.schedule.patched and asked.schedule.blocks >= 1
    patched = evaluator(asked)
    assert patched.arena_bytes < whole.arena_bytes
    assert patched.latency_s > whole.latency_s  # the overlap's recomputation


@needs("cortex-m7")
@needs("rv32imc")
@pytest.mark.parametrize(
    ("name", "blocks", "n"),
    [
        ("ds-cnn", 1, 3),
        ("resnet18", 2, 2),
        ("squeezenet", 2, 2),
        ("sensor-1d", 1, 4),
    ],
)
def test_a_patched_prefix_trains_in_c_as_the_simulator_does_on_every_core(
    exported: dict[str, str], name: str, blocks: int, n: int, tmp_path: Path
) -> None:
    inputs = (samples(name, 16, 2), samples(name, 4, 3), samples(name, 4, 4))
    check_trains_alike_in_c(
        exported[name], "mcunetv3", 5, inputs, tmp_path / "bundle", patches=(n, blocks)
    )


def test_a_network_cut_after_its_stem_has_no_patched_stage(tmp_path: Path) -> None:
    """The built-in 1-D CNN is a stem and one stage of three separable blocks (no shortcut
    splits them), so the search may cut it after its stem: such a candidate (the stem, a pool,
    a new classifier) holds no block to end a patched stage at. The hardware model keeps it
    whole and a schedule that asks for one is refused in one line, not with a traceback."""
    import dataclasses

    from tests.networks.support import save
    from tinytune.builtin_networks import build_network

    torch.manual_seed(0)
    module = build_network("cnn-1d", (3, 1, 64), 5).eval()
    spec = get_supernet(save(module, torch.zeros(1, 3, 1, 64), tmp_path))
    assert (spec.n_stages, spec.min_stages) == (2, 1)
    last = make_preset("last", spec)
    cut = dataclasses.replace(
        last,
        subnet=dataclasses.replace(last.subnet, stages=last.subnet.stages[:1]),
        schedule=Schedule(2, 0),
    )
    evaluator = HardwareEvaluator(spec, 5, HardwareConfig(), get_device("stm32f746"))
    assert not evaluator.schedule(cut).schedule.patched
    graph = evaluator.cost_with_graph(dataclasses.replace(cut, schedule=Schedule(1, 0)))[1]
    assert [op.kind for op in graph.ops] == ["conv", "gap", "linear"] and not patch_blocks(graph)
    with pytest.raises(ConfigError) as e:
        block_end(graph, 0)
    assert "\n" not in str(e.value) and "no block after its stem" in str(e.value)
