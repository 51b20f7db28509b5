"""The training graph of a device step and the ordered passes that shape it.

:func:`initial_graph` writes the step as a framework would run full fine-tuning: every layer's
forward, then every layer's backward in reverse — for a convolution the gradient through its
activation, the input gradient, the weight and bias gradients — and, at the end, an update of
every parameter. Each pass of :data:`PASSES` is one function from graph to graph:

1. :func:`freeze` drops the gradients and updates of the parameters the scheme does not train;
2. :func:`eliminate_dead_gradients` drops every backward node whose result nothing reads: the
   gradient of a tensor is needed only when a trained parameter lies upstream of it, so the
   backward stops at the earliest updated layer;
3. :func:`apply_updates_early` moves each update to right after the last node that needs the
   parameter's old value or produces its gradient (the Tiny Training Engine's reordering), so
   no gradient waits for the end of the step;
4. :func:`fuse_gradient_updates` merges each gradient with its update into one step node: the
   kernel computes a weight channel's gradient and applies it at once, so a parameter gradient
   never exists as a buffer.

:func:`~tinytune.lowering.program.lower_step` emits one kernel call (or a few, for one node) per
node of the final graph, in its order. The memory planner makes the same decisions (what is
kept, when gradients are freed); the tests check the two agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tinytune.quant import QConv, QGroupNorm, QLinear, QuantizedNet

__all__ = [
    "CONV_BACKWARD",
    "PASSES",
    "Node",
    "PassRecord",
    "apply_updates_early",
    "eliminate_dead_gradients",
    "freeze",
    "fuse_gradient_updates",
    "initial_graph",
    "run_passes",
]

CONV_BACKWARD = ("grad_activation", "grad_input", "grad_weight", "grad_bias")
"""A convolution's backward nodes, in the order a framework runs them."""


@dataclass(frozen=True)
class Node:
    """One step of the training graph.

    Attributes:
        kind: ``forward``; for a convolution ``grad_activation`` (its ReLU mask or its
            h-swish/h-sigmoid derivative table), ``grad_input``, ``grad_weight``,
            ``grad_bias``, ``update_weight``, ``update_bias`` and, once fused,
            ``weight_step`` and ``bias_step``; for every other layer ``backward`` (its input
            gradients and, for the classifier or a GroupNorm, the update of its parameters).
        layer: index into ``QuantizedNet.layers``.
        name: the op's name, for people.
    """

    kind: str
    layer: int
    name: str


Graph = tuple[Node, ...]
Pass = Callable[[Graph, QuantizedNet], Graph]


def _trained_params(layer: object) -> bool:
    if isinstance(layer, QLinear):
        return True  # the classifier is always trained
    if isinstance(layer, QGroupNorm):
        return layer.op.params.any_trained
    if isinstance(layer, QConv):
        return layer.trained_channels > 0 or layer.bias_trained
    return False


def initial_graph(net: QuantizedNet) -> Graph:
    """Full fine-tuning: every backward node, every update at the end of the step."""
    nodes = [Node("forward", i, layer.op.name) for i, layer in enumerate(net.layers)]
    updates = []
    for i in reversed(range(len(net.layers))):
        layer = net.layers[i]
        name = layer.op.name
        if isinstance(layer, QConv):
            if layer.keeps_mask or layer.keeps_pre_activation:
                nodes.append(Node("grad_activation", i, name))
            if layer.op.inputs[0] != net.graph.input:  # nothing needs the image's gradient
                nodes.append(Node("grad_input", i, name))
            nodes += [Node("grad_weight", i, name), Node("grad_bias", i, name)]
            updates += [Node("update_weight", i, name), Node("update_bias", i, name)]
        else:
            nodes.append(Node("backward", i, name))
    return tuple(nodes + updates)


def freeze(graph: Graph, net: QuantizedNet) -> Graph:
    """Drop gradients and updates of parameters the scheme keeps frozen."""

    def kept(node: Node) -> bool:
        layer = net.layers[node.layer]
        if node.kind in ("grad_weight", "update_weight"):
            return layer.trained_channels > 0
        if node.kind in ("grad_bias", "update_bias"):
            return layer.bias_trained
        return True

    return tuple(n for n in graph if kept(n))


def eliminate_dead_gradients(graph: Graph, net: QuantizedNet) -> Graph:
    """Drop backward nodes whose result nothing reads.

    A tensor's gradient is needed when a trained parameter lies upstream of it: the sweep marks
    every tensor written by a layer with trained parameters, or computed from a marked tensor.
    A layer's input-gradient node lives only when its input is marked; a layer with nothing to
    back-propagate and nothing to train loses its whole backward, activation included.
    """
    trained = {i for i, layer in enumerate(net.layers) if _trained_params(layer)}
    live_grad_at: set[int] = set()  # tensor ids whose gradient is needed
    for i, layer in enumerate(net.layers):
        if i in trained or any(t in live_grad_at for t in layer.op.inputs):
            live_grad_at.add(layer.op.output)
    # a convolution's weight/bias gradient nodes survive freeze only when trained
    has_param_grad = {n.layer for n in graph if n.kind in ("grad_weight", "grad_bias")}

    def live(node: Node) -> bool:
        layer = net.layers[node.layer]
        if node.kind == "grad_input":
            return layer.op.inputs[0] in live_grad_at
        if node.kind == "grad_activation":
            return layer.op.inputs[0] in live_grad_at or node.layer in has_param_grad
        if node.kind == "backward":
            return layer.op.output in live_grad_at
        return True

    return tuple(n for n in graph if live(n))


def apply_updates_early(graph: Graph, net: QuantizedNet) -> Graph:
    """Move every update to right after its layer's last backward node."""
    updates = {n.layer: [] for n in graph if n.kind.startswith("update_")}
    for n in graph:
        if n.kind.startswith("update_"):
            updates[n.layer].append(n)
    last: dict[int, int] = {}
    rest = [n for n in graph if not n.kind.startswith("update_")]
    for pos, n in enumerate(rest):
        if n.kind in CONV_BACKWARD:
            last[n.layer] = pos
    out: list[Node] = []
    for pos, n in enumerate(rest):
        out.append(n)
        if n.kind in CONV_BACKWARD and last[n.layer] == pos:
            out += updates.pop(n.layer, [])
    if any(updates.values()):
        missing = [n.name for ns in updates.values() for n in ns]
        raise ValueError(f"updates without a gradient in the graph: {missing[:3]}")
    return tuple(out)


def fuse_gradient_updates(graph: Graph, net: QuantizedNet) -> Graph:
    """Merge each gradient with its update into a step node at the update's place."""
    fused = {"update_weight": "weight_step", "update_bias": "bias_step"}
    out = []
    for n in graph:
        if n.kind in ("grad_weight", "grad_bias"):
            continue
        out.append(Node(fused[n.kind], n.layer, n.name) if n.kind in fused else n)
    return tuple(out)


PASSES: tuple[Pass, ...] = (
    freeze,
    eliminate_dead_gradients,
    apply_updates_early,
    fuse_gradient_updates,
)


@dataclass(frozen=True)
class PassRecord:
    """The node count before the passes and after each one."""

    initial: int
    after: tuple[tuple[str, int], ...]


def run_passes(net: QuantizedNet, passes: Sequence[Pass] = PASSES) -> tuple[Graph, PassRecord]:
    """The step's final training graph, and the node counts along the way."""
    graph = initial_graph(net)
    initial = len(graph)
    after = []
    for p in passes:
        graph = p(graph, net)
        after.append((p.__name__, len(graph)))
    return graph, PassRecord(initial, tuple(after))
