"""Published reference networks as inference graphs, for calibrating latency profiles.

The whole-model latencies that vendors and benchmarks publish (``reference/hw-measurements.md``
§1c, §1d) were measured on networks whose architectures are public. This module rebuilds them
as :class:`~tinytune.ir.Graph` objects — batch 1, every parameter frozen, BatchNorm folded into
the convolution bias, activations fused into the op that precedes them — so that the latency
model reads them exactly as it reads a traced candidate:

* the four MLPerf Tiny reference models (``mlcommons/tiny`` at tags v0.5–v1.1): IC ResNet-8 on
  32×32×3, VWW MobileNetV1-0.25 on 96×96×3, KWS DS-CNN (64 filters) on 49×10×1 MFCC, AD
  fully-connected auto-encoder 640→128×4→8→128×4→640;
* Keras-style MobileNetV1 (α, resolution, input channels, classes) and MobileNetV2 (α,
  resolution, classes), the networks of the ST model-zoo rows.

MAC convention. ``op.macs`` follows the tracer (:func:`tinytune.ir.trace`): a convolution counts
output elements × (C_in / groups) × k_h × k_w, a linear layer output × input features, global
pooling one per element read and an addition one per output element. The published counts
(IC 12.50 M, VWW 7.49 M, KWS 2.66 M, AD 0.264 M; MobileNetV1 α = 1.0/0.5/0.25 at 224 = 569/149/
41 M; MobileNetV2 α = 1.0/1.4/0.35 at 224 = 300/582/59 M) count the multiply-accumulates of
convolution and linear weights only — the classifier included, bias adds, pooling, additions
and activations excluded; :func:`conv_linear_macs` returns that figure.

A kernel that is not square (DS-CNN's 10×4) keeps its exact ``weight_shape`` and MACs and
reports its larger side as ``attrs["kernel"]``. Reference models are identified by strings
(:func:`build_reference`), because calibration data name them.
"""

from __future__ import annotations

import functools
import math
import re

from tinytune.errors import ConfigError
from tinytune.ir import Graph, Op, ParamInfo, TensorInfo

__all__ = [
    "MLPERF_TINY_MODELS",
    "build_reference",
    "conv_linear_macs",
    "mlperf_ad_autoencoder",
    "mlperf_ic_resnet8",
    "mlperf_kws_dscnn",
    "mlperf_vww_mobilenetv1",
    "mobilenet_v1",
    "mobilenet_v1_id",
    "mobilenet_v2",
    "mobilenet_v2_id",
]


class _GraphBuilder:
    """Appends frozen inference ops in execution order and keeps track of tensor shapes."""

    def __init__(self, input_shape: tuple[int, ...]) -> None:
        self.tensors: dict[int, TensorInfo] = {}
        self.ops: list[Op] = []
        self.n_convs = 0
        self.input = self._tensor(input_shape)

    def _tensor(self, shape: tuple[int, ...]) -> int:
        tid = len(self.tensors)
        self.tensors[tid] = TensorInfo(tid, shape, False)
        return tid

    def shape(self, t: int) -> tuple[int, ...]:
        return self.tensors[t].shape

    def _op(
        self,
        kind: str,
        inputs: tuple[int, ...],
        shape: tuple[int, ...],
        *,
        macs: int,
        name: str = "",
        act: str = "none",
        role: str = "",
        conv_index: int | None = None,
        attrs: dict[str, int] | None = None,
        params: ParamInfo | None = None,
    ) -> int:
        out = self._tensor(shape)
        self.ops.append(
            Op(
                index=len(self.ops),
                name=name or f"{kind}{len(self.ops)}",
                kind=kind,
                inputs=inputs,
                output=out,
                act=act,
                conv_index=conv_index,
                role=role,
                attrs=attrs or {},
                params=params or ParamInfo(),
                macs=macs,
            )
        )
        return out

    def conv(
        self,
        x: int,
        c_out: int,
        kernel: int | tuple[int, int],
        *,
        stride: int = 1,
        depthwise: bool = False,
        act: str = "relu",
        role: str = "",
    ) -> int:
        """A convolution with 'same' padding (output ⌈H/stride⌉ × ⌈W/stride⌉) and a bias."""
        n, c_in, h, w = self.shape(x)
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        groups = c_in if depthwise else 1
        if depthwise:
            c_out = c_in
        out_shape = (n, c_out, math.ceil(h / stride), math.ceil(w / stride))
        weight_shape = (c_out, c_in // groups, kh, kw)
        index = self.n_convs
        self.n_convs += 1
        return self._op(
            "conv",
            (x,),
            out_shape,
            name=f"conv{index}.{role}" if role else f"conv{index}",
            act=act,
            conv_index=index,
            role=role,
            attrs={
                "kernel": max(kh, kw),
                "stride": stride,
                "padding": max(kh, kw) // 2,
                "groups": groups,
            },
            params=ParamInfo(weight_shape=weight_shape, bias=c_out),
            macs=math.prod(out_shape) * (c_in // groups) * kh * kw,
        )

    def add(self, a: int, b: int, *, act: str = "none") -> int:
        shape = self.shape(a)
        assert shape == self.shape(b), (shape, self.shape(b))
        return self._op("add", (a, b), shape, act=act, macs=math.prod(shape))

    def gap(self, x: int) -> int:
        n, c, _, _ = self.shape(x)
        return self._op("gap", (x,), (n, c, 1, 1), macs=math.prod(self.shape(x)))

    def linear(self, x: int, n_out: int, *, act: str = "none", role: str = "fc") -> int:
        n, *features = self.shape(x)
        n_in = math.prod(features)
        return self._op(
            "linear",
            (x,),
            (n, n_out),
            name=f"{role}{len(self.ops)}",
            act=act,
            role=role,
            params=ParamInfo(weight_shape=(n_out, n_in), bias=n_out),
            macs=n * n_out * n_in,
        )

    def build(self, output: int) -> Graph:
        return Graph(
            tuple(self.ops), dict(self.tensors), self.input, output, self.shape(output)[-1]
        )


def conv_linear_macs(graph: Graph) -> int:
    """Multiply-accumulates of the convolution and linear weights: the published convention
    (classifier included; bias adds, pooling, additions and activations excluded)."""
    return sum(op.macs for op in graph.ops if op.kind in ("conv", "linear"))


def mlperf_ic_resnet8() -> Graph:
    """MLPerf Tiny image classification: the ResNet-8 of ``mlcommons/tiny`` v0.5–v1.1 on
    CIFAR-10 (32×32×3): a 3×3 stem of 16 filters, three residual stacks of 16, 32 and 64 filters
    (the last two stride 2 with a 1×1 projection shortcut), 8×8 average pooling, 10 classes."""
    b = _GraphBuilder((1, 3, 32, 32))
    x = b.conv(b.input, 16, 3, role="stem")
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = b.conv(x, filters, 3, stride=stride, role="res_a")
        y = b.conv(y, filters, 3, act="none", role="res_b")
        if stride != 1:
            x = b.conv(x, filters, 1, stride=stride, act="none", role="shortcut")
        x = b.add(y, x, act="relu")
    return b.build(b.linear(b.gap(x), 10, role="classifier"))


_MBV1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2))
_MBV1_BLOCKS += ((512, 1),) * 5 + ((1024, 2), (1024, 1))  # (pointwise filters, dw stride)


def mobilenet_v1(
    alpha: float, resolution: int, channels: int = 3, classes: int = 1000, act: str = "relu6"
) -> Graph:
    """MobileNetV1 (Howard et al. 2017) as built by Keras: a 3×3 stride-2 stem of ⌊32α⌋ filters,
    13 depthwise-separable blocks of ⌊α·filters⌋ channels, global pooling and a classifier."""
    _check_positive(alpha=alpha, resolution=resolution, channels=channels, classes=classes)
    if int(32 * alpha) < 1:
        raise ConfigError(f"MobileNetV1 needs alpha >= 1/32 (one stem filter), got {alpha!r}")
    b = _GraphBuilder((1, channels, resolution, resolution))
    x = b.conv(b.input, int(32 * alpha), 3, stride=2, act=act, role="stem")
    for filters, stride in _MBV1_BLOCKS:
        x = b.conv(x, 0, 3, stride=stride, depthwise=True, act=act, role="dw")
        x = b.conv(x, int(filters * alpha), 1, act=act, role="pw")
    return b.build(b.linear(b.gap(x), classes, role="classifier"))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor``, never more than 10 % below ``v``
    (the rule of the MobileNetV2 reference code)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


_MBV2_STAGES = (  # expansion t, filters c, repeats n, first stride s (Sandler et al. Table 2)
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(alpha: float, resolution: int, classes: int = 1000) -> Graph:
    """MobileNetV2 (Sandler et al. 2018) as built by Keras: a stem of ``make_divisible(32α)``
    filters; inverted residual blocks whose expansion is t × the input channels and whose
    projection has ``make_divisible(α·c)`` channels (linear, added to the input when the shapes
    match); a 1×1 head of 1280 filters (``make_divisible(1280α)`` for α > 1); global pooling and
    a classifier."""
    _check_positive(alpha=alpha, resolution=resolution, classes=classes)
    b = _GraphBuilder((1, 3, resolution, resolution))
    x = b.conv(b.input, _make_divisible(32 * alpha), 3, stride=2, act="relu6", role="stem")
    for t, c, n, s in _MBV2_STAGES:
        for i in range(n):
            stride = s if i == 0 else 1
            c_in = b.shape(x)[1]
            c_out = _make_divisible(int(c * alpha))
            h = x if t == 1 else b.conv(x, t * c_in, 1, act="relu6", role="pw1")
            h = b.conv(h, 0, 3, stride=stride, depthwise=True, act="relu6", role="dw")
            h = b.conv(h, c_out, 1, act="none", role="pw2")
            x = b.add(h, x) if stride == 1 and c_in == c_out else h
    head = _make_divisible(1280 * alpha) if alpha > 1.0 else 1280
    x = b.conv(x, head, 1, act="relu6", role="head")
    return b.build(b.linear(b.gap(x), classes, role="classifier"))


def mlperf_vww_mobilenetv1() -> Graph:
    """MLPerf Tiny visual wake words: MobileNetV1 α = 0.25 on 96×96×3 with ReLU and 2 classes
    (``mlcommons/tiny`` ``vww_model.py``)."""
    return mobilenet_v1(0.25, 96, 3, 2, act="relu")


def mlperf_kws_dscnn() -> Graph:
    """MLPerf Tiny keyword spotting: the DS-CNN of ``mlcommons/tiny`` on 49×10×1 MFCC features:
    a 10×4 stride-2 convolution of 64 filters, four depthwise-separable blocks of 64 channels
    (3×3 depthwise, 1×1 pointwise), average pooling over the 25×5 map, 12 classes."""
    b = _GraphBuilder((1, 1, 49, 10))
    x = b.conv(b.input, 64, (10, 4), stride=2, role="stem")
    for _ in range(4):
        x = b.conv(x, 0, 3, depthwise=True, role="dw")
        x = b.conv(x, 64, 1, role="pw")
    return b.build(b.linear(b.gap(x), 12, role="classifier"))


def mlperf_ad_autoencoder() -> Graph:
    """MLPerf Tiny anomaly detection: the fully connected auto-encoder of ``mlcommons/tiny``,
    640 → 128 ×4 → 8 → 128 ×4 → 640, ReLU after every layer but the last."""
    b = _GraphBuilder((1, 640))
    x = b.input
    for width in (128,) * 4 + (8,) + (128,) * 4:
        x = b.linear(x, width, act="relu")
    return b.build(b.linear(x, 640, role="reconstruction"))


MLPERF_TINY_MODELS = {
    "mlperf-ic-resnet8": mlperf_ic_resnet8,
    "mlperf-vww-mobilenetv1": mlperf_vww_mobilenetv1,
    "mlperf-kws-dscnn": mlperf_kws_dscnn,
    "mlperf-ad-autoencoder": mlperf_ad_autoencoder,
}
_ALPHA = r"(?P<a>\d+(?:\.\d+)?)"
_MBV1_ID = re.compile(rf"mobilenetv1-a{_ALPHA}-r(?P<r>\d+)-c(?P<c>\d+)-n(?P<n>\d+)")
_MBV2_ID = re.compile(rf"mobilenetv2-a{_ALPHA}-r(?P<r>\d+)-n(?P<n>\d+)")


def mobilenet_v1_id(alpha: float, resolution: int, channels: int = 3, classes: int = 1000) -> str:
    """The reference id of :func:`mobilenet_v1` (ReLU6), e.g. ``mobilenetv1-a0.25-r96-c1-n5``."""
    return f"mobilenetv1-a{alpha:g}-r{resolution}-c{channels}-n{classes}"


def mobilenet_v2_id(alpha: float, resolution: int, classes: int = 1000) -> str:
    """The reference id of :func:`mobilenet_v2`, e.g. ``mobilenetv2-a0.35-r128-n5``."""
    return f"mobilenetv2-a{alpha:g}-r{resolution}-n{classes}"


@functools.cache
def build_reference(model_id: str) -> Graph:
    """Build a reference network from its id: one of :data:`MLPERF_TINY_MODELS`, or
    :func:`mobilenet_v1_id` / :func:`mobilenet_v2_id`. The graph is cached; it is immutable
    but for its ``tensors`` dict, which callers must not modify.

    Raises:
        ConfigError: an id that names no reference network.
    """
    if model_id in MLPERF_TINY_MODELS:
        return MLPERF_TINY_MODELS[model_id]()
    if m := _MBV1_ID.fullmatch(model_id):
        a, r, c, n = float(m["a"]), int(m["r"]), int(m["c"]), int(m["n"])
        return mobilenet_v1(a, r, c, n)
    if m := _MBV2_ID.fullmatch(model_id):
        return mobilenet_v2(float(m["a"]), int(m["r"]), int(m["n"]))
    raise ConfigError(
        f"unknown reference model {model_id!r}; allowed: {sorted(MLPERF_TINY_MODELS)}, "
        "'mobilenetv1-a<alpha>-r<resolution>-c<channels>-n<classes>' or "
        "'mobilenetv2-a<alpha>-r<resolution>-n<classes>'"
    )


def _check_positive(**values: float) -> None:
    for name, v in values.items():
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{name} of a reference network must be a number > 0, got {v!r}")
