"""Tracing a network into the IR: op order, shapes and data flow against forward hooks, conv
indices, what is trained, the JSON round trip, and hand-computed MACs."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import Tensor, nn

from tinytune.ir import Graph, trace
from tinytune.models import ConvUnit, GraphNet, build_candidate
from tinytune.models.layers import (
    Add,
    AvgPool,
    Classifier,
    GlobalAvgPool,
    GroupNormUnit,
    LiteResidual,
    Mul,
    Upsample,
)
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.spaces import (
    JOINT,
    Candidate,
    family_supernets,
    get_supernet,
    make_preset,
    suggest_candidate,
)

SUPERNETS = tuple(spec.name for spec in family_supernets(0.35))  # one of every family
LEAF_OPS = (ConvUnit, Add, Mul, GlobalAvgPool, AvgPool, GroupNormUnit, Upsample, Classifier)


@pytest.fixture(scope="module")
def supernets() -> dict[str, nn.Module]:
    return {name: build_ofa_supernet(get_supernet(name), 40, seed=0) for name in SUPERNETS}


@functools.cache
def candidates(name: str) -> list[Candidate]:
    """Presets with and without lite residuals and weight updates, and two random joint
    candidates."""
    import optuna

    spec = get_supernet(name)
    out = [make_preset(p, spec) for p in ("tinytl", "mcunetv3", "bn+last", "last")]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    return out + [suggest_candidate(study.ask(), spec, JOINT) for _ in range(2)]


CASES = [(name, i) for name in SUPERNETS for i in range(6)]


def build(name: str, index: int, supernets: dict[str, nn.Module]) -> GraphNet:
    candidate = candidates(name)[index]
    r = candidate.subnet.resolution
    batches = [torch.randn(8, 3, r, r, generator=torch.Generator().manual_seed(0))]
    return build_candidate(candidate, supernets[name], 10, batches, seed=0)


def hook_reference(net: nn.Module, x: Tensor) -> list[dict]:
    """Each leaf op call in execution order: module name, inputs and output (kept alive).

    A call that returns one of its inputs unchanged computes nothing and is not an op.
    """
    names = {m: n for n, m in net.named_modules()}
    calls: list[dict] = []

    def hook(mod: nn.Module, args: tuple, out: Tensor) -> None:
        ins = [a for a in args if isinstance(a, Tensor)]
        if isinstance(mod, Upsample):
            ins = ins[:1]  # the second argument only gives the size
        if not any(out is a for a in ins):
            calls.append({"name": names[mod], "inputs": ins, "output": out})

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, LEAF_OPS)]
    try:
        net(x)
    finally:
        for h in handles:
            h.remove()
    return calls


@pytest.mark.parametrize(("name", "index"), CASES)
def test_ops_shapes_and_data_flow_match_forward_hooks(name, index, supernets):
    net = build(name, index, supernets)
    x = torch.randn(2, 3, net.resolution, net.resolution)
    graph = trace(net, x)
    calls = hook_reference(net, x)

    assert [op.name for op in graph.ops] == [c["name"] for c in calls]
    assert [op.index for op in graph.ops] == list(range(len(calls)))
    assert graph.tensors[graph.input].shape == tuple(x.shape)
    assert graph.tensors[graph.output].shape == (2, 10)
    assert graph.n_classes == 10 and graph.batch_size == 2
    assert graph.ops[-1].kind == "linear" and graph.ops[-1].output == graph.output

    # the producer of each input, by tensor identity in the reference and by id in the graph
    ref_producer = {id(c["output"]): i for i, c in enumerate(calls)}
    producer = graph.producer()
    for op, call in zip(graph.ops, calls, strict=True):
        out = graph.tensors[op.output]
        assert out.shape == tuple(call["output"].shape), op.name
        assert out.requires_grad == call["output"].requires_grad, op.name
        assert len(op.inputs) == len(call["inputs"]), op.name
        for tid, tensor in zip(op.inputs, call["inputs"], strict=True):
            assert graph.tensors[tid].shape == tuple(tensor.shape), op.name
            assert producer.get(tid) == ref_producer.get(id(tensor)), op.name
            assert tid == graph.input or producer[tid] < op.index  # topological order


@pytest.mark.parametrize(("name", "index"), CASES)
def test_every_conv_appears_with_its_index_and_what_it_trains(name, index, supernets):
    net = build(name, index, supernets)
    graph = trace(net, torch.randn(1, 3, net.resolution, net.resolution))
    names = {m: n for n, m in net.named_modules()}
    by_name = {op.name: op for op in graph.ops}
    assert len(by_name) == len(graph.ops)  # every module runs once

    convs = net.convs()
    for i, conv in enumerate(convs):
        op = by_name[names[conv]]
        assert (op.kind, op.conv_index, op.role, op.act) == ("conv", i, conv.kind, conv.act)
        assert op.params.weight_shape == tuple(conv.full_weight().shape)
    indexed = [op for op in graph.ops if op.conv_index is not None]
    assert [op.conv_index for op in indexed] == list(range(len(convs)))
    assert all(op.role == "lite" for op in graph.ops if op.kind == "conv" and op not in indexed)

    # what the IR says is trained is what autograd will train, module by module
    for module, module_name in names.items():
        if isinstance(module, LEAF_OPS) and module_name in by_name:
            own = list(module.parameters(recurse=False))
            trained = sum(p.numel() for p in own if p.requires_grad)
            assert by_name[module_name].params.trained == trained, module_name


def test_trace_leaves_the_module_unchanged(supernets):
    net = build("ofa-mbv3-w0.35", 0, supernets)
    flags = {n: p.requires_grad for n, p in net.named_parameters()}
    state = {n: t.clone() for n, t in net.state_dict().items()}
    trace(net, torch.randn(1, 3, net.resolution, net.resolution))
    assert flags == {n: p.requires_grad for n, p in net.named_parameters()}
    assert all(torch.equal(state[n], t) for n, t in net.state_dict().items())
    assert all(not m._forward_hooks for m in net.modules())
    assert all(p.grad is None for p in net.parameters())


@pytest.mark.parametrize(("name", "index"), CASES)
def test_graph_json_round_trip(name, index, supernets):
    net = build(name, index, supernets)
    graph = trace(net, torch.randn(3, 3, net.resolution, net.resolution))
    text = graph.to_json()
    again = Graph.from_json(text)
    assert again == graph
    assert again.to_json() == text


# --- hand-computed MACs ----------------------------------------------------------------------


class Chain(nn.Module):
    def __init__(self, *ops: nn.Module) -> None:
        super().__init__()
        self.ops = nn.Sequential(*ops)

    def forward(self, x: Tensor) -> Tensor:
        return self.ops(x)


def unit(c_out: int, c_in_per_group: int, k: int, **kwargs) -> ConvUnit:
    return ConvUnit(torch.randn(c_out, c_in_per_group, k, k), torch.zeros(c_out), **kwargs)


def test_macs_of_a_standard_conv():
    # 3×3, 4 → 8 channels, stride 2, padding 1 on (2, 4, 10, 10): output (2, 8, 5, 5);
    # each output element needs 4·3·3 = 36 multiply-accumulates: 2·8·5·5·36 = 14 400
    graph = trace(Chain(unit(8, 4, 3, stride=2, padding=1)), torch.randn(2, 4, 10, 10))
    (op,) = graph.ops
    assert graph.tensors[op.output].shape == (2, 8, 5, 5)
    assert op.macs == 14_400
    assert op.attrs == {"kernel": 3, "stride": 2, "padding": 1, "groups": 1}


def test_macs_of_depthwise_pointwise_and_linear():
    # depthwise 3×3 on (1, 6, 8, 8), padding 1: 6·8·8·9 = 3 456
    # pointwise 6 → 16 on (1, 6, 8, 8): 16·8·8·6 = 6 144
    # global pool over (1, 16, 8, 8): one add per input element, 1 024
    # classifier 16 → 5: 80
    chain = Chain(
        unit(6, 1, 3, padding=1, groups=6),
        unit(16, 6, 1),
        GlobalAvgPool(),
        Classifier(16, 5, torch.Generator().manual_seed(0)),
    )
    graph = trace(chain, torch.randn(1, 6, 8, 8))
    assert [op.macs for op in graph.ops] == [3_456, 6_144, 1_024, 80]
    assert graph.total_macs() == 3_456 + 6_144 + 1_024 + 80
    assert [op.kind for op in graph.ops] == ["conv", "conv", "gap", "linear"]
    assert [op.conv_index for op in graph.ops] == [None, None, None, None]  # no index given


def test_requires_grad_flags_follow_the_first_trained_parameter():
    """Tensors before the first trained parameter need no gradient; after it they all do."""
    frozen = unit(8, 3, 3, padding=1, act="relu6", index=0)
    trained = unit(8, 8, 1, act="relu", index=1)
    trained.set_bias_update(True)
    head = Classifier(8, 3, torch.Generator().manual_seed(0))
    graph = trace(Chain(frozen, trained, GlobalAvgPool(), head), torch.randn(1, 3, 6, 6))
    flags = [graph.tensors[op.output].requires_grad for op in graph.ops]
    assert not graph.tensors[graph.input].requires_grad
    assert flags == [False, True, True, True]
    assert [op.conv_index for op in graph.ops[:2]] == [0, 1]
    assert graph.ops[1].params.bias_trained and not graph.ops[0].params.bias_trained


def test_an_op_that_returns_its_input_does_not_alias_it():
    """A lite residual whose pooled map already has the block's output size upsamples by
    returning its input unchanged (deep blocks at small resolutions). Each op must still write
    its own tensor: an op whose output is its input makes that tensor's producer the later op,
    so the planner starts its lifetime one step late and ends its gradient one step early."""
    branch = LiteResidual(
        16,
        16,
        stride=1,
        kernel_size=3,
        groups=2,
        downsample=1,
        expand=1.0,
        generator=torch.Generator().manual_seed(0),
    )

    class Branch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lite = branch

        def forward(self, x: Tensor) -> Tensor:
            return self.lite(x, x)

    graph = trace(Branch(), torch.randn(1, 16, 4, 4))
    assert graph.tensors[graph.output].shape == (1, 16, 4, 4)
    producer = graph.producer()
    for op in graph.ops:
        assert op.output not in op.inputs, op.name
        assert producer[op.output] == op.index, op.name
