"""The patch plan of a frozen prefix: regions computed by hand, the whole-image values
recomputed patch by patch (int8 bit for bit, fp32 to rounding), and the one-line refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.errors import ConfigError
from tinytune.ir import (
    Graph,
    Op,
    ParamInfo,
    Region,
    TensorInfo,
    block_end,
    plan_patches,
    trace,
    unrolled,
)
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.quant import QAdd, QConv, QuantizedNet, forward, forward_patched, quantize
from tinytune.spaces import SubnetConfig, default_subnet, get_supernet, make_preset


def _conv_graph(h: int, k: int, s: int, pad: int) -> Graph:
    """One frozen k×k convolution on (1, 2, h, h), then a classifier."""
    out = (h + 2 * pad - k) // s + 1
    tensors = {
        0: TensorInfo(0, (1, 2, h, h), False),
        1: TensorInfo(1, (1, 2, out, out), False),
        2: TensorInfo(2, (1, 3), True),
    }
    attrs = {"kernel": k, "stride": s, "padding": pad, "groups": 1}
    ops = (
        Op(0, "stem", "conv", (0,), 1, attrs=attrs, params=ParamInfo((2, 2, k, k))),
        Op(1, "classifier", "linear", (1,), 2, params=ParamInfo((3, 2 * out * out))),
    )
    return Graph(ops, tensors, 0, 2, 3)


def test_regions_and_padding_of_one_strided_convolution_by_hand() -> None:
    """3×3, stride 2, padding 1 on 8×8 → 4×4, in 2 × 2 patches: output rows 0–1 read input
    rows −1 … 3 (the first is padding, rows 4 … 7 are not read), rows 2–3 read 3 … 7."""
    g = _conv_graph(8, 3, 2, 1)
    plan = plan_patches(g, 2, 1)
    assert plan.patches == (
        Region(0, 2, 0, 2),
        Region(0, 2, 2, 4),
        Region(2, 4, 0, 2),
        Region(2, 4, 2, 4),
    )
    assert [held[1] for held in plan.held] == list(plan.patches)
    op = g.ops[0]
    # the input is held whole: the padding says where each patch's rows start in it
    assert plan.pads(g, op, 0) == (1, -4, 1, -4)  # (top, bottom, left, right)
    assert plan.pads(g, op, 3) == (-3, 0, -3, 0)
    # 2 × 2 patches compute each output pixel once: no recomputation at the first layer
    assert plan.macs(g) == (g.ops[0].macs, g.ops[0].macs)


def test_a_patch_count_the_image_cannot_take_is_one_line() -> None:
    g = _conv_graph(8, 3, 2, 1)
    with pytest.raises(ConfigError, match=r"5 patches per side .* 4 x 4 \(allowed: 1 \.\. 4\)"):
        plan_patches(g, 5, 1)
    with pytest.raises(ConfigError, match="integer >= 1"):
        plan_patches(g, 0, 1)


def test_a_stage_past_the_first_trained_layer_is_refused() -> None:
    net = tiny_net(SCHEMES["sparse"])  # trains from conv 5 on
    g = trace(net, torch.zeros(1, 3, 16, 16))
    with pytest.raises(ConfigError, match="first layer that trains"):
        plan_patches(g, 2, block_end(g, 2))
    plan_patches(g, 2, block_end(g, 1))  # conv 4 and before: frozen
    with pytest.raises(ConfigError, match=r"covers 0 \.\. 3 blocks of this network, got 9"):
        block_end(g, 9)


def test_a_stage_must_end_between_blocks() -> None:
    net = tiny_net(SCHEMES["last"])
    g = trace(net, torch.zeros(1, 3, 16, 16))
    # block 2's depthwise convolution (stage 3's second op), in a shortcut block
    inside = next(
        op.index
        for op in g.ops
        if op.name.startswith("stages_.3.") and op.kind == "conv" and op.attrs["groups"] > 1
    )
    with pytest.raises(ConfigError, match="hand one tensor"):
        plan_patches(g, 2, inside)


def _float_stage(net: QuantizedNet, x: torch.Tensor, plan, patch: int | None) -> torch.Tensor:
    """The stage in float32 with the network's weights (x − zero, no requantisation): the
    whole image when ``patch`` is None, else one patch's held region of the output."""
    graph = net.graph
    layers = {layer.op.index: layer for layer in net.layers}
    acts = {graph.input: x.float()}
    for op in graph.ops[: plan.stage_end]:
        layer = layers[op.index]
        if isinstance(layer, QConv):
            w = (layer.weight * layer.w_scale.view(-1, 1, 1, 1)).float()
            pads = graph.pads(op) if patch is None else plan.pads(graph, op, patch)
            top, bottom, left, right = pads
            xin = F.pad(acts[op.inputs[0]], (left, right, top, bottom))
            acts[op.output] = torch.relu(F.conv2d(xin, w, None, layer.stride, 0, 1, layer.groups))
        else:
            assert isinstance(layer, QAdd)
            if patch is None:
                a, b = (acts[t] for t in op.inputs)
            else:
                held, win = plan.held[patch], plan.held[patch][op.output]
                a, b = (
                    acts[t][..., win.r0 - held[t].r0 : win.r1 - held[t].r0,
                            win.c0 - held[t].c0 : win.c1 - held[t].c0]
                    for t in op.inputs
                )  # fmt: skip
            acts[op.output] = a + b
    return acts[plan.output]


def _lite0(resolution: int) -> QuantizedNet:
    spec = get_supernet("efficientnet-lite0")
    subnet = SubnetConfig(resolution, default_subnet(spec, "max").stages[:3])
    candidate = make_preset("mcunetv3", spec, subnet)
    calib = images(4, resolution=resolution)
    net = build_candidate(candidate, build_ofa_supernet(spec, 10, seed=0), 10, [calib], seed=0)
    return quantize(net, [calib])


def _proxyless(resolution: int) -> QuantizedNet:
    spec = get_supernet("ofa-proxyless-w0.35")
    candidate = make_preset("mcunetv3", spec)
    candidate = replace(candidate, subnet=replace(candidate.subnet, resolution=resolution))
    calib = images(4, resolution=resolution)
    net = build_candidate(candidate, build_ofa_supernet(spec, 10, seed=0), 10, [calib], seed=0)
    return quantize(net, [calib])


@pytest.mark.parametrize(
    ("network", "resolution", "blocks", "n"),
    [
        ("lite0", 64, 4, 4),  # 5×5 depthwise layers at stride 2, the SAME padding if trained so
        ("lite0", 64, 2, 3),
        ("proxyless", 48, 3, 2),
        ("proxyless", 48, 5, 3),  # uneven patches: 6 rows in 3
    ],
)
def test_the_stage_patch_by_patch_equals_the_whole_image(network, resolution, blocks, n) -> None:
    """int8: the simulator's patched stage output equals its whole-image output bit for bit;
    fp32: each patch's output region equals the whole computation's to rounding."""
    q = _lite0(resolution) if network == "lite0" else _proxyless(resolution)
    plan = plan_patches(q.graph, n, block_end(q.graph, blocks))
    x = q.quantize_input(images(1, seed=5, resolution=resolution))
    whole = forward(q, x).acts[plan.output]
    assert torch.equal(forward_patched(q, x, plan), whole)
    assert len(whole.unique()) > 16  # not a constant tensor
    xf = x.float() - q.acts[q.graph.input].zero
    whole_f = _float_stage(q, xf, plan, None)
    for p, window in enumerate(plan.patches):
        r = plan.held[p][plan.output]
        got = _float_stage(q, xf, plan, p)
        want = whole_f[..., r.r0 : r.r1, r.c0 : r.c1]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
        assert r.contains(window)
    patched, whole_macs = plan.macs(q.graph)
    assert patched > whole_macs  # the overlap is recomputed


def test_padding_appears_only_at_the_image_border() -> None:
    """Inside the image a patch's region holds every row its convolutions read: positive
    padding only on a side where the region meets the tensor's border."""
    q = _proxyless(48)
    g = q.graph
    plan = plan_patches(g, 3, block_end(g, 5))
    for p, held in enumerate(plan.held):
        for op in g.ops[: plan.stage_end]:
            if op.kind != "conv":
                continue
            top, bottom, left, right = plan.pads(g, op, p)
            x = held.get(op.inputs[0], Region(0, 48, 0, 48))
            _, _, h, w = g.tensors[op.inputs[0]].shape
            assert top <= 0 or x.r0 == 0
            assert left <= 0 or x.c0 == 0
            assert bottom <= 0 or x.r1 == h
            assert right <= 0 or x.c1 == w


def test_the_latency_model_prices_the_recomputed_overlap() -> None:
    """One patch is the whole computation, priced alike; more patches price every op of the
    stage once per patch on its region: more multiply-accumulates and more calls."""
    from tinytune.hwmodels import get_device, predict_latency

    q = _proxyless(48)
    g = q.graph
    coefficients = get_device("stm32f746").coefficients
    end = block_end(g, 4)
    whole = predict_latency(g, coefficients, 1)
    one = predict_latency(g, coefficients, 1, plan_patches(g, 1, end))
    assert one.train_step_s == pytest.approx(whole.train_step_s, rel=1e-12)
    three = plan_patches(g, 3, end)
    patched = predict_latency(g, coefficients, 1, three)
    assert patched.train_step_s > whole.train_step_s
    flat = unrolled(g, three)
    assert len(flat.ops) == len(g.ops) + 8 * end
    assert sum(op.macs for op in flat.ops[: 9 * end]) == three.macs(g)[0]
