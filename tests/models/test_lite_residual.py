"""TinyTL lite residual branches: shapes, the paper's definition, and the zero initialisation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tinytune.models import GraphNet, LiteResidual, build_candidate
from tinytune.spaces import default_subnet, family_supernets, get_supernet, make_preset

SUPERNETS = tuple(spec.name for spec in family_supernets(0.35))  # one of every family
F64 = torch.float64


def lite(
    c_in: int = 16,
    c_out: int = 24,
    *,
    stride: int = 1,
    kernel_size: int = 5,
    groups: int = 2,
    downsample: int = 2,
    expand: float = 1.0,
    seed: int = 0,
) -> LiteResidual:
    return LiteResidual(
        c_in,
        c_out,
        stride=stride,
        kernel_size=kernel_size,
        groups=groups,
        downsample=downsample,
        expand=expand,
        generator=torch.Generator().manual_seed(seed),
    )


def block_output(x: Tensor, c_out: int, stride: int) -> Tensor:
    """What an MBConv block with a k×k depthwise conv (padding k//2) makes of x: (N, C_out,
    ⌈H/s⌉, ⌈W/s⌉)."""
    n, _, h, w = x.shape
    return torch.zeros(n, c_out, math.ceil(h / stride), math.ceil(w / stride), dtype=x.dtype)


def build(name: str, preset: str, supernets: dict[str, nn.Module], resolution: int) -> GraphNet:
    spec = get_supernet(name)
    subnet = dataclasses.replace(default_subnet(spec), resolution=resolution)
    g = torch.Generator().manual_seed(5)
    batches = [torch.randn(8, 3, resolution, resolution, generator=g)]
    return build_candidate(make_preset(preset, spec, subnet), supernets[name], 10, batches, seed=3)


@pytest.mark.parametrize("size", [(7, 7), (8, 8), (9, 12), (15, 15), (16, 16), (32, 32)])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("downsample", [1, 2, 4])
@pytest.mark.parametrize(
    ("kernel_size", "groups", "expand"), [(3, 1, 0.5), (5, 2, 1.0), (7, 4, 2.0)]
)
def test_output_shape_matches_the_block_output(
    size, stride, downsample, kernel_size, groups, expand
):
    branch = lite(
        stride=stride, kernel_size=kernel_size, groups=groups, downsample=downsample, expand=expand
    )
    x = torch.randn(2, 16, *size)
    like = block_output(x, 24, stride)
    y = branch(x, like)
    assert y.shape == like.shape


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("downsample", [1, 2, 4])
def test_branch_follows_the_paper_definition(stride, downsample):
    """avg-pool ↓r → k×k group conv (stride s) → GroupNorm → ReLU → 1×1 conv → GroupNorm →
    bilinear upsample, written with plain torch modules (TinyTL §3.2), in float64."""
    branch = lite(16, 24, stride=stride, kernel_size=3, groups=2, downsample=downsample).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a non-zero output scale and non-trivial norms
        for norm in (branch.norm1, branch.norm2):
            norm.weight.copy_(torch.randn(norm.weight.shape, generator=g, dtype=F64))
        branch.norm1.bias.copy_(torch.randn(branch.norm1.bias.shape, generator=g, dtype=F64))
    x = torch.randn(2, 16, 13, 13, generator=g, dtype=F64)
    like = block_output(x, 24, stride)

    w1, w2 = branch.conv1.full_weight(), branch.conv2.full_weight()
    mid = w1.shape[0]
    assert mid % 8 == 0 and w1.shape[1:] == (8, 3, 3) and w2.shape == (24, mid, 1, 1)
    h = nn.AvgPool2d(downsample, downsample)(x) if downsample > 1 else x
    h = F.conv2d(h, w1, None, stride, 1, 1, 2)
    h = F.relu(F.group_norm(h, mid // 8, branch.norm1.weight, branch.norm1.bias, 1e-5))
    h = F.conv2d(h, w2)
    h = F.group_norm(h, 24 // 8, branch.norm2.weight, None, 1e-5)
    expected = F.interpolate(h, size=like.shape[2:], mode="bilinear", align_corners=False)
    torch.testing.assert_close(branch(x, like), expected)


@pytest.mark.parametrize("downsample", [1, 2, 4])
def test_branch_output_is_zero_at_initialisation(downsample):
    branch = lite(downsample=downsample)
    assert torch.equal(branch.norm2.weight, torch.zeros(24))
    x = 10 * torch.randn(3, 16, 12, 12)
    out = branch(x, block_output(x, 24, 1))
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("name", SUPERNETS)
def test_network_with_lite_residuals_starts_as_the_network_without(name, supernets):
    """tinytl and bias-only differ only by their lite residuals; the classifier is drawn from
    the seed before the branches, so at initialisation both compute the same function."""
    with_lite = build(name, "tinytl", supernets, 48)
    without = build(name, "bias-only", supernets, 48)
    blocks = default_subnet(get_supernet(name)).n_blocks
    lite = [b.lite is not None for b in with_lite.stages_]
    # stage 0 the stem's, stage 1 + b block b's: on blocks 1 .. n - 1, not on the head's
    assert [i for i, on in enumerate(lite) if on] == list(range(2, blocks + 1))
    assert all(b.lite is None for b in without.stages_)
    x = torch.randn(4, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    assert torch.equal(with_lite(x), without(x))


@pytest.mark.parametrize("name", SUPERNETS)
def test_one_sgd_step_makes_every_branch_nonzero(name, supernets):
    net = build(name, "tinytl", supernets, 40)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 3, 40, 40, generator=g)
    target = torch.tensor([0, 1, 2, 3])
    optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.1)
    F.cross_entropy(net(x), target).backward()
    optimizer.step()

    outputs: list[Tensor] = []
    handles = [
        b.lite.register_forward_hook(lambda _m, _a, out: outputs.append(out.detach()))
        for b in net.stages_
        if b.lite is not None
    ]
    try:
        net(x)
    finally:
        for h in handles:
            h.remove()
    assert len(outputs) == default_subnet(get_supernet(name)).n_blocks - 1  # all but block 0
    assert all(out.abs().max() > 0 for out in outputs)


@pytest.mark.parametrize("resolution", [32, 48])
@pytest.mark.parametrize("name", SUPERNETS)
def test_branches_fit_every_block_at_small_resolutions(name, resolution, supernets):
    """Deep blocks see 1×1 to 4×4 maps: the pooling and kernel shrink (TinyTL) so that each
    branch still produces exactly the block's output shape and its kernel fits its input."""
    net = build(name, "tinytl", supernets, resolution)
    seen: list[tuple[torch.Size, torch.Size]] = []
    kernels: list[tuple[int, int]] = []
    handles = []
    for block in net.stages_:
        if block.lite is None:
            continue
        handles.append(
            block.lite.register_forward_hook(
                lambda _m, args, out: seen.append((out.shape, args[1].shape))
            )
        )
        handles.append(
            block.lite.conv1.register_forward_hook(
                lambda m, args, _out: kernels.append((m.kernel_size, args[0].shape[-1]))
            )
        )
    try:
        net(torch.randn(2, 3, resolution, resolution))
    finally:
        for h in handles:
            h.remove()
    assert len(seen) == default_subnet(get_supernet(name)).n_blocks - 1
    assert all(out == like for out, like in seen)
    assert all(k == 1 or k <= size for k, size in kernels)
