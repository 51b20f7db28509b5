"""The training graph's passes: node counts before and after each, what is pruned, where the
updates go."""

from __future__ import annotations

import pytest

from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.lowering.passes import PASSES, run_passes
from tinytune.lowering.program import lower_step
from tinytune.quant import QConv, QLinear, quantize


def _net(scheme: str):
    return quantize(tiny_net(SCHEMES[scheme]), [images(8)])


def test_counts_by_hand_for_the_classifier_only_scheme() -> None:
    net = _net("last")
    layers = len(net.layers)  # 10 convolutions, 2 shortcut adds, the pooling, the classifier
    convs = [layer for layer in net.layers if isinstance(layer, QConv)]
    assert (layers, len(convs)) == (14, 10)
    masks = sum(c.keeps_mask for c in convs)
    # forward 14; per convolution: its mask, its input gradient (not the stem's), weight and
    # bias gradients; one backward node per other layer; two updates per convolution
    initial = 14 + masks + 9 + 2 * 10 + 4 + 2 * 10
    nodes, record = run_passes(net)
    assert record.initial == initial
    assert record.after == (
        ("freeze", initial - 4 * 10),  # no convolution parameter is trained
        ("eliminate_dead_gradients", 14 + 1),  # only the classifier's backward is left
        ("apply_updates_early", 15),
        ("fuse_gradient_updates", 15),
    )
    assert [n.kind for n in nodes[14:]] == ["backward"]


def test_full_update_keeps_every_backward_and_fuses_every_update() -> None:
    net = _net("full")
    _, record = run_passes(net)
    counts = dict(record.after)
    assert counts["freeze"] == record.initial  # everything is trained
    assert counts["eliminate_dead_gradients"] == record.initial  # everything is needed
    assert counts["fuse_gradient_updates"] == record.initial - 2 * 10  # 20 gradients merged
    assert [p.__name__ for p in PASSES] == [name for name, _ in record.after]


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_backward_stops_where_autograd_does_and_updates_follow_their_gradient(
    scheme: str,
) -> None:
    net = _net(scheme)
    nodes, _ = run_passes(net)
    graph = net.graph
    backward_layers = {n.layer for n in nodes if n.kind != "forward"}
    expected = {
        i
        for i, layer in enumerate(net.layers)
        if isinstance(layer, QLinear) or graph.tensors[layer.op.output].requires_grad
    }
    assert backward_layers == expected
    kinds = {n.kind for n in nodes}
    assert not kinds & {"grad_weight", "grad_bias", "update_weight", "update_bias"}
    backward = [n for n in nodes if n.kind != "forward"]
    for pos, n in enumerate(backward):
        if n.kind in ("weight_step", "bias_step"):
            before = [m.kind for m in backward[:pos] if m.layer == n.layer]
            after = [m.kind for m in backward[pos + 1 :] if m.layer == n.layer]
            x = net.layers[n.layer].op.inputs[0]
            if graph.tensors[x].requires_grad:
                assert "grad_input" in before  # it read the weights before they change
            assert set(after) <= {"weight_step", "bias_step"}  # applied as soon as computed
    program = lower_step(net, 0.01)
    assert program.nodes == nodes and len(program.calls) >= len(nodes)
