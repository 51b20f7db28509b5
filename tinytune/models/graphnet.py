"""Every network tinytune fine-tunes, built from an op graph of tinytune's layer modules.

:class:`GraphNet` is the trainable network of a :class:`~tinytune.networks.NetworkGraph`, read
from a user's file or written from a built-in family's sub-network
(:func:`~tinytune.models.convert.subnet_graph`): every
convolution becomes a :class:`~tinytune.models.layers.ConvUnit` with the BatchNorm after it
folded into its weight and bias and the activation after that fused (as the device runs it),
sums and channel products become :class:`Add` and :class:`Mul`, a max pool a
:class:`MaxPool`, a global average pool a :class:`GlobalAvgPool`; flatten, dropout and
identity are dropped; the last linear layer is made anew for the data set's classes
(:class:`Classifier`), as transfer learning does.

The network runs as a sequence of stages cut at its single-tensor cut points (the tensors every
path from the input to the output crosses) that end a block, so that a frozen prefix of stages
can be computed once per image.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch
from torch import Tensor, nn

from tinytune.errors import ModelError
from tinytune.models.layers import (
    SAME,
    Add,
    AvgPool,
    Cat,
    Classifier,
    ConvUnit,
    GlobalAvgPool,
    LiteResidual,
    LiteSite,
    MaxPool,
    Mul,
)
from tinytune.networks import (
    NetworkGraph,
    Step,
    body,
    conv_roles,
    plan,
    read_network,
    same_padded,
)

__all__ = ["GraphNet", "GraphStage", "ImportedNetwork", "fold_batchnorm", "save_module"]


def fold_batchnorm(
    w: Tensor,
    b: Tensor,
    mean: Tensor,
    var: Tensor,
    eps: float,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """A convolution's weight and bias with the BatchNorm after it folded in (its running
    statistics; γ = 1 and β = 0 where it has none): W·γ/σ and β + (b − μ)·γ/σ, σ = √(var + ε)."""
    sigma = torch.sqrt(var + eps)
    gamma = gamma if gamma is not None else torch.ones_like(sigma)
    beta = beta if beta is not None else torch.zeros_like(sigma)
    return w * (gamma / sigma).view(-1, 1, 1, 1), beta + (b - mean) * gamma / sigma


class GraphStage(nn.Module):
    """A run of ops between two single-tensor cut points: one input, one output.

    A lite residual branch (:meth:`attach_lite`) spans the stage from its input to its
    ``body``: its output, or where it pools globally (a global pool other than
    squeeze-and-excitation's, and what follows it), the tensor that pool reads.
    """

    def __init__(
        self,
        steps: list[tuple[str, nn.Module, tuple[str, ...], str]],
        source: str,
        sink: str,
        body: str,
    ) -> None:
        super().__init__()
        self.ops = nn.ModuleDict({name: module for name, module, _, _ in steps})
        self.wiring = [(name, inputs, output) for name, _, inputs, output in steps]
        self.source, self.sink = source, sink
        last_use: dict[str, int] = {}
        for i, (_, inputs, _) in enumerate(self.wiring):
            for t in inputs:
                last_use[t] = i
        self.release = [
            [t for t in inputs if last_use[t] == i and t != sink]
            for i, (_, inputs, _) in enumerate(self.wiring)
        ]
        self.body = body
        self.lite: LiteResidual | None = None
        self.lite_add: Add | None = None

    def attach_lite(self, lite: LiteResidual) -> None:
        self.lite, self.lite_add = lite, Add()

    def forward(self, x: Tensor) -> Tensor:
        env = {self.source: x}
        for (name, inputs, output), done in zip(self.wiring, self.release, strict=True):
            env[output] = self.ops[name](*(env[t] for t in inputs))
            if output == self.body and self.lite is not None:
                env[output] = self.lite_add(env[output], self.lite(x, env[output]))  # type: ignore[misc]
            for t in done:
                del env[t]
        return env[self.sink]


def _module_name(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "op"
    if base[0].isdigit():
        base = f"op_{base}"
    out, k = base, 1
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


def _module(graph: NetworkGraph, step: Step, index: int, role: str) -> nn.Module:
    if step.op == "add":
        return Add(step.act)
    if step.op == "mul":
        return Mul()
    if step.op == "gap":
        return GlobalAvgPool()
    if step.op == "cat":
        return Cat()
    if step.op == "avgpool":
        return AvgPool(tuple(step.nodes[0].attrs["kernel"]))
    if step.op == "maxpool":
        a = step.nodes[0].attrs
        return MaxPool(a["kernel"], a["stride"], (a["padding"][0], a["padding"][2]))
    conv, *rest = step.nodes
    w = torch.from_numpy(conv.params["weight"]).float()
    bias = conv.params.get("bias")
    b = torch.from_numpy(bias).float() if bias is not None else torch.zeros(w.shape[0])
    if rest and rest[0].op == "batchnorm":
        bn = rest[0]
        p = {k: torch.from_numpy(v).float() for k, v in bn.params.items()}
        w, b = fold_batchnorm(
            w, b, p["mean"], p["var"], bn.attrs["eps"], p.get("weight"), p.get("bias")
        )
    top, _, left, _ = conv.attrs["padding"]
    return ConvUnit(
        w,
        b,
        stride=tuple(conv.attrs["stride"]),
        # TensorFlow's "SAME" where the file pads so (recomputed at every input size, as the
        # built-in EfficientNet-Lite0 pads), else the symmetric padding it has
        padding=SAME if same_padded(graph, conv) else (top, left),
        groups=conv.attrs["groups"],
        act=step.act,
        kind=role,
        index=index,
    )


def _stride(stage: GraphStage, x: torch.Size, y: torch.Size) -> tuple[int, int]:
    """(down, across): how much the stage strides from its input (of shape ``x``) to its
    ``body`` (of shape ``y``), the stride a lite residual branch takes: the largest product of
    the strides of the convolutions and pools on a path between them (whatever the sizes, a
    1×1 map included), or the sizes' ratio where that stride does not give the body's size (a
    convolution over the whole map)."""
    of = {stage.source: (1, 1)}
    for name, inputs, output in stage.wiring:
        op = stage.ops[name]
        if isinstance(op, ConvUnit):
            step = (op.stride, op.stride_w)
        elif isinstance(op, MaxPool):
            step = op.stride
        elif isinstance(op, AvgPool):
            step = (op.ratio, op.ratio_w)
        else:
            step = (1, 1)
        down, across = (max(of[t][axis] for t in inputs if t in of) for axis in (0, 1))
        of[output] = (down * step[0], across * step[1])
    return tuple(  # type: ignore[return-value]
        s if -(-int(a) // s) == int(b) else max(1, round(a / b))
        for s, a, b in zip(of[stage.body], x[2:], y[2:], strict=True)
    )


class GraphNet(nn.Module):
    """The trainable network of a :class:`~tinytune.networks.NetworkGraph`: the stages of its
    :func:`~tinytune.networks.plan` (all of them, or the first ``stages``: the network cut
    there, a global average pool on the last stage's output), then a new classifier for
    ``n_classes``.

    Offers what the fine-tune, the update schemes and the hardware model read of a network:
    :meth:`convs` (index i at position i), ``classifier``, :meth:`stages`,
    :meth:`frozen_prefix`, :meth:`prefix` and :meth:`forward_from`, and ``resolution`` (the
    input's height), ``in_channels`` and ``input_shape`` (C, H, W), the input's.
    """

    def __init__(
        self,
        graph: NetworkGraph,
        n_classes: int,
        resolution: int,
        generator: torch.Generator,
        stages: int | None = None,
    ) -> None:
        super().__init__()
        layout = plan(graph)
        n = len(layout.stages) if stages is None else stages
        if not 1 <= n <= len(layout.stages):
            raise ModelError(
                f"{graph.source!r} has {len(layout.stages)} stages; a cut keeps 1 to "
                f"{len(layout.stages)}, got {n}"
            )
        roles, taken = conv_roles(graph), set[str]()
        built, source, index = [], graph.input, 0
        for stage in range(n):
            steps = []
            for step in layout.stage_steps(stage):
                role = roles[index] if step.op == "conv" else ""
                module = _module(graph, step, index, role)
                steps.append((_module_name(step.name, taken), module, step.inputs, step.output))
                index += step.op == "conv"
            sink = steps[-1][3]
            if stage == n - 1 and n < len(layout.stages):  # cut: pool what the stage hands on
                steps.append((_module_name("cut_pool", taken), GlobalAvgPool(), (sink,), "cut"))
                sink = "cut"
            built.append(GraphStage(steps, source, sink, body(layout.stage_steps(stage), source)))
            source = sink
        self.stages_ = nn.ModuleList(built)
        in_features = (
            int(layout.classifier.params["weight"].shape[1])
            if n == len(layout.stages)
            else int(graph.shapes[layout.stage_steps(n - 1)[-1].output][1])
        )
        self.classifier = Classifier(in_features, n_classes, generator)
        self.resolution = resolution
        _, c, h, w = graph.input_shape
        self.in_channels = int(c)
        # the exported input's shape at the resolution (its height): a square one at any, a
        # spectrogram or a sensor window at the size it was exported at
        self.input_shape = (int(c), resolution, round(w * resolution / h))
        self.source = graph.source

    def convs(self) -> list[ConvUnit]:
        """The convolutions, index i at position i (lite residual branches excluded)."""
        return [m for stage in self.stages_ for m in stage.ops.values() if isinstance(m, ConvUnit)]

    def stages(self) -> list[nn.Module]:
        return list(self.stages_)

    def frozen_prefix(self) -> int:
        """How many leading stages hold no trainable parameter: with every convolution's
        BatchNorm folded and no augmentation, their output for an image does not change while
        the rest trains, so it can be computed once (:meth:`forward_from`). When only the
        classifier trains, that is every stage: the pooled features."""
        for n, module in enumerate(self.stages_):
            if any(p.requires_grad for p in module.parameters()):
                return n
        return len(self.stages_)

    def prefix(self, x: Tensor, n: int) -> Tensor:
        """The output of the first ``n`` stages."""
        for module in self.stages_[:n]:
            x = module(x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_from(x, 0)

    def forward_from(self, h: Tensor, n: int) -> Tensor:
        """The logits from the output of the first ``n`` stages:
        ``forward(x) == forward_from(prefix(x, n), n)``."""
        for module in self.stages_[n:]:
            h = module(h)
        return self.classifier(h)

    def lite_sites(self) -> list[LiteSite]:
        """Where lite residual branches may go: on each block, the stages after the stem's
        (block b, stage b + 1, at position b), from its input to its ``body``; TinyTL places
        none on block 0."""
        shapes: list[tuple[torch.Size, torch.Size]] = []
        body: dict[int, torch.Size] = {}
        hooks = []
        for i, stage in enumerate(self.stages_):
            producer = next(n for n, _, out in stage.wiring if out == stage.body)

            def keep(_m: nn.Module, _a: object, y: Tensor, i: int = i) -> None:
                body[i] = y.shape

            hooks.append(stage.ops[producer].register_forward_hook(keep))
        try:
            with torch.no_grad():
                x = torch.zeros(1, *self.input_shape)
                for i, stage in enumerate(self.stages_):
                    y = stage(x)
                    shapes.append((x.shape, body[i]))
                    x = y
        finally:
            for h in hooks:
                h.remove()
        return [
            LiteSite(stage, int(x[1]), int(y[1]), _stride(stage, x, y), (int(x[2]), int(x[3])))
            for stage, (x, y) in zip(self.stages_, shapes, strict=True)
        ][1:]

    def extra_repr(self) -> str:
        return f"from {self.source!r}: {len(self.stages_)} stages, {len(self.convs())} convs"


class ImportedNetwork(nn.Module):
    """A user's network as the search reads it in place of a supernet: its one sub-network is
    the whole network, whose weights the graph holds (:class:`GraphNet` copies them)."""

    def __init__(self, graph: NetworkGraph) -> None:
        super().__init__()
        self.graph = graph

    def extra_repr(self) -> str:
        return f"{self.graph.source!r}: {len(self.graph.nodes)} nodes"


def save_module(module: nn.Module, example: Tensor, folder: Path) -> Path:
    """``module`` exported by ``torch.export`` at the shape of ``example`` (its eval mode, the
    module's own mode restored after) and saved in ``folder`` as ``DIGEST.pt2``, named by its
    graph's digest: the same network exported again is the same file, so a study searching it
    can be continued.

    Raises:
        ModelError: ``torch.export`` cannot export it, or it holds an op tinytune does not
            train (in one line).
    """
    if not isinstance(example, Tensor):
        raise ModelError(
            f"example_input must be a torch.Tensor of the network's input shape (batch 1), got "
            f"{type(example).__name__}"
        )
    training = module.training
    try:
        program = torch.export.export(module.eval(), (example.detach(),))
    except Exception as e:  # torch.export's own errors, many kinds
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ModelError(f"torch.export cannot export the module: {first}") from e
    finally:
        module.train(training)
    folder.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(suffix=".pt2", dir=folder)
    os.close(handle)
    temporary = Path(name)
    try:
        torch.export.save(program, name)
        try:
            digest = read_network(name).digest
        except ModelError as e:  # said of the module, not of a file the user never named
            raise ModelError(str(e).replace(repr(name), "the module")) from None
        path = folder / f"{digest}.pt2"
        if path.is_file():  # kept from an earlier export: the same network, the same file
            return path
        temporary.replace(path)
        return path
    finally:
        temporary.unlink(missing_ok=True)
