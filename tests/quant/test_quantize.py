"""Post-training int8 quantization: parameters within half a step of the float values, the
integer forward pass against the real-valued requantisation it approximates and against the
float network, calibration, and the errors for what int8 does not cover."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.models import build_candidate
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.quant import ActQuant, QConv, QuantizationError, forward, quantize
from tinytune.quant.ranges import observe_ranges
from tinytune.spaces import get_supernet, make_preset

F64 = torch.float64


@pytest.fixture(scope="module")
def quantized():
    net = tiny_net(SCHEMES["sparse"])
    calib = images(32)
    return net, quantize(net, [calib[:16], calib[16:]]), calib


def test_weights_and_biases_are_within_half_a_step(quantized):
    net, q, _ = quantized
    convs = {c.index: c for c in net.convs()}
    for layer in q.layers:
        if not isinstance(layer, QConv):
            continue
        module = net.get_submodule(layer.op.name)
        assert module.index in convs
        w = module.full_weight().double()
        s_w = layer.w_scale.view(-1, 1, 1, 1)
        assert int(layer.weight.abs().max()) <= 127
        assert torch.equal(
            layer.weight.abs().flatten(1).max(dim=1).values, torch.full_like(layer.bias, 127)
        )
        assert torch.all((layer.weight * s_w - w).abs() <= s_w / 2 + 1e-12)
        s_b = q.acts[layer.op.inputs[0]].scale * layer.w_scale
        b = module.bias.detach().double()
        assert torch.all((layer.bias * s_b - b).abs() <= s_b / 2 + 1e-12)


def test_activation_ranges_map_onto_int8():
    for lo, hi in [(0.0, 6.0), (-1.5, 3.0), (-2.0, 0.0), (0.3, 0.9)]:
        a = ActQuant.from_range(lo, hi)
        assert a.dequantize(torch.tensor(a.zero)) == 0.0  # zero is exact
        lo0, hi0 = min(lo, 0.0), max(hi, 0.0)
        assert abs(a.dequantize(torch.tensor(-128)) - lo0) <= a.scale
        assert abs(a.dequantize(torch.tensor(127)) - hi0) <= a.scale


def _requant_exact(layer: QConv, q, acts) -> tuple[torch.Tensor, torch.Tensor]:
    """The real-valued requantisation z_y + s_x·s_w/s_y·acc of the simulator's own int8 input,
    in float64 (exact up to 2^-52 relative), and its bound on the fixed-point error."""
    op = layer.op
    x_q, y_q = q.acts[op.inputs[0]], q.acts[op.output]
    xs = (acts[op.inputs[0]] - x_q.zero).double()
    acc = F.conv2d(xs, layer.weight.double(), None, layer.stride, layer.padding, 1, layer.groups)
    acc = acc + layer.bias.double().view(1, -1, 1, 1)
    real = (x_q.scale * layer.w_scale / y_q.scale).view(1, -1, 1, 1)
    return y_q.zero + real * acc, real * acc.abs() * 2.0**-30 + 1e-9


def test_integer_forward_is_the_rounded_real_requantisation(quantized):
    """Every convolution output is round(z_y + s_x·s_w/s_y·acc) clamped, up to the 2^-31
    relative error of the fixed-point multiplier: it may differ only at near-ties."""
    _, q, calib = quantized
    record = forward(q, q.quantize_input(calib))
    differ = 0
    for layer in q.layers:
        if not isinstance(layer, QConv):
            continue
        exact, slack = _requant_exact(layer, q, record.acts)
        y = record.acts[layer.op.output].double()
        ideal = torch.clamp(torch.floor(exact + 0.5), layer.act_min, layer.act_max)
        frac = (exact + 0.5) - torch.floor(exact + 0.5)
        near_tie = (frac < slack) | (1 - frac < slack)
        assert torch.all((y == ideal) | near_tie)
        differ += int((y != ideal).sum())
    assert differ <= 2


def test_integer_forward_follows_the_float_network(quantized):
    net, q, calib = quantized
    record = forward(q, q.quantize_input(calib))
    with torch.no_grad():
        ref = net(calib).numpy()
    cos = (record.logits * ref).sum() / np.linalg.norm(record.logits) / np.linalg.norm(ref)
    assert cos > 0.999
    assert np.abs(record.logits - ref).max() < 0.05 * np.abs(ref).max()
    assert (record.logits.argmax(1) == ref.argmax(1)).mean() >= 0.9


def test_minmax_calibration_covers_every_value_and_percentile_clips_less_than_it(quantized):
    net, q, calib = quantized
    minmax = observe_ranges(net, q.graph, [calib])
    pct = observe_ranges(net, q.graph, [calib], method="percentile", percentile=99.0)
    for t, (lo, hi) in minmax.items():
        assert pct[t][0] >= lo and pct[t][1] <= hi
    # the network input's range is that of the images
    lo, hi = minmax[q.graph.input]
    assert lo == pytest.approx(float(calib.min())) and hi == pytest.approx(float(calib.max()))
    for t in minmax:
        assert q.acts[t] == ActQuant.from_range(*minmax[t])


def test_calibration_errors():
    net = tiny_net(SCHEMES["last"])
    with pytest.raises(QuantizationError, match="calibration method 'kl'"):
        quantize(net, [images(2)], method="kl")
    with pytest.raises(QuantizationError, match="at least one batch"):
        quantize(net, [])


@pytest.mark.parametrize("family", ["ofa-proxyless-w0.35", "ofa-mbv3-w0.35"])
def test_real_candidate_quantizes_and_follows_the_float_network(family):
    spec = get_supernet(family)
    supernet = build_ofa_supernet(spec, 40, seed=0)
    candidate = make_preset("mcunetv3", spec)
    r = candidate.subnet.resolution
    calib = images(16, resolution=r)
    net = build_candidate(candidate, supernet, 10, [calib], seed=0)
    q = quantize(net, [calib])
    record = forward(q, q.quantize_input(calib))
    with torch.no_grad():
        ref = net(calib).numpy()
    cos = (record.logits * ref).sum() / np.linalg.norm(record.logits) / np.linalg.norm(ref)
    # 45 ops of a randomly initialised supernet: int8 noise (about 1 % of an activation's spread
    # per layer) compounds to about a third of the pooled features' norm; logits still align
    assert cos > 0.9


def test_tinytl_candidate_with_lite_residuals_quantizes():
    """Lite residual branches on every block but the first: average pooling, group
    convolutions, GroupNorm and bilinear upsampling all quantize, and the int8 network follows
    the float one."""
    spec = get_supernet("ofa-proxyless-w0.35")
    candidate = make_preset("tinytl", spec)
    r = candidate.subnet.resolution
    calib = images(8, resolution=r)
    net = build_candidate(candidate, build_ofa_supernet(spec, 40, seed=0), 10, [calib], seed=0)
    q = quantize(net, [calib])
    kinds = {layer.op.kind for layer in q.layers}
    assert {"avgpool", "groupnorm", "conv", "add", "gap", "linear"} <= kinds
    record = forward(q, q.quantize_input(calib))
    with torch.no_grad():
        ref = net(calib).numpy()
    cos = (record.logits * ref).sum() / np.linalg.norm(record.logits) / np.linalg.norm(ref)
    assert cos > 0.9


@pytest.mark.parametrize(
    ("supernet", "preset", "match"),
    [
        ("ofa-mbv3-w0.35", "bn+last", "trained per-channel scale"),
        ("ofa-proxyless-w0.35", "bn+last", "trained per-channel scale"),
    ],
)
def test_unsupported_networks_raise(supernet, preset, match):
    spec = get_supernet(supernet)
    candidate = make_preset(preset, spec)
    r = candidate.subnet.resolution
    calib = torch.randn(2, 3, r, r, generator=torch.Generator().manual_seed(0))
    net = build_candidate(candidate, build_ofa_supernet(spec, 40, seed=0), 10, [calib])
    with pytest.raises(QuantizationError, match=match):
        quantize(net, [calib])
