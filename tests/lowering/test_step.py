"""Whole training steps in C against the int8 simulator, bit for bit.

A quantized network's step is lowered (:func:`tinytune.lowering.program.lower_step`) onto the
memory planner's arena and run, step after step, by ``csrc/step_driver.c`` — once built with
``-O2`` and once with the address and undefined-behaviour sanitizers. After every call the
driver dumps what it wrote (activations, logits, masked gradients, gradients with their
exponents) and, after every step, the trained parameters; each dump must equal the simulator's
value exactly.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.lowering.harness import build_driver, encode_program, needs_gcc, run_steps
from tests.quant.nets import (
    LITE_RESOLUTION,
    MBV3_SCHEMES,
    SCHEMES,
    images,
    lite_net,
    tiny_mbv3_net,
    tiny_net,
)
from tinytune.evaluators.hardware import HardwareConfig, hardware_cost
from tinytune.hwmodels import MemoryReport, plan_memory
from tinytune.ir import block_end, plan_patches
from tinytune.lowering.program import Ptr, StepProgram, lower_step
from tinytune.models import GraphNet, build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.quant import QConv, QGroupNorm, QLinear, QuantizedNet, quantize, train_step
from tinytune.quant.simulate import StepRecord
from tinytune.spaces import get_supernet, make_preset

pytestmark = needs_gcc

LR = 0.01


@pytest.fixture(scope="module", params=["O2", "sanitized"])
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_driver("step_driver", request.param, tmp_path_factory.mktemp("step_driver"))


def _param_dumps(program: StepProgram) -> list[tuple[int, Ptr, int, None]]:
    end = len(program.calls)
    return [
        (end, ptr, int(np.prod(shape)) * np.dtype(dtype).itemsize, None)
        for ptr, dtype, shape in program.params.values()
    ]


def _expected_step(program: StepProgram, net: QuantizedNet, record: StepRecord) -> list:
    """What the dumps of one step must hold, in dump order, from the simulator."""
    writes_into: dict[int, list] = {}
    for e in record.emits:
        writes_into.setdefault(e.tensor, []).append(e.after)
    seen: dict[int, int] = {}
    out: list = []
    for w in program.writes:
        if w.kind == "act":
            out.append(record.forward.acts[w.tensor].flatten().numpy().astype(np.int8))
        elif w.kind == "logits":
            out.append(record.forward.logits[0].astype(np.float32))
        elif w.kind == "masked":
            out.append(record.grads[w.tensor].mantissa.flatten().numpy().astype(np.int8))
        elif w.kind == "activated":
            g = record.grads[w.tensor]
            out += [g.mantissa.flatten().numpy().astype(np.int8), np.array([g.exp], np.int32)]
        else:
            k = seen.get(w.tensor, 0)
            seen[w.tensor] = k + 1
            history = writes_into.get(w.tensor)
            if history:
                g = history[k]
            elif program.calls[w.call].kernel == "linear_f32_backward":
                g = record.feature_grad  # as written, before an activation table changes it
            else:
                g = record.grads[w.tensor]  # a GroupNorm's fresh write
            assert g is not None
            out += [g.mantissa.flatten().numpy().astype(np.int8), np.array([g.exp], np.int32)]
    state = _state(net)
    out += [state[name] for name in program.params]
    return out


def _state(net: QuantizedNet) -> dict[str, np.ndarray]:
    state: dict[str, np.ndarray] = {}
    for layer in net.layers:
        name = layer.op.name
        if isinstance(layer, QLinear | QGroupNorm):
            state[f"{name}.weight"] = layer.weight.astype(np.float32)
            if layer.bias is not None:
                state[f"{name}.bias"] = layer.bias.astype(np.float32)
        elif isinstance(layer, QConv):
            train, _ = layer.split_weight()
            state[f"{name}.weight_train"] = train.numpy().astype(np.int8)
            state[f"{name}.bias"] = layer.bias.numpy().astype(np.int32)
    return state


def _as_bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def run_and_compare(
    driver: Path,
    net: QuantizedNet,
    xs: torch.Tensor,
    labels: list[int],
    report: MemoryReport | None = None,
) -> int:
    """Lower ``net``'s step (onto ``report``'s arena, default the planner's), run it in C over
    (xs, labels), replay it in the simulator on a copy, and compare every dump; returns the
    number of arrays compared."""
    program = lower_step(net, LR, report)
    dumps = [(w.call, w.ptr, w.nbytes, w.exp_slot) for w in program.writes]
    dumps += _param_dumps(program)
    got = run_steps(driver, encode_program(program, dumps), xs.numpy(), labels)
    sim = net.clone()
    expected: list[np.ndarray] = []
    for i, label in enumerate(labels):
        record = train_step(sim, xs[i : i + 1], label, LR)
        expected += _expected_step(program, sim, record)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.tobytes() == _as_bytes(e), f"dump {k} of {len(expected)} differs"
    return len(expected)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_tiny_network_steps_match_the_simulator(driver, scheme):
    net = tiny_net(SCHEMES[scheme])
    q = quantize(net, [images(16)])
    xs = q.quantize_input(images(4, seed=21))
    compared = run_and_compare(driver, q, xs, [1, 4, 0, 2])
    assert compared >= 4 * len(q.layers)  # every activation of every step, at least


@pytest.mark.parametrize("scheme", list(MBV3_SCHEMES))
def test_tiny_mobilenetv3_steps_match_the_simulator(driver, scheme):
    """h-swish everywhere, two squeeze-and-excitation blocks; with "mbv3 bias+se" the first
    block's product needs only the gradient of its scale (its x has none)."""
    q = quantize(tiny_mbv3_net(MBV3_SCHEMES[scheme]), [images(16)])
    xs = q.quantize_input(images(4, seed=21))
    assert run_and_compare(driver, q, xs, [1, 4, 0, 2]) >= 4 * len(q.layers)


@pytest.mark.parametrize("case", ["sparse", "lite", "mbv3"])
def test_program_lies_in_the_arena_the_search_predicted(case):
    """The lowered step uses the planner's buffers at their offsets and sizes: its arena is
    the one the search's hardware evaluator predicts for the same network, byte for byte, and
    each trained parameter sits in its op's ``weights`` buffer."""
    if case == "lite":
        net, r = lite_net(SCHEMES["bias+pw 1/4"]), LITE_RESOLUTION
    elif case == "mbv3":
        net, r = _real_net("mcunetv3", "ofa-mbv3-w0.35"), 32
    else:
        net, r = tiny_net(SCHEMES[case]), 16
    q = quantize(net, [images(16, resolution=r)])
    _, predicted = hardware_cost(net, HardwareConfig())
    report = plan_memory(q.graph, precision="int8")
    program = lower_step(q, LR)
    assert program.arena_bytes == report.arena_bytes == predicted.arena_bytes
    offsets = {b.name: o for b, o in zip(report.buffers, report.layout.offsets, strict=True)}
    for name, (ptr, dtype, shape) in program.params.items():
        op = name.rsplit(".", 1)[0]
        start = offsets[f"{op}:weights"]
        size = next(b.nbytes for b in report.buffers if b.name == f"{op}:weights")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        assert start <= ptr.offset and ptr.offset + nbytes <= start + size
    for call in program.calls:
        for _, value in call.operands:
            if isinstance(value, Ptr) and value.space == "arena":
                assert 0 <= value.offset < report.arena_bytes
    # frozen weights are constants, never arena buffers
    assert any(name.endswith(".weight_frozen") for name in program.flash)
    # and the arena holds nothing the step does not use (no parameter gradient: fused)
    assert {b.name for b in report.buffers} - program.buffers_used == set()
    assert not any(b.category == "param_gradient" for b in report.buffers)


def _real_net(preset: str, family: str = "ofa-proxyless-w0.35") -> GraphNet:
    """Preset ``preset`` on the smallest sub-network of ``family`` at 32 px."""
    spec = get_supernet(family)
    candidate = make_preset(preset, spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=32))
    calib = images(8, resolution=32)
    return build_candidate(candidate, build_ofa_supernet(spec, 40, seed=0), 10, [calib], seed=0)


def _real_candidate(preset: str, family: str = "ofa-proxyless-w0.35") -> QuantizedNet:
    """:func:`_real_net`, quantized."""
    return quantize(_real_net(preset, family), [images(8, resolution=32)])


def test_real_proxyless_candidate_steps_match_the_simulator(driver):
    """The MCUNetV3-style preset: the biases of the last half of the convolutions, six
    expansion convolutions, two of them on 1/8 and 1/4 of their input channels."""
    q = _real_candidate("mcunetv3")
    partial = [
        layer for layer in q.layers
        if isinstance(layer, QConv) and 0 < layer.trained_channels < layer.weight.shape[1]
    ]  # fmt: skip
    assert len(partial) == 2
    xs = q.quantize_input(images(2, seed=8, resolution=32))
    run_and_compare(driver, q, xs, [3, 7])


def test_lite_network_steps_match_the_simulator(driver):
    """Lite residual branches (average pooling, group convolutions, GroupNorm with ReLU and
    without, bilinear upsampling) on two blocks, over four steps."""
    q = quantize(lite_net(SCHEMES["bias+pw 1/4"]), [images(16, resolution=LITE_RESOLUTION)])
    xs = q.quantize_input(images(4, seed=21, resolution=LITE_RESOLUTION))
    run_and_compare(driver, q, xs, [1, 4, 0, 2])


def test_real_tinytl_candidate_steps_match_the_simulator(driver):
    """TinyTL-L+B: a lite residual on every block but the first, and every bias."""
    q = _real_candidate("tinytl")
    assert sum(isinstance(layer, QGroupNorm) for layer in q.layers) >= 20
    xs = q.quantize_input(images(2, seed=9, resolution=32))
    run_and_compare(driver, q, xs, [5, 0])


@pytest.mark.parametrize("preset", ["mcunetv3", "full"])
def test_real_mobilenetv3_candidate_steps_match_the_simulator(driver, preset):
    """MobileNetV3: h-swish and h-sigmoid through their tables, squeeze-and-excitation
    forward and backward (the product's two gradients, the pooled branch's accumulation)."""
    q = _real_candidate(preset, "ofa-mbv3-w0.35")
    kinds = {(layer.op.kind, layer.op.act) for layer in q.layers}
    assert {("conv", "hswish"), ("conv", "hsigmoid"), ("mul", "none")} <= kinds
    tables = [n for n in q.layers if isinstance(n, QConv) and n.keeps_pre_activation]
    assert any(q.graph.tensors[n.op.output].requires_grad for n in tables)
    xs = q.quantize_input(images(2, seed=8, resolution=32))
    run_and_compare(driver, q, xs, [3, 7])


def test_depthwise_layers_run_in_place():
    """The frozen depthwise convolutions of the MCUNetV3-style preset write over their
    inputs: the planner shares the buffers, the step calls the in-place kernel (the steps
    above compare their values), and the arena is smaller than with separate outputs."""
    q = _real_candidate("mcunetv3")
    report = plan_memory(q.graph, precision="int8")
    program = lower_step(q, LR)
    in_place = [c for c in program.calls if c.kernel == "conv2d_inplace_s8"]
    assert len(in_place) == len(report.aliases) >= 3
    for call in in_place:
        op = next(o for o in q.graph.ops if o.name == call.op)
        assert report.buffer_of(op.output) == report.buffer_of(op.inputs[0])


@pytest.mark.parametrize(("blocks", "n"), [(2, 2), (3, 3), (4, 4)])
def test_patched_prefix_steps_match_the_simulator(driver, blocks, n):
    """The frozen prefix run patch by patch (regions, in-place crops, the output placed
    patch by patch) leaves the bytes of the whole-image computation: every later activation,
    gradient and parameter equals the simulator's, step after step, in an arena the patch
    plan sizes."""
    q = _real_candidate("mcunetv3")
    plan = plan_patches(q.graph, n, block_end(q.graph, blocks))
    report = plan_memory(q.graph, precision="int8", patches=plan)
    program = lower_step(q, LR, report)
    assert program.arena_bytes == report.arena_bytes
    assert sum(c.kernel == "window_s8" for c in program.calls) >= n * n
    xs = q.quantize_input(images(2, seed=8, resolution=32))
    run_and_compare(driver, q, xs, [3, 7], report)
