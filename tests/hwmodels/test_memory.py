"""The training-memory planner against what autograd really keeps, and against hand-computed
single-layer cases."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import pytest
import torch
from torch import Tensor, nn

from tinytune.errors import ConfigError
from tinytune.hwmodels import plan_memory
from tinytune.ir import trace
from tinytune.models import ConvUnit, GraphNet, build_candidate
from tinytune.models.layers import Classifier, GlobalAvgPool
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import (
    JOINT,
    PRESET_NAMES,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    family_supernets,
    get_supernet,
    make_preset,
    suggest_candidate,
)

SUPERNETS = tuple(spec.name for spec in family_supernets(0.35))  # one of every family
# presets with a lite residual without pooling (↓1) on every block: the block input is kept
# whole by the lite branch's first convolution and, at the same time, kept whole by the block's
# first convolution ("full") or sliced by it ("mcunetv3", ratios 1/8 and 1/4 at the end)
SHARED = ("full", "mcunetv3")
N_RANDOM = 10  # random candidates per supernet
LABELS = (*PRESET_NAMES, *(f"{p}+lite/1" for p in SHARED), *map(str, range(N_RANDOM)))


@pytest.fixture(scope="module")
def supernets() -> dict[str, nn.Module]:
    return {name: build_ofa_supernet(get_supernet(name), 40, seed=0) for name in SUPERNETS}


@functools.cache
def candidates(name: str) -> tuple[Candidate, ...]:
    """Every preset on the default sub-network, the :data:`SHARED` presets with lite residuals
    that keep the block input, then random candidates: half of them with the scheme sampled
    too (presets on random sub-networks, or joint), half from the joint space."""
    import optuna

    spec = get_supernet(name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=99))
    presets = [make_preset(p, spec) for p in PRESET_NAMES]
    shared = []
    for p in SHARED:
        c = make_preset(p, spec)
        lite = tuple((b, LiteResidualBranch(downsample=1)) for b in range(1, c.subnet.n_blocks))
        shared.append(replace(c, lite_residual=LiteResidualConfig(lite)))
    sampled = [
        suggest_candidate(study.ask(), spec, JOINT if i % 2 else None) for i in range(N_RANDOM)
    ]
    return (*presets, *shared, *sampled)


CASES = [
    pytest.param(name, i, id=f"{name}-{label}")
    for name in SUPERNETS
    for i, label in enumerate(LABELS)
]


def build(name: str, index: int, supernets: dict[str, nn.Module]) -> GraphNet:
    candidate = candidates(name)[index]
    r = candidate.subnet.resolution
    batches = [torch.randn(8, 3, r, r, generator=torch.Generator().manual_seed(0))]
    return build_candidate(candidate, supernets[name], 10, batches, seed=0)


def held_for_backward(module: nn.Module, x: Tensor) -> int:
    """Bytes that autograd holds for backward after ``module(x)``: every storage that a saved
    tensor refers to, parameters excepted, counted once and whole (a saved view keeps all of
    its storage alive; two ops that save one tensor hold it once)."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    held: dict[int, int] = {}
    keep: list[Tensor] = []

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            held[storage.data_ptr()] = storage.nbytes()
            keep.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return sum(held.values())


def trained_elements(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --- the planner against autograd, on real networks ------------------------------------------


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("name", "index"), CASES)
def test_fp32_saved_bytes_match_autograd(name, index, batch, supernets):
    """The plan is what autograd holds for backward, to the byte, at batch 1 and above (each
    saved storage counted once and whole)."""
    net = build(name, index, supernets)
    x = torch.randn(batch, 3, net.resolution, net.resolution)
    graph = trace(net, x)
    report = plan_memory(graph, precision="fp32")
    measured = held_for_backward(net, x)
    assert measured > 0
    assert measured == report.saved_bytes


@pytest.mark.parametrize("name", SUPERNETS)
def test_random_candidates_cover_the_space(name):
    """The sample holds fractional weight updates, lite residuals and several resolutions, so
    that the comparisons above are not confined to the presets' corner of the space."""
    sampled = candidates(name)[len(PRESET_NAMES) + len(SHARED) :]
    assert any(r < 1 for c in sampled for _, r in c.update.weights)
    assert any(c.lite_residual.branches for c in sampled)
    assert len({c.subnet.resolution for c in sampled}) > 1


@pytest.mark.parametrize(("name", "index"), CASES)
def test_planner_properties_on_real_networks(name, index, supernets):
    net = build(name, index, supernets)
    graph = trace(net, torch.randn(2, 3, net.resolution, net.resolution))
    fp32 = plan_memory(graph, precision="fp32")
    int8 = plan_memory(graph, precision="int8", in_place=False)
    trained = trained_elements(net)
    # in place, each depthwise output whose input dies shares its input's buffer
    shared = plan_memory(graph, precision="int8")
    assert shared.peak_bytes <= int8.peak_bytes
    assert not int8.aliases and all(v.startswith("t") for v in shared.aliases.values())
    assert trained > 0

    for report in (fp32, int8):
        assert len(report.timeline) == 2 * len(graph.ops)
        assert report.peak_bytes == max(report.timeline) == report.timeline[report.peak_step]
        assert sum(report.breakdown.values()) == report.peak_bytes

    # int8 activations and their gradients take a quarter of fp32's; masks (1 bit) and
    # GroupNorm statistics (fp32) do not change; the int8 logits live in the workspace
    logits = {f"t{graph.output}", f"grad t{graph.output}"}
    assert logits <= {b.name for b in fp32.buffers}
    assert not logits & {b.name for b in int8.buffers}
    fp32_in_arena = [b for b in fp32.buffers if b.name not in logits]
    for a, b in zip(fp32_in_arena, int8.buffers, strict=True):
        assert (a.name, a.category, a.start, a.end) == (b.name, b.category, b.start, b.end)
        if a.category in ("activation", "gradient"):
            assert a.nbytes == 4 * b.nbytes, a.name
        elif a.category == "saved":
            expected = b.nbytes if a.name.endswith((":mask", ":mean+rstd")) else 4 * b.nbytes
            assert a.nbytes == expected, a.name

    # every trained element is held in SRAM as an fp32 copy; every parameter lies in flash
    assert fp32.breakdown["weights"] == 4 * trained
    assert fp32.flash_bytes == 4 * sum(p.numel() for p in net.parameters())

    for precision, report in (("fp32", fp32), ("int8", int8)):
        reordered = plan_memory(graph, precision=precision, update="reordered", in_place=False)
        held = plan_memory(graph, precision=precision, update="deferred", in_place=False)
        assert held.peak_bytes >= reordered.peak_bytes >= report.peak_bytes
        grads = [b for b in reordered.buffers if b.category == "param_gradient"]
        assert sum(b.nbytes for b in grads) == 4 * trained  # fp32, one per trained element
        assert [b for b in reordered.buffers if b.category != "param_gradient"] == list(
            report.buffers
        )
        for state, optimizer in ((4, "sgd-momentum"), (8, "adam")):
            with_state = plan_memory(
                graph, precision=precision, optimizer=optimizer, in_place=False
            )
            assert with_state.breakdown["optimizer"] == state * trained
            assert with_state.peak_bytes == report.peak_bytes + state * trained


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"precision": "fp16"}, "precision 'fp16'"), ({"optimizer": "rmsprop"}, "optimizer")],
)
def test_unknown_precision_or_optimizer_raises(kwargs, match):
    graph = trace(Chain(unit(4, 4, act="relu", index=0)), torch.randn(1, 4, 2, 2))
    with pytest.raises(ConfigError, match=match):
        plan_memory(graph, **kwargs)


# --- hand-computed single-layer cases ---------------------------------------------------------


class Chain(nn.Module):
    """ConvUnits in sequence → global pool → classifier (frozen unless told otherwise)."""

    def __init__(self, *convs: ConvUnit, train_classifier: bool = False) -> None:
        super().__init__()
        self.convs = nn.Sequential(*convs)
        self.pool = GlobalAvgPool()
        self.classifier = Classifier(convs[-1].out_channels, 3, torch.Generator().manual_seed(0))
        self.classifier.requires_grad_(train_classifier)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.pool(self.convs(x)))


def unit(
    c_in: int, c_out: int, *, k: int = 1, stride: int = 1, act: str = "none", index: int
) -> ConvUnit:
    g = torch.Generator().manual_seed(index)
    weight = torch.randn(c_out, c_in, k, k, generator=g)
    return ConvUnit(
        weight,
        torch.randn(c_out, generator=g),
        stride=stride,
        padding=k // 2,
        act=act,
        index=index,
    )


def stem() -> ConvUnit:
    """A frozen 3×3 stride-2 stem, 3 → 8 channels, ReLU6."""
    return unit(3, 8, k=3, stride=2, act="relu6", index=0)


def trained(conv: ConvUnit, *, ratio: float | None = None, scale: bool = False) -> ConvUnit:
    conv.set_weight_update(ratio)
    conv.set_scale_update(scale)
    conv.set_bias_update(True)
    return conv


N, C_OUT, HW = 2, 16, 6 * 6  # batch, output channels, output pixels of the layer under test

# name → (module, input, saved bytes fp32, saved bytes int8), computed by hand:
HAND_CASES = {
    # 1×1 conv 8 → 16 with ReLU, weight trained at ratio 1/4 on (2, 8, 6, 6): it keeps the first
    # ⌈8/4⌉ = 2 input channels, N·2·H·W elements, and a 1-bit ReLU mask of its N·16·H·W outputs
    "1x1 relu, weight 1/4": (
        lambda: Chain(trained(unit(8, 16, act="relu", index=1), ratio=0.25)),
        (N, 8, 6, 6),
        N * 2 * HW * 4 + math.ceil(N * C_OUT * HW / 8),
        N * 2 * HW * 1 + math.ceil(N * C_OUT * HW / 8),
    ),
    # frozen stem → frozen 1×1 conv: neither keeps anything; only the trained classifier keeps
    # its input, the pooled (N, 16) features
    "frozen after frozen stem": (
        lambda: Chain(stem(), unit(8, 16, act="relu", index=1), train_classifier=True),
        (N, 3, 12, 12),
        N * C_OUT * 4,
        N * C_OUT * 1,
    ),
    # bias-only conv with ReLU after a frozen stem: just the mask
    "bias-only relu": (
        lambda: Chain(stem(), trained(unit(8, 16, act="relu", index=1))),
        (N, 3, 12, 12),
        math.ceil(N * C_OUT * HW / 8),
        math.ceil(N * C_OUT * HW / 8),
    ),
    # bias-only conv with h-swish: the whole pre-activation
    "bias-only hswish": (
        lambda: Chain(stem(), trained(unit(8, 16, act="hswish", index=1))),
        (N, 3, 12, 12),
        N * C_OUT * HW * 4,
        N * C_OUT * HW * 1,
    ),
    # trained folded-BN scale, no activation: the convolution output (∂L/∂s needs it)
    "trained scale": (
        lambda: Chain(stem(), trained(unit(8, 16, index=1), scale=True)),
        (N, 3, 12, 12),
        N * C_OUT * HW * 4,
        N * C_OUT * HW * 1,
    ),
    # whole weight trained, no activation: the whole input, (N, 8, 6, 6)
    "whole weight": (
        lambda: Chain(stem(), trained(unit(8, 16, index=1), ratio=1.0)),
        (N, 3, 12, 12),
        N * 8 * HW * 4,
        N * 8 * HW * 1,
    ),
    # the 3×3 stride-2 stem trained at 1/2: ⌈3/2⌉ = 2 channels of the (2, 3, 12, 12) image, and
    # the ReLU6 mask of its N·8·6·6 outputs
    "stem 1/2": (
        lambda: Chain(trained(stem(), ratio=0.5)),
        (N, 3, 12, 12),
        N * 2 * 144 * 4 + math.ceil(N * 8 * HW / 8),
        N * 2 * 144 * 1 + math.ceil(N * 8 * HW / 8),
    ),
    # a mask whose element count is not a multiple of 8: 1·5·3·3 = 45 bits take 6 bytes
    "odd-sized mask": (
        lambda: Chain(trained(unit(8, 5, act="relu", index=1))),
        (1, 8, 3, 3),
        6,
        6,
    ),
}


@pytest.mark.parametrize("case", HAND_CASES)
def test_saved_bytes_of_single_layers(case):
    make, shape, fp32, int8 = HAND_CASES[case]
    module = make()
    x = torch.randn(*shape)
    graph = trace(module, x)
    assert plan_memory(graph, precision="fp32").saved_bytes == fp32
    assert plan_memory(graph, precision="int8").saved_bytes == int8
    assert held_for_backward(module, x) == fp32  # and autograd agrees


def test_frozen_convs_keep_no_buffer():
    graph = trace(
        Chain(stem(), unit(8, 16, act="relu", index=1), train_classifier=True),
        torch.randn(N, 3, 12, 12),
    )
    report = plan_memory(graph, precision="fp32")
    saved = [b for b in report.buffers if b.category == "saved"]
    assert saved == []  # the classifier keeps a whole tensor, which is an activation buffer
    assert {b.name.split(":")[0] for b in report.buffers if b.category == "weights"} == {
        "classifier"
    }


def test_peak_and_timeline_of_a_bias_only_layer():
    """x (1, 4, 4, 4) → 1×1 conv 4 → 8, ReLU, bias trained → global pool → classifier 8 → 3.

    Three ops: forward steps 0–2, backward steps 3 (classifier), 4 (pool), 5 (conv). fp32 bytes:
    x 256 (step 0); y 512 (0–1); pooled p 32 (1–3: the classifier keeps it for ∂L/∂W);
    logits 12 (2); ReLU mask 16 (0–5); trained copies: conv bias 32 + classifier 4·(24 + 3) = 108
    (0–5); ∂L/∂logits 12 (3); ∂L/∂p 32 (3–4); ∂L/∂y 512 (4–5); classifier gradient 108 (3) and
    conv bias gradient 32 (5), each applied at once (``reordered``; ``fused`` has neither).
    """
    conv = trained(unit(4, 8, act="relu", index=0))
    module = Chain(conv, train_classifier=True)
    graph = trace(module, torch.randn(1, 4, 4, 4))
    report = plan_memory(graph, precision="fp32", update="reordered")
    static = 16 + 32 + 108
    assert report.timeline == (
        256 + 512 + static,
        512 + 32 + static,
        32 + 12 + static,
        32 + 12 + 32 + static + 108,
        512 + 32 + static,
        512 + static + 32,
    )
    assert (report.peak_bytes, report.peak_step, report.peak_phase) == (924, 0, "forward")
    assert report.peak_op == "convs.0"
    assert report.breakdown == {"activation": 768, "saved": 16, "weights": 140}
    assert report.saved_bytes == 16 + 32  # the mask and the classifier's input
    assert report.flash_bytes == 4 * (32 + 8) + 4 * (24 + 3)

    # holding the parameter gradients to the end adds the classifier's 108 to steps 4 and 5
    held = plan_memory(graph, precision="fp32", update="deferred")
    assert held.timeline == (*report.timeline[:4], 700 + 108, 700 + 108)
    # fused into their kernels, neither gradient is ever a buffer: 108 less at step 3, 32 at 5
    fused = plan_memory(graph, precision="fp32")
    assert fused.timeline == (*report.timeline[:3], 32 + 12 + 32 + 156, 700, 512 + 156)
    assert "param_gradient" not in {b.category for b in fused.buffers}
    # momentum: 4 bytes per trained element (8 + 27) at every step
    momentum = plan_memory(graph, precision="fp32", optimizer="sgd-momentum")
    assert momentum.timeline == tuple(t + 4 * 35 for t in fused.timeline)

    # int8: x 64 + y 128 + mask 16 + int32 bias 32 + fp32 classifier 108 at step 0; the
    # logits are the workspace's (float32), not the arena's
    int8 = plan_memory(graph, precision="int8")
    assert (int8.peak_bytes, int8.peak_step) == (348, 0)
    assert int8.timeline[2] == 8 + 16 + 32 + 108  # the pooled int8 features, nothing else
    assert int8.workspace_bytes == 4 * 3 + 4 * 2  # the logits; exponents of ∂L/∂p and ∂L/∂y


def test_peak_and_timeline_when_the_whole_input_is_kept():
    """x (1, 4, 4, 4) → 1×1 conv 4 → 8, no activation, whole weight and bias trained → global
    pool → frozen classifier 8 → 3.

    The conv keeps its whole input for ∂L/∂W, so x (256 B) lives from step 0 to the conv's
    backward at step 5; nothing else is kept. y 512 (0–1); p 32 (1–2); logits 12 (2);
    ∂L/∂logits 12 (3); ∂L/∂p 32 (3–4); ∂L/∂y 512 (4–5); trained copy 4·(32 + 8) = 160 (0–5)
    and its gradient 160 (5, ``reordered``). The peak is the conv's backward step.
    """
    conv = trained(unit(4, 8, index=0), ratio=1.0)
    graph = trace(Chain(conv), torch.randn(1, 4, 4, 4))
    report = plan_memory(graph, precision="fp32", update="reordered")
    assert report.timeline == (
        256 + 512 + 160,
        256 + 512 + 32 + 160,
        256 + 32 + 12 + 160,
        256 + 32 + 12 + 160,
        256 + 512 + 32 + 160,
        256 + 512 + 160 + 160,
    )
    assert (report.peak_bytes, report.peak_phase, report.peak_op) == (1088, "backward", "convs.0")
    assert report.breakdown == {
        "activation": 256,
        "gradient": 512,
        "weights": 160,
        "param_gradient": 160,
    }
    assert report.saved_bytes == 256
    # fused, the gradient never exists: the backward step is 160 lighter and the forward's
    # step 1 (y and p beside x and the weights) is the peak
    fused = plan_memory(graph, precision="fp32")
    assert fused.timeline == (*report.timeline[:5], 256 + 512 + 160)
    assert (fused.peak_bytes, fused.peak_step, fused.peak_phase) == (960, 1, "forward")
