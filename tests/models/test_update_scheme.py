"""Sparse update schemes against full autograd (the key acceptance test of tinytune.models).

A network built for a candidate computes exactly the gradients that plain torch autograd
computes for the same network with every weight whole and trainable, restricted to what the
update scheme trains; nothing else gets a gradient. The reference is built from plain torch
functions (``F.conv2d``, ``F.relu``, ...), not from tinytune's custom autograd functions, and
everything runs in float64. The custom functions of :mod:`tinytune.models.ops` are also checked
directly against finite differences (``torch.autograd.gradcheck``).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis.extra.numpy import array_shapes, arrays
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models import ConvUnit, GraphNet, apply_update_scheme, build_candidate
from tinytune.models.layers import SAME, GroupNormUnit, same_padding
from tinytune.models.ops import masked_clamp, pack_mask, sparse_conv2d, unpack_mask
from tinytune.spaces import (
    JOINT,
    PRESET_NAMES,
    Candidate,
    LiteResidualBranch,
    LiteResidualConfig,
    UpdateScheme,
    default_subnet,
    family_supernets,
    get_supernet,
    make_preset,
)

SUPERNETS = tuple(spec.name for spec in family_supernets(0.35))  # one of every family
LITE0 = "efficientnet-lite0"  # TensorFlow's "SAME" padding at stride 2
N_RANDOM = 8  # random joint candidates per supernet
F64 = torch.float64

PLAIN_ACTS = {
    "none": lambda y: y,
    "relu": F.relu,
    "relu6": F.relu6,
    "hswish": F.hardswish,
    "hsigmoid": F.hardsigmoid,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
}


# --- the reference: the same network with whole, trainable weights in plain torch ---------


class PlainConv(nn.Module):
    """y = act(scale ⊙ conv2d(x, W) + b) with one whole weight W, in plain torch; "SAME"
    padding as ``F.pad`` before a convolution without padding."""

    def __init__(self, unit: ConvUnit) -> None:
        super().__init__()
        self.weight = nn.Parameter(unit.full_weight().clone())
        self.bias = nn.Parameter(unit.bias.detach().clone())
        self.scale = nn.Parameter(unit.scale.detach().clone()) if unit.scale is not None else None
        self.stride, self.padding, self.groups, self.act = (
            unit.stride,
            unit.padding,
            unit.groups,
            unit.act,
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.padding == SAME:
            k = self.weight.shape[-1]
            top, bottom = same_padding(x.shape[2], k, self.stride)
            left, right = same_padding(x.shape[3], k, self.stride)
            y = F.conv2d(F.pad(x, (left, right, top, bottom)), self.weight, None, self.stride,
                         0, 1, self.groups)  # fmt: skip
        else:
            y = F.conv2d(x, self.weight, None, self.stride, self.padding, 1, self.groups)
        if self.scale is not None:
            y = y * self.scale.view(1, -1, 1, 1)
        return PLAIN_ACTS[self.act](y + self.bias.view(1, -1, 1, 1))


class PlainGroupNorm(nn.Module):
    """GroupNorm with 8 channels per group followed by a plain torch activation."""

    def __init__(self, unit: GroupNormUnit) -> None:
        super().__init__()
        self.weight = nn.Parameter(unit.weight.detach().clone())
        self.bias = nn.Parameter(unit.bias.detach().clone()) if unit.bias is not None else None
        self.groups = max(1, unit.weight.numel() // 8)
        self.act = unit.act

    def forward(self, x: Tensor) -> Tensor:
        return PLAIN_ACTS[self.act](F.group_norm(x, self.groups, self.weight, self.bias, 1e-5))


def reference_copy(net: nn.Module) -> nn.Module:
    """A deep copy of ``net`` whose ConvUnits and GroupNorms are plain torch modules and whose
    every parameter is trainable."""
    ref = copy.deepcopy(net)
    for name, module in list(ref.named_modules()):
        if isinstance(module, ConvUnit | GroupNormUnit):
            parent_name, _, child = name.rpartition(".")
            parent = ref.get_submodule(parent_name)
            plain = PlainConv(module) if isinstance(module, ConvUnit) else PlainGroupNorm(module)
            setattr(parent, child, plain)
    for p in ref.parameters():
        p.requires_grad_(True)
    return ref


# --- what the scheme says is trained ----------------------------------------------------------


def expected_trainable(net: GraphNet, candidate: Candidate) -> dict[str, tuple[int, ...]]:
    """Parameter name → its expected shape, for every parameter the candidate trains.

    The classifier; the bias (and with ``norm`` the scale) of the last ``bias_last_k``
    convolutions; for each weight update (i, r) the first ⌈r·C_in⌉ input channels of convolution
    i (depthwise: the first ⌈r·C⌉ channels); every lite residual's convolution weights and
    GroupNorm parameters (its convolution biases are redundant before GroupNorm and frozen).
    """
    names = {module: name for name, module in net.named_modules()}
    update = candidate.update
    convs = net.convs()
    n = len(convs)
    out = {
        "classifier.weight": tuple(net.classifier.weight.shape),
        "classifier.bias": tuple(net.classifier.bias.shape),
    }
    for i, conv in enumerate(convs):
        name = names[conv]
        c_out, c_in_per_group, kh, kw = conv.full_weight().shape
        if i >= n - update.bias_last_k:
            out[f"{name}.bias"] = (c_out,)
            if update.norm:
                out[f"{name}.scale"] = (c_out,)
        ratio = update.weight_ratio(i)
        if ratio is None:
            continue
        if conv.groups == 1:  # split along the input channels
            shape = (c_out, math.ceil(ratio * c_in_per_group), kh, kw)
        else:  # depthwise: split along the channels
            assert c_in_per_group == 1 and conv.groups == c_out
            shape = (math.ceil(ratio * c_out), 1, kh, kw)
        out[f"{name}.weight_train"] = shape
    for b, block in enumerate(net.stages_):
        if block.lite is None:
            continue
        prefix = f"stages_.{b}.lite"
        for conv in ("conv1", "conv2"):
            out[f"{prefix}.{conv}.weight_train"] = tuple(
                getattr(block.lite, conv).full_weight().shape
            )
        out[f"{prefix}.norm1.weight"] = tuple(block.lite.norm1.weight.shape)
        out[f"{prefix}.norm1.bias"] = tuple(block.lite.norm1.bias.shape)
        out[f"{prefix}.norm2.weight"] = tuple(block.lite.norm2.weight.shape)
    return out


def all_kinds_candidate(name: str) -> Candidate:
    """A candidate that updates a fraction of every kind of convolution (stem, dw, pw1, pw2,
    SE, head), the folded-BN scales, and has lite residuals on two blocks."""
    spec = get_supernet(name)
    subnet = default_subnet(spec)
    probe = make_preset("last", spec, subnet)
    kinds = probe.conv_kinds
    weights: dict[int, float] = {0: 0.5, 1: 0.5}  # stem (⌈3/2⌉ = 2 channels), first depthwise
    ratios = {"pw1": 0.25, "dw": 0.5, "pw2": 0.125, "se1": 0.5, "se2": 1.0, "head": 0.25}
    for kind, ratio in ratios.items():
        where = [i for i, k in enumerate(kinds) if k == kind]
        if where:
            weights[where[-1]] = ratio
    lite = LiteResidualConfig(
        ((1, LiteResidualBranch(3, 2, 2, 0.5)), (subnet.n_blocks - 1, LiteResidualBranch()))
    )
    return Candidate(
        spec.name, subnet, lite, UpdateScheme(len(kinds), tuple(weights.items()), True)
    )


def build(candidate: Candidate, supernets: dict[str, nn.Module]) -> GraphNet:
    r = candidate.subnet.resolution
    g = torch.Generator().manual_seed(1234)
    batches = [torch.randn(8, 3, r, r, generator=g)]
    return build_candidate(candidate, supernets[candidate.supernet], 10, batches, seed=0)


def perturb_initial_zeros(net: GraphNet, generator: torch.Generator) -> None:
    """Make the lite residuals' zero-initialised output scales and the unit BN scales random, so
    that gradients through them are not trivially zero or trivially equal."""
    with torch.no_grad():
        for block in net.stages_:
            if block.lite is not None:
                w = block.lite.norm2.weight
                w.copy_(torch.randn(w.shape, generator=generator, dtype=w.dtype))
        for conv in net.convs():
            if conv.scale is not None:
                s = conv.scale
                s.copy_(1 + 0.3 * torch.randn(s.shape, generator=generator, dtype=s.dtype))


def check_against_full_autograd(candidate: Candidate, supernets: dict[str, nn.Module]) -> None:
    """Build ``candidate`` in float64 and check (a) that exactly what its scheme names is
    trainable, as the leading channels of the original weights, (b) that each trainable tensor's
    gradient equals its slice of the plain-torch full-autograd gradient, (c) that no frozen
    tensor gets a gradient."""
    net = build(candidate, supernets).double()
    g = torch.Generator().manual_seed(7)
    perturb_initial_zeros(net, g)
    ref = reference_copy(net)
    r = candidate.subnet.resolution

    # (a) exactly the parameters that the scheme names are trainable, with the right shapes.
    trainable = {n: tuple(p.shape) for n, p in net.named_parameters() if p.requires_grad}
    assert trainable == expected_trainable(net, candidate)
    # ... and a trained part holds the *leading* channels of the same weights as a frozen build.
    frozen_build = build(
        Candidate(candidate.supernet, candidate.subnet, candidate.lite_residual, UpdateScheme()),
        supernets,
    ).double()
    for conv, whole in zip(net.convs(), frozen_build.convs(), strict=True):
        w = whole.full_weight()
        torch.testing.assert_close(conv.full_weight(), w, rtol=0, atol=0)
        if conv.weight_train is not None:
            lead = tuple(slice(0, s) for s in conv.weight_train.shape)
            torch.testing.assert_close(conv.weight_train.detach(), w[lead], rtol=0, atol=0)

    # (b) the same loss through both networks.
    x = torch.randn(2, 3, r, r, generator=g, dtype=F64)
    target = torch.tensor([3, 8])
    y, y_ref = net(x), ref(x)
    torch.testing.assert_close(y, y_ref)
    F.cross_entropy(y, target).backward()
    F.cross_entropy(y_ref, target).backward()
    ref_grads = dict(ref.named_parameters())
    n_nonzero = 0
    for name, p in net.named_parameters():
        if not p.requires_grad:
            # (c) nothing frozen gets a gradient.
            assert p.grad is None, name
            continue
        assert p.grad is not None, name
        if name.endswith(".weight_train"):
            full = ref_grads[name.removesuffix("_train")].grad
            expected = full[tuple(slice(0, s) for s in p.shape)]  # the leading channels
        else:
            expected = ref_grads[name].grad
        torch.testing.assert_close(p.grad, expected, msg=lambda m, name=name: f"{name}: {m}")
        n_nonzero += bool(p.grad.abs().sum() > 0)
    assert n_nonzero >= 2  # the comparison is not one of zeros


@pytest.mark.parametrize("preset", PRESET_NAMES)
@pytest.mark.parametrize("name", SUPERNETS)
def test_presets_match_full_autograd(name, preset, supernets):
    check_against_full_autograd(make_preset(preset, get_supernet(name)), supernets)


@pytest.mark.parametrize("index", range(N_RANDOM))
@pytest.mark.parametrize("name", SUPERNETS)
def test_random_candidates_match_full_autograd(name, index, supernets, sample):
    check_against_full_autograd(sample(name, N_RANDOM, 2024, JOINT)[index], supernets)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_lite0_presets_with_same_padding_match_full_autograd(preset, supernets):
    """EfficientNet-Lite0 pads its stride-2 convolutions as TensorFlow's "SAME" does; the
    reference pads them with ``F.pad`` (64 px: one pixel after, none before a 3×3)."""
    candidate = make_preset(preset, get_supernet(LITE0))
    assert sum(c.padding == SAME for c in build(candidate, supernets).convs()) == 4
    check_against_full_autograd(candidate, supernets)


@pytest.mark.parametrize("index", range(3))
def test_random_lite0_candidates_match_full_autograd(index, supernets, sample):
    check_against_full_autograd(sample(LITE0, 3, 2024, JOINT)[index], supernets)


@pytest.mark.parametrize("name", SUPERNETS)
def test_every_conv_kind_at_a_fraction_matches_full_autograd(name, supernets):
    candidate = all_kinds_candidate(name)
    ratios = {candidate.conv_kinds[i] for i, r in candidate.update.weights if r < 1}
    assert {"stem", "dw", "pw1", "pw2", "head"} <= ratios
    check_against_full_autograd(candidate, supernets)


@pytest.mark.parametrize("name", SUPERNETS)
def test_random_sample_covers_the_interesting_cases(name, sample):
    """The sampled candidates exercise fractional weights, depthwise weights and lite
    residuals, so that the acceptance test above is not vacuous."""
    candidates = sample(name, N_RANDOM, 2024, JOINT)
    fractional = [c for c in candidates if any(r < 1 for _, r in c.update.weights)]
    dw = [c for c in candidates if any(c.conv_kinds[i] == "dw" for i, _ in c.update.weights)]
    lite = [c for c in candidates if c.lite_residual.branches]
    assert fractional and dw and lite


def test_scheme_that_does_not_fit_raises_model_error(supernets):
    spec = get_supernet("ofa-proxyless-w0.35")
    net = build(make_preset("last", spec), supernets)
    n = len(net.convs())
    with pytest.raises(ModelError, match="does not fit"):
        apply_update_scheme(net, UpdateScheme(bias_last_k=n + 1))
    with pytest.raises(ModelError, match="does not fit"):
        apply_update_scheme(net, UpdateScheme(bias_last_k=1, weights=((0, 1.0),)))


@pytest.mark.parametrize("ratio", [0.125, 0.25, 0.5, 1.0])
def test_dropping_a_trained_scale_folds_it_into_the_weight(ratio):
    """y = s ⊙ conv(x; W) + b = conv(x; s ⊙ W) + b: the output does not change, the trained
    channels are kept."""
    g = torch.Generator().manual_seed(0)
    unit = ConvUnit(
        torch.randn(6, 8, 3, 3, generator=g, dtype=F64),
        torch.randn(6, generator=g, dtype=F64),
        padding=1,
        act="relu6",
    )
    unit.set_weight_update(ratio)
    unit.set_scale_update(True)
    with torch.no_grad():
        unit.scale.copy_(torch.rand(6, generator=g, dtype=F64) + 0.5)
    x = torch.randn(2, 8, 5, 5, generator=g, dtype=F64)
    before = unit(x).detach()
    unit.set_scale_update(False)
    assert unit.scale is None
    assert unit.trained_channels == math.ceil(ratio * 8)
    torch.testing.assert_close(unit(x), before)


@pytest.mark.parametrize(
    ("c_in", "groups", "ratio", "k"),
    [
        (3, 1, 0.125, 1),
        (3, 1, 0.5, 2),
        (12, 1, 0.125, 2),
        (20, 1, 0.25, 5),
        (24, 1, 0.125, 3),
        (10, 10, 0.125, 2),  # depthwise: along the channels
        (12, 12, 0.25, 3),
        (12, 12, 1.0, 12),
    ],
)
def test_weight_split_keeps_the_leading_channels_rounded_up(c_in, groups, ratio, k):
    g = torch.Generator().manual_seed(0)
    c_out = c_in if groups > 1 else 7
    weight = torch.randn(c_out, c_in // groups, 3, 3, generator=g)
    unit = ConvUnit(weight, torch.zeros(c_out), padding=1, groups=groups)
    unit.set_weight_update(ratio)
    assert unit.trained_channels == k
    dim = 0 if groups > 1 else 1
    torch.testing.assert_close(
        unit.weight_train.detach(), weight.narrow(dim, 0, k), rtol=0, atol=0
    )
    if k < c_in:
        rest = weight.narrow(dim, k, c_in - k)
        torch.testing.assert_close(unit.weight_frozen.detach(), rest, rtol=0, atol=0)
        assert not unit.weight_frozen.requires_grad
    else:
        assert unit.weight_frozen is None
    assert unit.weight_train.requires_grad
    unit.set_weight_update(None)
    assert unit.weight_train is None
    torch.testing.assert_close(unit.full_weight(), weight, rtol=0, atol=0)


def test_grouped_conv_cannot_be_split():
    unit = ConvUnit(torch.randn(8, 4, 3, 3), torch.zeros(8), groups=2)
    with pytest.raises(ValueError, match="grouped"):
        unit.set_weight_update(0.5)
    unit.set_weight_update(1.0)  # as a whole it can
    assert unit.trained_channels == 8


# --- the custom autograd functions, against finite differences and F.conv2d -------------------


def _t(*shape: int, g: torch.Generator, grad: bool = False) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(grad)


SPARSE_CASES = {
    # name: (x shape, weight shape, stride, padding, groups, trained channels k, dim of split)
    "groups=1 split": ((2, 5, 6, 6), (4, 5, 3, 3), 2, 1, 1, 2, 1),
    "pointwise split": ((2, 8, 4, 4), (3, 8, 1, 1), 1, 0, 1, 1, 1),
    "depthwise split": ((2, 6, 5, 5), (6, 1, 3, 3), 1, 1, 6, 4, 0),
    "depthwise whole": ((1, 4, 5, 5), (4, 1, 5, 5), 2, 2, 4, 4, 0),
    "grouped whole": ((2, 6, 5, 5), (4, 3, 3, 3), 1, 1, 2, 3, 1),
    "frozen weight, bias only": ((2, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 0, 1),
    # (left, right, top, bottom): TensorFlow's "SAME" padding at stride 2 on even sizes
    "groups=1 split, one after": ((2, 5, 6, 6), (4, 5, 3, 3), 2, (0, 1, 0, 1), 1, 2, 1),
    "depthwise split, 5x5 one and two": ((2, 6, 8, 8), (6, 1, 5, 5), 2, (1, 2, 1, 2), 6, 4, 0),
    "whole, one axis odd": ((1, 3, 6, 7), (4, 3, 3, 3), 2, (1, 1, 0, 1), 1, 3, 1),
    "frozen, one after": ((2, 3, 4, 4), (4, 3, 3, 3), 2, (0, 1, 0, 1), 1, 0, 1),
}


def _plain_conv2d(x: Tensor, w: Tensor, b: Tensor | None, stride: int, padding, groups: int):
    """F.conv2d, an asymmetric padding applied with F.pad first."""
    if isinstance(padding, int):
        return F.conv2d(x, w, b, stride, padding, 1, groups)
    return F.conv2d(F.pad(x, padding), w, b, stride, 0, 1, groups)


def _split(w: Tensor, k: int, dim: int) -> tuple[Tensor | None, Tensor | None]:
    c = w.shape[dim]
    train = w.narrow(dim, 0, k).detach().clone().requires_grad_(True) if k else None
    frozen = w.narrow(dim, k, c - k).detach().clone() if k < c else None
    return train, frozen


@pytest.mark.parametrize("case", SPARSE_CASES, ids=str)
def test_sparse_conv2d_gradcheck(case):
    x_shape, w_shape, stride, padding, groups, k, dim = SPARSE_CASES[case]
    g = torch.Generator().manual_seed(0)
    x = _t(*x_shape, g=g, grad=True)
    w_train, w_frozen = _split(_t(*w_shape, g=g), k, dim)
    b = _t(w_shape[0], g=g, grad=True)
    if w_train is None:
        inputs = (x, b)

        def fn(x: Tensor, b: Tensor) -> Tensor:
            return sparse_conv2d(x, None, w_frozen, b, stride, padding, groups)

    else:
        inputs = (x, w_train, b)

        def fn(x: Tensor, wt: Tensor, b: Tensor) -> Tensor:
            return sparse_conv2d(x, wt, w_frozen, b, stride, padding, groups)

    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("case", SPARSE_CASES, ids=str)
def test_sparse_conv2d_matches_conv2d_and_saves_only_the_trained_channels(case):
    x_shape, w_shape, stride, padding, groups, k, dim = SPARSE_CASES[case]
    g = torch.Generator().manual_seed(1)
    x = _t(*x_shape, g=g, grad=True)
    w = _t(*w_shape, g=g)
    b = _t(w_shape[0], g=g, grad=True)
    w_train, w_frozen = _split(w, k, dim)
    params = {t.data_ptr() for t in (w_train, w_frozen, b) if t is not None}
    saved: list[Tensor] = []

    def pack(t: Tensor) -> Tensor:
        if t.data_ptr() not in params:
            saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = sparse_conv2d(x, w_train, w_frozen, b, stride, padding, groups)
    dy = _t(*y.shape, g=g)
    y.backward(dy)

    x_ref = x.detach().clone().requires_grad_(True)
    w_ref = w.detach().clone().requires_grad_(True)
    b_ref = b.detach().clone().requires_grad_(True)
    y_ref = _plain_conv2d(x_ref, w_ref, b_ref, stride, padding, groups)
    y_ref.backward(dy)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(b.grad, b_ref.grad)
    if w_train is not None:
        torch.testing.assert_close(w_train.grad, w_ref.grad.narrow(dim, 0, k))
        # only the first k input channels are kept (depthwise: the first k channels); all of
        # them when the whole weight is trained
        kept = x_shape[1] if w_frozen is None else k
        assert [tuple(t.shape) for t in saved] == [(x_shape[0], kept, *x_shape[2:])]
        torch.testing.assert_close(saved[0], x.detach()[:, :kept], rtol=0, atol=0)
    else:
        assert saved == []


def test_sparse_conv2d_rejects_a_negative_padding():
    x = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match=r"padding \(0, 1, -1, 1\) has a negative side"):
        sparse_conv2d(x, None, torch.randn(2, 2, 3, 3), None, 2, (0, 1, -1, 1), 1)


def test_sparse_conv2d_rejects_a_split_grouped_weight():
    g = torch.Generator().manual_seed(0)
    x = _t(1, 4, 3, 3, g=g)
    w = _t(4, 2, 1, 1, g=g)
    with pytest.raises(ValueError, match="groups"):
        sparse_conv2d(x, w[:, :1].clone().requires_grad_(), w[:, 1:].clone(), None, 1, 0, 2)


@pytest.mark.parametrize(
    ("upper", "plain"), [(None, F.relu), (6.0, F.relu6)], ids=["relu", "relu6"]
)
def test_masked_clamp_matches_plain_activation(upper, plain):
    g = torch.Generator().manual_seed(0)
    x = 5 * torch.randn(3, 5, 7, 7, generator=g, dtype=F64)
    kink = x.abs().lt(1e-3) | (x - 6).abs().lt(1e-3)
    x = torch.where(kink, x + 0.01, x).requires_grad_(True)  # finite differences need no kinks
    assert torch.autograd.gradcheck(lambda t: masked_clamp(t, upper), (x,))

    saved: list[Tensor] = []

    def pack(t: Tensor) -> Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = masked_clamp(x, upper)
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = plain(x_ref)
    dy = torch.randn(y.shape, generator=g, dtype=F64)
    y.backward(dy)
    y_ref.backward(dy)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=0)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=0)
    # one bit per element is kept
    assert [(t.dtype, t.numel()) for t in saved] == [(torch.uint8, math.ceil(x.numel() / 8))]


def test_masked_clamp_keeps_nothing_without_grad():
    saved: list[Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = masked_clamp(torch.randn(4, 4), 6.0)
    assert saved == []
    assert not y.requires_grad


@settings(max_examples=60, deadline=None)
@given(arrays(np.bool_, array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9)))
def test_pack_mask_round_trip(mask):
    packed = pack_mask(torch.from_numpy(mask))
    assert packed.dtype == torch.uint8
    assert packed.numel() == math.ceil(mask.size / 8)
    # little-endian bit order, as numpy packs it
    expected = np.packbits(mask.reshape(-1), bitorder="little")
    np.testing.assert_array_equal(packed.numpy(), expected)
    unpacked = unpack_mask(packed, torch.Size(mask.shape))
    assert unpacked.dtype == torch.bool
    np.testing.assert_array_equal(unpacked.numpy(), mask)
