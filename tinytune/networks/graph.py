"""A user's network as an op graph, read from a file without running any of its code.

A :class:`NetworkGraph` is what a reader (:mod:`tinytune.networks.pt2`,
:mod:`tinytune.networks.onnx`) makes of an exported network: its nodes in execution order, each
a canonical op of :data:`OPS` over named tensors with static shapes, and the parameters each
node holds as numpy arrays. It is pure data: :mod:`tinytune.models` builds the trainable
network from it, :mod:`tinytune.spaces` reads the search space off it.

Which canonical ops the rest of tinytune can train, count and lower is :func:`check_supported`'s
business; a reader refuses only what has no canonical form at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinytune.errors import ModelError

__all__ = [
    "ACTIVATION_OPS",
    "OPS",
    "SUPPORTED",
    "NetworkGraph",
    "Node",
    "check_supported",
    "conv_roles",
    "dense_as_conv",
    "fold_pads",
    "fuse_silu",
    "lift_1d",
    "lift_1d_dim",
    "same_padded",
    "takes_other_sizes",
    "total_stride",
]

ACTIVATION_OPS = ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu")
OPS = (
    "conv",
    "batchnorm",
    *ACTIVATION_OPS,
    "add",
    "mul",
    "cat",
    "maxpool",
    "avgpool",
    "gap",
    "flatten",
    "linear",
    "identity",
    "pad",
)
"""The canonical ops a reader maps a file's operators to."""

SUPPORTED = (
    "2-D convolution (any kh x kw kernel and stride, symmetric or TensorFlow 'SAME' padding, "
    "groups 1 or depthwise, no dilation), zero padding before one; a 1-D network's "
    "convolutions and pools, as 1 x k ones over (N, C, 1, T)",
    "BatchNorm after a convolution",
    "ReLU, ReLU6, hard-swish, hard-sigmoid, sigmoid or SiLU (swish) after a convolution",
    "add, and ReLU or ReLU6 after one",
    "channel-wise mul (squeeze-excite)",
    "concatenation along the channels",
    "max pooling (any window and stride, symmetric padding up to half the window, no dilation "
    "or ceil mode)",
    "average pooling of r x s windows at stride (r, s), unpadded; global average pooling",
    "flatten",
    "dropout and identity (dropped)",
    "linear layers: the last the classifier (over pooled or flattened features), any before "
    "it a dense layer (with BatchNorm and an activation after it)",
)
"""What tinytune trains, plans, quantizes and lowers to C today, as a user reads it."""


@dataclass(frozen=True)
class Node:
    """One operation of the user's network.

    Attributes:
        name: the node's name in the user's graph (what an error quotes).
        op: a canonical op of :data:`OPS`.
        source: the file's own name of the operator (``aten.conv2d.default``, ``Conv``).
        inputs: the names of the activation tensors it reads, in order.
        output: the name of the tensor it writes.
        attrs: the op's attributes: for ``conv`` ``kernel`` (kh, kw), ``stride`` (sh, sw),
            ``padding`` (top, bottom, left, right), ``dilation`` (dh, dw), ``groups``; for
            ``batchnorm`` ``eps``; for pools ``kernel``, ``stride``, ``padding``.
        params: its parameters by role (``weight``, ``bias``, ``mean``, ``var``).
    """

    name: str
    op: str
    source: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkGraph:
    """A network read from a file: nodes in execution order over tensors of static shapes.

    Attributes:
        nodes: the operations, each reading only the input and earlier outputs.
        shapes: every activation tensor's shape, batch included.
        input: the name of the one input tensor; ``output`` that of the one output.
        source: the file it was read from (what errors name).
    """

    nodes: tuple[Node, ...]
    shapes: dict[str, tuple[int, ...]]
    input: str
    output: str
    source: str

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.shapes[self.input]

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {name: [] for name in self.shapes}
        for node in self.nodes:
            for t in node.inputs:
                out.setdefault(t, []).append(node)
        return out

    def producers(self) -> dict[str, Node]:
        return {node.output: node for node in self.nodes}

    @property
    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the network (its nodes, shapes and parameter bytes),
        whatever file it came in: the same network exported twice has one digest."""
        parts = [json.dumps([self.input, self.output, sorted(self.shapes.items())]).encode()]
        for node in self.nodes:
            head = [node.name, node.op, node.inputs, node.output, sorted(node.attrs.items())]
            parts.append(json.dumps(head, default=list).encode())
            for role, value in sorted(node.params.items()):
                parts.append(f"{role}{value.dtype}{value.shape}".encode())
                parts.append(np.ascontiguousarray(value).tobytes())
        return hashlib.sha256(b"".join(parts)).hexdigest()[:16]


def lift_1d(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A 1-D network's (N, C, T) tensor as the 2-D one tinytune trains, (N, C, 1, T); any
    other shape as it is."""
    return (shape[0], shape[1], 1, shape[2]) if len(shape) == 3 else shape


def lift_1d_dim(dim: int) -> int:
    """A dim of a 1-D network's (N, C, T) tensor (negative ones too) as the same dim of its
    (N, C, 1, T): N and C keep theirs, T becomes 3."""
    dim %= 3
    return 3 if dim == 2 else dim


def fuse_silu(nodes: list[Node]) -> list[Node]:
    """``x * sigmoid(x)``, the form core ATen and ONNX give SiLU (swish), as one ``silu``
    node: a sigmoid whose one reader is a product of it with its own input."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    fused: dict[str, Node] = {}  # the product's name -> the sigmoid
    for n in nodes:
        nxt = readers.get(n.output, [])
        if (
            n.op == "sigmoid"
            and len(nxt) == 1
            and nxt[0].op == "mul"
            and sorted(nxt[0].inputs) == sorted((n.inputs[0], n.output))
        ):
            fused[nxt[0].name] = n
    gone = {s.name for s in fused.values()}
    out = []
    for n in nodes:
        if n.name in gone:
            continue
        s = fused.get(n.name)
        out.append(n if s is None else Node(s.name, "silu", s.source, s.inputs, n.output))
    return out


def _through(t: str, producers: dict[str, Node]) -> str:
    """The tensor ``t`` is a view of: back through flatten and identity."""
    while t in producers and producers[t].op in ("flatten", "identity"):
        t = producers[t].inputs[0]
    return t


def dense_as_conv(graph: NetworkGraph) -> NetworkGraph:
    """``graph`` with every linear layer but the last (a hidden dense layer) as the
    convolution it is: over the whole map it reads flattened, (O, C·H·W) as an (O, C, H, W)
    kernel (PyTorch's and ONNX's flatten order), or as a 1×1 convolution over (N, F, 1, 1)
    features (a global pool's, another dense layer's); its output, and the BatchNorm and
    activation after it, (N, O, 1, 1). The flattens it read through go. The last linear layer
    stays the classifier."""
    linears = [n for n in graph.nodes if n.op == "linear"]
    if len(linears) < 2:
        return graph
    producers = graph.producers()
    shapes = dict(graph.shapes)
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.op == "linear" and n is not linears[-1]:
            src = _through(n.inputs[0], producers)
            shape = shapes[src]
            if len(shape) == 2 and src in producers and producers[src].op in ("gap", "conv"):
                shape = shapes[src] = (*shape, 1, 1)  # pooled features, as the pool keeps them
            if len(shape) != 4:
                raise ModelError(
                    f"{graph.source!r}: node {n.name!r} ({n.source}) is a linear layer over "
                    f"{list(shape)}, which tinytune reads only over a convolution's features"
                )
            weight = n.params["weight"]
            _, c, h, w = shape
            attrs = {"kernel": (h, w), "stride": (1, 1), "padding": (0, 0, 0, 0),
                     "dilation": (1, 1), "groups": 1, "whole_map": h * w > 1}  # fmt: skip
            params = {"weight": weight.reshape(weight.shape[0], c, h, w)}
            params |= {"bias": n.params["bias"]} if "bias" in n.params else {}
            shapes[n.output] = (shape[0], weight.shape[0], 1, 1)
            nodes.append(Node(n.name, "conv", n.source, (src,), n.output, attrs, params))
        elif n.op in ("batchnorm", *ACTIVATION_OPS, "identity") and len(shapes[n.inputs[0]]) > len(
            shapes[n.output]
        ):  # after a dense layer, now (N, O, 1, 1)
            shapes[n.output] = shapes[n.inputs[0]]
            nodes.append(n)
        else:
            nodes.append(n)
    read = {t for n in nodes for t in n.inputs} | {graph.output}
    while True:  # the flattens the convolutions read through, where nothing else reads them
        dead = [n for n in nodes if n.op in ("flatten", "identity") and n.output not in read]
        if not dead:
            break
        nodes = [n for n in nodes if n not in dead]
        read = {t for n in nodes for t in n.inputs} | {graph.output}
    live = {n.output for n in nodes} | {graph.input}
    shapes = {t: s for t, s in shapes.items() if t in live}
    return NetworkGraph(tuple(nodes), shapes, graph.input, graph.output, graph.source)


def takes_other_sizes(graph: NetworkGraph) -> bool:
    """Whether the network computes at input sizes other than the exported one: it pools
    globally, and nothing reads a whole map at once (a flatten of a map, a dense layer over
    one), which fixes the size it was exported at."""
    whole_map = any(
        (n.op == "flatten" and graph.shapes[n.inputs[0]][2:] not in ((1, 1), ()))
        or (n.op == "conv" and n.attrs.get("whole_map"))
        for n in graph.nodes
    )
    return any(n.op == "gap" for n in graph.nodes) and not whole_map


def fold_pads(nodes: list[Node]) -> list[Node]:
    """Zero padding whose one reader is a convolution, folded into the convolution's padding
    (TensorFlow-trained networks pad before a strided convolution, one more after than
    before); a padding that feeds anything else is left, for :func:`check_supported` to refuse
    by name."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    folded: dict[str, Node] = {}  # the convolution's name -> the padding before it
    for n in nodes:
        nxt = readers.get(n.output, [])
        if (
            n.op == "pad"
            and len(nxt) == 1
            and nxt[0].op == "conv"
            and nxt[0].inputs[0] == n.output
        ):
            folded[nxt[0].name] = n
    out = []
    for n in nodes:
        if n.op == "pad" and any(p is n for p in folded.values()):
            continue
        pad = folded.get(n.name)
        if pad is not None:
            total = tuple(
                a + b for a, b in zip(n.attrs["padding"], pad.attrs["padding"], strict=True)
            )
            n = Node(n.name, n.op, n.source, pad.inputs, n.output, n.attrs | {"padding": total},
                     n.params)  # fmt: skip
        out.append(n)
    return out


def same_padded(graph: NetworkGraph, node: Node) -> bool:
    """Whether convolution ``node`` pads its input as TensorFlow's "SAME" does at the exported
    size, and not symmetrically: one more after than before (a strided convolution on an even
    size, an even kernel), which it then does at any size."""
    if "same" in node.attrs:  # said by the graph's writer (a built-in network's)
        return bool(node.attrs["same"])
    top, bottom, left, right = node.attrs["padding"]
    if top == bottom and left == right:
        return False
    want = []
    sizes = graph.shapes[node.inputs[0]][2:]
    for size, kernel, stride in zip(
        sizes, node.attrs["kernel"], node.attrs["stride"], strict=True
    ):
        total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
        want += [total // 2, total - total // 2]
    return [top, bottom, left, right] == want


def _refuse(graph: NetworkGraph, node: Node, what: str) -> ModelError:
    return ModelError(
        f"{graph.source!r}: node {node.name!r} ({node.source}) is {what}, which tinytune does "
        f"not train yet; supported: {'; '.join(SUPPORTED)}"
    )


def _check_conv(graph: NetworkGraph, node: Node) -> None:
    a = node.attrs
    top, bottom, left, right = a["padding"]
    if (top != bottom or left != right) and not same_padded(graph, node):
        raise _refuse(
            graph, node, f"a convolution padded {list(a['padding'])} (asymmetric, not 'SAME')"
        )
    if tuple(a["dilation"]) != (1, 1):
        raise _refuse(graph, node, f"a dilated convolution ({list(a['dilation'])})")
    c_in = graph.shapes[node.inputs[0]][1]
    c_out = node.params["weight"].shape[0]
    if a["groups"] != 1 and not (a["groups"] == c_in == c_out):
        raise _refuse(graph, node, f"a grouped convolution ({a['groups']} groups)")


def _check_maxpool(graph: NetworkGraph, node: Node) -> None:
    a = node.attrs
    top, bottom, left, right = a["padding"]
    if tuple(a.get("dilation", (1, 1))) != (1, 1):
        raise _refuse(graph, node, f"a dilated max pooling ({list(a['dilation'])})")
    (kh, kw), (sh, sw) = a["kernel"], a["stride"]
    if top != bottom or left != right or 2 * top > kh or 2 * left > kw:
        raise _refuse(graph, node, f"a max pooling padded {list(a['padding'])}")
    h, w = graph.shapes[node.inputs[0]][2:]
    floor = ((h + 2 * top - kh) // sh + 1, (w + 2 * left - kw) // sw + 1)
    if tuple(graph.shapes[node.output][2:]) != floor:
        raise _refuse(graph, node, "a max pooling in ceil mode")


def check_supported(graph: NetworkGraph) -> None:
    """Refuse, in one line naming the node, a network that tinytune cannot train, plan,
    quantize and lower end to end: see :data:`SUPPORTED`.

    Raises:
        ModelError: the first node outside the supported set.
    """
    producers = graph.producers()
    consumers = graph.consumers()
    if len(graph.input_shape) != 4:
        raise ModelError(
            f"{graph.source!r} takes an input of shape {list(graph.input_shape)}; tinytune "
            "trains networks on (N, C, H, W) images"
        )
    linears = [n for n in graph.nodes if n.op == "linear"]
    if not linears:
        raise ModelError(
            f"{graph.source!r} has no linear classifier to train; tinytune makes the last "
            "linear layer anew for the data set's classes"
        )
    for node in graph.nodes:
        if node.op == "conv":
            _check_conv(graph, node)
        elif node.op in ("batchnorm", *ACTIVATION_OPS):
            before = producers.get(node.inputs[0])
            allowed = ("conv",) if node.op == "batchnorm" else ("conv", "batchnorm")
            if node.op in ("relu", "relu6"):
                allowed += ("add",)  # a ResNet block's end
            if before is None or before.op not in allowed or len(consumers[node.inputs[0]]) > 1:
                after = (
                    "a convolution"
                    if node.op == "batchnorm"
                    else "a convolution's output"
                    if node.op not in ("relu", "relu6")
                    else "a convolution or a sum"
                )
                raise _refuse(graph, node, f"a {node.op} that does not follow {after}")
        elif node.op == "mul":
            x, s = sorted((graph.shapes[t] for t in node.inputs), key=lambda t: t[2:] == (1, 1))
            if len(s) != 4 or s[2:] != (1, 1) or s[:2] != x[:2]:
                raise _refuse(graph, node, f"a product of {list(x)} and {list(s)}")
        elif node.op == "maxpool":
            _check_maxpool(graph, node)
        elif node.op == "cat":
            rank = len(graph.shapes[node.inputs[0]])
            if rank != 4 or node.attrs.get("dim", 1) % rank != 1:
                raise _refuse(graph, node, f"a concatenation along dim {node.attrs.get('dim')}")
        elif node.op == "avgpool":
            a = node.attrs
            (kh, kw), (sh, sw) = a["kernel"], a["stride"]
            h, w = graph.shapes[node.inputs[0]][2:]
            floor = tuple(graph.shapes[node.output][2:]) == (h // kh, w // kw)
            if not (kh == sh and kw == sw and not any(a["padding"]) and floor):
                raise _refuse(
                    graph, node, f"an average pooling of {kh}x{kw} at stride {sh}x{sw}, padded "
                    f"{list(a['padding'])}"
                )  # fmt: skip
        elif node.op == "pad":
            raise _refuse(graph, node, "a padding before no convolution")
        elif node.op == "flatten" and len(graph.shapes[node.inputs[0]]) == 4:
            h, w = graph.shapes[node.inputs[0]][2:]
            readers = consumers.get(node.output, [])
            if (h, w) != (1, 1) and [r.op for r in readers] != ["linear"]:
                raise _refuse(graph, node, f"a flatten of {h}x{w} features for no linear layer")
    last = linears[-1]
    if last.output != graph.output:
        raise _refuse(graph, producers[graph.output], "an op after the classifier")


def _feeds_depthwise(node: Node, consumers: dict[str, list[Node]]) -> bool:
    """Whether ``node``'s output reaches a depthwise convolution through BatchNorm and
    activations only."""
    out = node.output
    while True:
        readers = consumers.get(out, [])
        if len(readers) != 1:
            return False
        (reader,) = readers
        if reader.op == "conv":
            return reader.attrs["groups"] > 1
        if reader.op not in ("batchnorm", *ACTIVATION_OPS):
            return False
        out = reader.output


def _role(
    graph: NetworkGraph, node: Node, index: int, last_dw: int, consumers: dict[str, list[Node]]
) -> str:
    if "role" in node.attrs:
        return str(node.attrs["role"])
    out_c, _, kh, kw = node.params["weight"].shape
    in_c = graph.shapes[node.inputs[0]][1]
    if index == 0:
        return "stem"
    if node.attrs["groups"] > 1:
        return "dw"
    if (kh, kw) == (1, 1) and out_c > in_c:
        if index > last_dw >= 0:
            return "head"
        # in a network of depthwise blocks, an expansion feeds one; a network without
        # depthwise convolutions (a ResNet's) has its widening 1×1s as expansions
        return "pw1" if last_dw < 0 or _feeds_depthwise(node, consumers) else "pw2"
    if (kh, kw) == (1, 1):
        return "pw2"
    return "conv"


def conv_roles(graph: NetworkGraph) -> tuple[str, ...]:
    """The kinds of the network's convolutions in execution order, as the update-scheme
    presets read them (index i is convolution i from the input): ``stem`` (the first), ``dw``
    (depthwise), ``pw1`` (a 1×1 that widens and feeds a depthwise one: an expansion; in a
    network without depthwise convolutions, any 1×1 that widens), ``head`` (a 1×1 that widens
    after the last depthwise one), ``pw2`` (any other 1×1: a projection, squeeze-and-excitation's
    1×1s), ``conv`` (any other). A convolution whose node names its ``role`` (a built-in network's:
    ``se1`` and ``se2`` for squeeze-and-excitation's) has that one."""
    convs = [n for n in graph.nodes if n.op == "conv"]
    last_dw = max((i for i, n in enumerate(convs) if n.attrs["groups"] > 1), default=-1)
    consumers = graph.consumers()
    return tuple(_role(graph, n, i, last_dw, consumers) for i, n in enumerate(convs))


def total_stride(graph: NetworkGraph) -> int:
    """The input's height over that of the smallest feature map a convolution writes (those
    of squeeze-and-excitation, on pooled 1×1 maps, aside): the smallest input side that leaves
    every convolution an output."""
    height = graph.input_shape[2]
    smallest = min(
        (
            graph.shapes[n.output][2]
            for n in graph.nodes
            if n.op == "conv" and graph.shapes[n.inputs[0]][2] > 1
        ),
        default=height,
    )
    return max(1, height // max(1, smallest))
