"""How a network runs as tinytune trains it: its steps, and the stages they fall into.

:func:`plan` groups a :class:`~tinytune.networks.NetworkGraph`'s nodes into the steps a device
runs: a convolution with the BatchNorm and the activation after it (each its only reader)
folded in, a sum, a channel product, a max pool, a global pool; flatten, dropout and identity
are dropped (their output is their input); the last linear layer is the classifier, made anew.
The steps fall into stages cut at the single-tensor cut points (the tensors every path from
input to output crosses) that end a block, each holding at least one convolution: not after an
expansion or a depthwise convolution (:func:`~tinytune.networks.conv_roles`' ``pw1`` and
``dw``), the middle of an inverted-residual or a separable block, so that a MobileNet's
stages are its blocks whether or not they add a shortcut. A stage is where a frozen prefix may
end, where the network may be cut (a global pool and a new classifier put on the stage's
output) and what a lite residual branch spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tinytune.networks.graph import NetworkGraph, Node, conv_roles

__all__ = ["ACTIVATIONS", "Plan", "Step", "body", "excitation", "plan"]

ACTIVATIONS = {
    "relu": "relu",
    "relu6": "relu6",
    "hardswish": "hswish",
    "hardsigmoid": "hsigmoid",
    "sigmoid": "sigmoid",
    "silu": "silu",
}
"""A graph's activation ops, by the name tinytune's layers give them."""
_DROPPED = ("flatten", "identity")


@dataclass(frozen=True)
class Step:
    """One step as the device runs it.

    Attributes:
        op: ``conv``, ``add``, ``mul``, ``cat``, ``maxpool``, ``avgpool`` or ``gap``.
        nodes: the graph's nodes it runs: for a convolution, the convolution, then the
            BatchNorm and the activation folded into it where there are.
        inputs: the tensors it reads (a product: the features, then the channel scale).
        output: the tensor it writes.
    """

    op: str
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    output: str

    @property
    def name(self) -> str:
        return self.nodes[0].name

    @property
    def act(self) -> str:
        """The fused activation of a convolution or a sum (``none`` without one)."""
        last = self.nodes[-1]
        return ACTIVATIONS.get(last.op, "none") if len(self.nodes) > 1 else "none"


@dataclass(frozen=True)
class Plan:
    """The steps of a network, its stages and its classifier.

    Attributes:
        steps: in execution order.
        stages: the end (exclusive) of each stage in ``steps``; the last is ``len(steps)``.
        classifier: the network's last linear layer.
        features: the tensor the classifier reads (after the dropped ops).
    """

    steps: tuple[Step, ...]
    stages: tuple[int, ...]
    classifier: Node
    features: str

    def stage_steps(self, stage: int) -> tuple[Step, ...]:
        start = self.stages[stage - 1] if stage else 0
        return self.steps[start : self.stages[stage]]


def _fused(node: Node, consumers: dict[str, list[Node]]) -> tuple[Node, ...]:
    """A convolution and the BatchNorm and activation after it that fold into it."""
    chain = [node]
    nxt = consumers.get(node.output, [])
    if len(nxt) == 1 and nxt[0].op == "batchnorm":
        chain.append(nxt[0])
        nxt = consumers.get(nxt[0].output, [])
    if len(nxt) == 1 and nxt[0].op in ACTIVATIONS:
        chain.append(nxt[0])
    return tuple(chain)


_GATES = ("hardsigmoid", "sigmoid")


def _scale_first(graph: NetworkGraph, inputs: tuple[str, ...], producers: dict[str, Node]) -> bool:
    """Whether a channel product reads its channel scale (N, C, 1, 1) first: the one input of
    that shape, or, where the features are a 1×1 map too, the one a gate (a sigmoid) makes."""
    single = [graph.shapes[t][2:] == (1, 1) for t in inputs]
    if single != [True, True]:
        return single[0]
    gated = [t in producers and producers[t].op in _GATES for t in inputs]
    return gated == [True, False]


def _steps(graph: NetworkGraph, classifier: Node) -> tuple[list[Step], dict[str, str]]:
    consumers, producers = graph.consumers(), graph.producers()
    alias: dict[str, str] = {}
    folded: set[str] = set()
    steps: list[Step] = []

    def real(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    for node in graph.nodes:
        if node.name in folded or node is classifier:
            continue
        inputs = tuple(real(t) for t in node.inputs)
        if node.op in _DROPPED:
            alias[node.output] = inputs[0]
            continue
        nodes: tuple[Node, ...] = (node,)
        if node.op == "conv":
            nodes = _fused(node, consumers)
            folded.update(n.name for n in nodes[1:])
        elif node.op == "add":
            nxt = consumers.get(node.output, [])
            if len(nxt) == 1 and nxt[0].op in ("relu", "relu6"):  # a ResNet block's end
                nodes = (node, nxt[0])
                folded.add(nxt[0].name)
        elif node.op == "mul" and _scale_first(graph, inputs, producers):
            inputs = inputs[::-1]  # (x, s): the channel scale second
        steps.append(Step(node.op, nodes, inputs, nodes[-1].output))
    return steps, alias


_MID_BLOCK = ("pw1", "dw")
"""The convolutions a block does not end with."""


def excitation(steps: Sequence[Step]) -> set[int]:
    """The steps of squeeze-and-excitation: each channel product's, and those that compute
    its channel scale, from the global pool that squeezes on."""
    producer = {step.output: i for i, step in enumerate(steps)}
    out: set[int] = set()
    for i, step in enumerate(steps):
        if step.op != "mul":
            continue
        out.add(i)
        todo = [step.inputs[1]]
        while todo:
            j = producer.get(todo.pop())
            if j is None or j in out:
                continue
            out.add(j)
            if steps[j].op != "gap":  # the squeeze: where the scale starts
                todo += steps[j].inputs
    return out


def body(steps: Sequence[Step], source: str) -> str:
    """The tensor a lite residual branch over a stage of ``steps`` (reading ``source``) adds
    to: what its first global pool outside squeeze-and-excitation reads, or without one the
    stage's output."""
    excite = excitation(steps)
    for i, step in enumerate(steps):
        if step.op == "gap" and i not in excite and step.inputs[0] != source:
            return step.inputs[0]
    return steps[-1].output


def _cut_points(steps: list[Step], source: str, sink: str, roles: tuple[str, ...]) -> list[int]:
    """The step counts p after which one tensor alone is alive (read by a later step, or the
    sink), the steps so far hold a convolution since the last such point, and step p - 1 is
    no convolution of a role in ``_MID_BLOCK`` (``roles``: the convolutions', in order) nor a
    squeeze-and-excitation after one (which a block's projection follows)."""
    last_use: dict[str, int] = {}
    for i, step in enumerate(steps):
        for t in step.inputs:
            last_use[t] = i
    last_use[sink] = len(steps)
    excite = excitation(steps)
    cuts, alive, conv, k, mid = [], {source}, False, 0, False
    for i, step in enumerate(steps):
        alive = {t for t in alive | {step.output} if last_use.get(t, -1) > i}
        if i not in excite:
            mid = step.op == "conv" and roles[k] in _MID_BLOCK
        k += step.op == "conv"
        conv = conv or step.op == "conv"
        if len(alive) == 1 and i + 1 < len(steps) and conv and not mid:
            cuts.append(i + 1)
            conv = False
    if cuts and not any(s.op == "conv" for s in steps[cuts[-1] :]):
        cuts.pop()  # a last stage without a convolution joins the one before it
    return cuts


def plan(graph: NetworkGraph) -> Plan:
    """The steps and stages of ``graph``, which :func:`~tinytune.networks.check_supported`
    has passed."""
    classifier = [n for n in graph.nodes if n.op == "linear"][-1]
    steps, alias = _steps(graph, classifier)
    features = classifier.inputs[0]
    while features in alias:
        features = alias[features]
    cuts = _cut_points(steps, graph.input, features, conv_roles(graph))
    return Plan(tuple(steps), (*cuts, len(steps)), classifier, features)
