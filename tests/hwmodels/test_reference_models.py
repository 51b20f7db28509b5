"""Reference networks: MACs against the published counts and hand-computed layers; shapes
against torch's own convolution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tinytune.errors import ConfigError
from tinytune.hwmodels.latency import OP_CLASSES, LatencyCoefficients, op_class, predict_latency
from tinytune.hwmodels.memory import plan_memory
from tinytune.hwmodels.reference_models import (
    MLPERF_TINY_MODELS,
    build_reference,
    conv_linear_macs,
    mobilenet_v1_id,
    mobilenet_v2_id,
)
from tinytune.ir import OP_KINDS, Graph

PUBLISHED_MACS = [  # reference/hw-measurements.md §1 conventions and §1d, in MACs
    ("mlperf-ic-resnet8", 12.50e6),
    ("mlperf-vww-mobilenetv1", 7.49e6),
    ("mlperf-kws-dscnn", 2.66e6),
    ("mlperf-ad-autoencoder", 0.264e6),
    (mobilenet_v1_id(1.0, 224), 569e6),
    (mobilenet_v1_id(0.5, 224), 149e6),
    (mobilenet_v1_id(0.25, 224), 41e6),
    (mobilenet_v2_id(1.0, 224), 300e6),
    (mobilenet_v2_id(1.4, 224), 582e6),
    (mobilenet_v2_id(0.35, 224), 59e6),
]
ALL_IDS = [m for m, _ in PUBLISHED_MACS] + [
    mobilenet_v1_id(0.25, 96, 1, 5),
    mobilenet_v2_id(0.35, 128, 5),
]


@pytest.mark.parametrize(("model", "published"), PUBLISHED_MACS)
def test_macs_match_the_published_counts(model: str, published: float) -> None:
    assert conv_linear_macs(build_reference(model)) == pytest.approx(published, rel=0.01)


def test_mlperf_macs_by_hand() -> None:
    ic = (
        32 * 32 * 16 * 3 * 9  # stem
        + 2 * 32 * 32 * 16 * 16 * 9  # stack 1
        + 16 * 16 * 32 * (16 * 9 + 32 * 9 + 16)  # stack 2 with its 1×1 shortcut
        + 8 * 8 * 64 * (32 * 9 + 64 * 9 + 32)  # stack 3
        + 64 * 10  # classifier
    )
    assert conv_linear_macs(build_reference("mlperf-ic-resnet8")) == ic == 12_501_632
    ad = 2 * 640 * 128 + 6 * 128 * 128 + 2 * 128 * 8
    assert conv_linear_macs(build_reference("mlperf-ad-autoencoder")) == ad == 264_192
    kws = 25 * 5 * 64 * (10 * 4) + 4 * 25 * 5 * 64 * (9 + 64) + 64 * 12
    assert conv_linear_macs(build_reference("mlperf-kws-dscnn")) == kws == 2_656_768


def test_dscnn_layers_by_hand() -> None:
    g = build_reference("mlperf-kws-dscnn")
    stem, dw, pw = g.ops[:3]
    assert stem.params.weight_shape == (64, 1, 10, 4)
    assert stem.attrs["kernel"] == 10 and stem.attrs["stride"] == 2
    assert g.tensors[stem.output].shape == (1, 64, 25, 5)  # ⌈49/2⌉ × ⌈10/2⌉
    assert stem.macs == 25 * 5 * 64 * 10 * 4 == 320_000
    assert dw.params.weight_shape == (64, 1, 3, 3) and dw.attrs["groups"] == 64
    assert dw.macs == 25 * 5 * 64 * 9 == 72_000
    assert pw.macs == 25 * 5 * 64 * 64 == 512_000
    assert [op_class(op) for op in g.ops[:3]] == ["conv_kxk", "conv_dw", "conv_pw"]
    assert g.tensors[g.output].shape == (1, 12) and g.n_classes == 12


def test_structure() -> None:
    ic = build_reference("mlperf-ic-resnet8")
    assert [op.kind for op in ic.ops].count("add") == 3
    shortcuts = [op for op in ic.ops if op.role == "shortcut"]
    assert [(op.attrs["kernel"], op.attrs["stride"]) for op in shortcuts] == [(1, 2), (1, 2)]
    vww = build_reference("mlperf-vww-mobilenetv1")
    assert [op_class(op) for op in vww.ops].count("conv_dw") == 13
    assert vww.tensors[vww.ops[-3].output].shape == (1, 256, 3, 3)  # 96 / 2^5
    mbv2 = build_reference(mobilenet_v2_id(1.0, 224))
    assert sum(op.params.weight + op.params.bias for op in mbv2.ops) == pytest.approx(
        3.5e6, rel=0.01
    )  # the published 3.5 M parameters
    assert [op.kind for op in mbv2.ops].count("add") == 10  # repeated blocks of equal shape


@pytest.mark.parametrize("model", ALL_IDS)
def test_graph_invariants(model: str) -> None:
    g = build_reference(model)
    written = {g.input}
    for i, op in enumerate(g.ops):
        assert op.index == i and op.kind in OP_KINDS
        assert set(op.inputs) <= written  # execution order
        written.add(op.output)
        assert op.params.trained == 0
        if op.kind == "conv":
            c_out, c_in_per_group, kh, kw = op.params.weight_shape
            assert op.macs == g.tensors[op.output].numel * c_in_per_group * kh * kw
            assert op.params.bias == c_out == g.tensors[op.output].shape[1]
    assert not any(t.requires_grad for t in g.tensors.values())
    assert g.output == g.ops[-1].output and g.batch_size == 1
    assert Graph.from_json(g.to_json()) == g


@pytest.mark.parametrize(
    "model", ["mlperf-ic-resnet8", "mlperf-vww-mobilenetv1", mobilenet_v2_id(0.35, 128, 5)]
)
def test_conv_shapes_agree_with_torch(model: str) -> None:
    g = build_reference(model)
    for op in g.ops:
        if op.kind != "conv":
            continue
        x = torch.zeros(g.tensors[op.inputs[0]].shape)
        w = torch.zeros(op.params.weight_shape)
        a = op.attrs
        y = F.conv2d(x, w, stride=a["stride"], padding=a["padding"], groups=a["groups"])
        assert tuple(y.shape) == g.tensors[op.output].shape, op.name


@pytest.mark.parametrize("model", sorted(MLPERF_TINY_MODELS))
def test_cost_models_run(model: str) -> None:
    g = build_reference(model)
    coef = LatencyCoefficients({c: {"forward": (1.0, 0.0, 0.0, 0.0)} for c in OP_CLASSES})
    report = predict_latency(g, coef)
    assert report.inference_s == report.train_step_s == g.total_macs()  # frozen: forward only
    assert plan_memory(g).peak_bytes > 0


@pytest.mark.parametrize(
    "model",
    ["resnet50", "mobilenetv1-a0.25-r96", "mobilenetv2-a1.2.3-r96-n5", "mobilenetv1-a0-r96-c3-n2"],
)
def test_unknown_or_bad_ids(model: str) -> None:
    with pytest.raises(ConfigError):
        build_reference(model)
