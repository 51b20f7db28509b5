"""The ofa adapter: the torchvision stand-in, conformance of the pure space description with the
real network, and BatchNorm folding."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from tinytune.errors import ModelError
from tinytune.models import ConvUnit, GraphNet, build_candidate, from_ofa_subnet
from tinytune.models.ofa_adapter import extract_subnet, torchvision_standin
from tinytune.spaces import (
    Candidate,
    default_subnet,
    family_supernets,
    get_supernet,
    make_preset,
)

SUPERNETS = tuple(spec.name for spec in family_supernets(0.35))  # one of every family
N_RANDOM = 8


def test_standin_raises_when_a_transform_is_instantiated():
    tv = torchvision_standin()
    assert isinstance(tv.transforms.functional, types.ModuleType)
    for transform in (tv.transforms.RandomResizedCrop, tv.transforms.RandomCrop):
        with pytest.raises(ModelError, match="torchvision is not installed"):
            transform(224)


def test_registered_standin_raises_too(supernets):
    """Without a real torchvision, building a supernet (which imports ofa) registers the
    stand-in; using it fails loudly instead of returning something half-working."""
    tv = sys.modules.get("torchvision")
    if not getattr(tv, "__tinytune_standin__", False):
        pytest.skip("a real torchvision is installed, the stand-in is not used")
    assert sys.modules["torchvision.transforms"] is tv.transforms
    with pytest.raises(ModelError):
        tv.transforms.RandomResizedCrop(32, scale=(0.08, 1.0))


def build(candidate: Candidate, supernets: dict[str, nn.Module]) -> GraphNet:
    r = candidate.subnet.resolution
    batches = [torch.randn(8, 3, r, r, generator=torch.Generator().manual_seed(0))]
    return build_candidate(candidate, supernets[candidate.supernet], 10, batches, seed=0)


def executed_convs(net: GraphNet) -> list[ConvUnit]:
    """The backbone ConvUnits in the order a forward pass runs them (lite residuals excluded)."""
    lite = {m for b in net.stages_ if b.lite is not None for m in b.lite.modules()}
    order: list[ConvUnit] = []
    handles = [
        m.register_forward_pre_hook(lambda mod, _args: order.append(mod))
        for m in net.modules()
        if isinstance(m, ConvUnit) and m not in lite
    ]
    try:
        with torch.no_grad():
            net(torch.zeros(1, 3, net.resolution, net.resolution))
    finally:
        for h in handles:
            h.remove()
    return order


def conformance_candidates(name: str, sample) -> list[Candidate]:
    spec = get_supernet(name)
    fixed = [make_preset("last", spec, default_subnet(spec, size)) for size in ("min", "max")]
    return fixed + list(sample(name, N_RANDOM, 11, None))


@pytest.mark.parametrize("index", range(N_RANDOM + 2))
@pytest.mark.parametrize("name", SUPERNETS)
def test_network_conforms_to_the_space_description(name, index, supernets, sample):
    candidate = conformance_candidates(name, sample)[index]
    spec, subnet = candidate.spec, candidate.subnet
    net = build(candidate, supernets)
    convs = executed_convs(net)

    assert len(convs) == candidate.n_convs
    assert [c.kind for c in convs] == list(candidate.conv_kinds)
    assert [c.index for c in convs] == list(range(candidate.n_convs))
    assert net.convs() == convs  # the update-scheme order is the execution order

    # blocks: the fixed first block (3×3 depthwise, no expansion), then each stage's blocks
    # with the sub-network's kernel sizes, expand ratios and squeeze-and-excitation
    # (stage 0 the stem's, then one stage a block, then the head's)
    blocks = [
        {c.kind: c for c in stage.ops.values() if isinstance(c, ConvUnit)}
        for stage in net.stages_[1 : 1 + subnet.n_blocks]
    ]
    assert all("dw" in block for block in blocks)
    assert all(c.kind not in ("dw", "pw1") for s in net.stages_[1 + subnet.n_blocks :]
               for c in s.ops.values() if isinstance(c, ConvUnit))  # fmt: skip
    assert "pw1" not in blocks[0] and blocks[0]["dw"].kernel_size == 3 and "se1" not in blocks[0]
    expected = [
        (k, e, se)
        for stage, se in zip(subnet.stages, spec.has_se, strict=True)
        for k, e in zip(stage.ks, stage.e, strict=True)
    ]
    for block, (k, e, se) in zip(blocks[1:], expected, strict=True):
        assert block["dw"].kernel_size == k
        assert block["dw"].depthwise
        # the expanded width is the input width times e, rounded to a multiple of 8
        assert block["pw1"].out_channels % 8 == 0
        assert abs(block["pw1"].out_channels - e * block["pw1"].in_channels) <= 8
        assert ("se1" in block) == se


def randomise_batchnorm(net: nn.Module, seed: int) -> None:
    """Non-trivial BatchNorm statistics and affine parameters, so that folding is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in net.modules():
            if isinstance(bn, nn.BatchNorm2d):
                c = bn.num_features
                bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
                bn.bias.copy_(torch.randn(c, generator=g))
                bn.running_mean.copy_(0.5 * torch.randn(c, generator=g))
                bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)


@pytest.mark.parametrize("size", ["min", "max"])
@pytest.mark.parametrize("name", SUPERNETS)
def test_folded_network_equals_the_ofa_subnet_in_eval_mode(name, size, supernets):
    spec = get_supernet(name)
    subnet = default_subnet(spec, size)
    static = extract_subnet(supernets[name], spec, subnet)
    randomise_batchnorm(static, seed=3)
    static.eval()
    net = from_ofa_subnet(static, 40, subnet.resolution, torch.Generator().manual_seed(0))
    with torch.no_grad():  # the same classifier: the fresh one is replaced by ofa's
        net.classifier.weight.copy_(static.classifier.linear.weight)
        net.classifier.bias.copy_(static.classifier.linear.bias)
    x = torch.randn(3, 3, subnet.resolution, subnet.resolution)
    with torch.no_grad():
        expected = static(x)
        actual = net(x)
    assert expected.abs().max() > 0.1  # not a degenerate comparison
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert not any(p.requires_grad for p in net.convs()[0].parameters())  # frozen until a scheme
