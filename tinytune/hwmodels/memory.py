"""Peak training memory of a traced network under its update scheme.

Every byte of a training step is a *buffer* with a lifetime on one timeline: forward steps
0…n−1 (op i runs at step i), then backward steps n…2n−1 (op i's backward runs at step 2n−1−i).
The peak is the largest sum of the buffers alive at one step. Buffers:

* activations: each tensor from the op that writes it to its last forward reader — and on to the
  backward step of an op that keeps the whole tensor for backward; in int8 the logits are not
  among them (the engine computes them, and their gradient in place, in float32 in its
  workspace, outside the arena: ``workspace_bytes``);
* kept for backward (TinyTL Table 1, MCUNetV3 §2.2), from the op's forward step to its backward
  step: a convolution keeps its first k input channels only when its weight is updated (k = the
  trained channels); a folded-BatchNorm scale that is trained keeps the convolution output;
  ReLU/ReLU6 keep a 1-bit mask per element, h-swish/h-sigmoid their full input; GroupNorm its
  input and two statistics per (sample, group); the classifier its input when its weight is
  trained; the SE product each operand whose partner needs a gradient; add, pooling and
  upsampling keep nothing;
* activation gradients: ∂L/∂t from the backward step of t's last reader to that of its writer;
* parameter gradients, by ``update`` (:data:`UPDATES`): ``fused`` — none: the kernel that
  computes a weight's or bias's gradient applies it element by element, as tinytune's int8
  engine does (:func:`tinytune.lowering.passes.fuse_gradient_updates`), so the gradient never
  exists as a buffer; ``reordered`` — each one a buffer at its backward step only, applied
  right after (the Tiny Training Engine's in-place update, MCUNetV3 §3); ``deferred`` — held
  from their backward step to the end, as a framework applies them. With gradient
  accumulation over micro-batches every mode holds them for the whole step (they outlive the
  micro-batch);
* static: trained weights copied to SRAM and optimizer state, for the whole step. Frozen weights
  stay in flash.

Two schedules spend less, in int8 (the bundles' engine runs them; PyTorch runs neither):

* **in-place depthwise convolution** (TinyEngine): a depthwise convolution whose input is read
  by nothing after it (and not kept for backward, nor the network's input) computes each output
  channel into a one-channel buffer (``<op>:channel``) and writes it over its input, so that its
  output shares its input's buffer (one buffer of the larger size, alive over both lives; the
  report's ``aliases`` map the output to it). A layer whose weight trains keeps its input and
  is not in place; one whose output keeps a ReLU mask is in place when each channel's mask
  starts on a byte (output pixels a multiple of 8);
* **a frozen prefix patch by patch** (MCUNetV2; :mod:`tinytune.ir.patches`): each tensor
  the stage writes is a buffer of its largest patch region, alive over the same steps; the
  network input stays alive to the stage's last step; the stage's output is whole from the
  stage's first step (the patches fill it one after the other), and its patch region is a
  buffer ``t<id>:patch`` at the step that writes it.

The cost function is pure: no I/O, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tinytune.errors import ConfigError
from tinytune.hwmodels.analytic import mcunetv3_extra_bytes
from tinytune.hwmodels.latency import phase_features
from tinytune.hwmodels.layout import ArenaLayout, Buffer, plan_layout
from tinytune.ir import TABLE_ACTIVATIONS, Graph, Op, PatchPlan

__all__ = [
    "CODE_BYTES_BASE",
    "CODE_BYTES_MBV3",
    "CODE_BYTES_PER_CALL",
    "OPTIMIZERS",
    "PRECISIONS",
    "UPDATES",
    "MemoryReport",
    "Precision",
    "plan_memory",
]


@dataclass(frozen=True)
class Precision:
    """Element sizes in bytes for one numeric format of the training step."""

    name: str
    activation: int  # activations and what is kept of them for backward
    gradient: int  # activation gradients
    weight: int  # conv weights (trained copies in SRAM, frozen ones in flash)
    bias: int
    param_gradient: int
    classifier: int  # the classifier runs in fp32 in both formats (MCUNetV3 App. C)


PRECISIONS = {
    "fp32": Precision("fp32", 4, 4, 4, 4, 4, 4),
    "int8": Precision("int8", 1, 1, 1, 4, 4, 4),
}
UPDATES = ("fused", "reordered", "deferred")
"""When a parameter's gradient is applied, and so how long it is a buffer (see the module)."""
OPTIMIZERS = {"sgd": 0, "sgd-momentum": 1, "adam": 2}  # fp32 state tensors per trained element


@dataclass(frozen=True)
class MemoryReport:
    """The result of :func:`plan_memory`.

    Attributes:
        peak_bytes: the peak SRAM of one training step.
        peak_step: the step of the peak; ``peak_phase`` ``forward`` or ``backward``;
            ``peak_op``: the op running then.
        breakdown: bytes per buffer category alive at the peak.
        timeline: bytes alive at every step (2n entries).
        buffers: every buffer, for laying out an arena.
        flash_bytes: constant bytes stored in flash: in int8 every constant array of the
            exported step, the trained parameters' initial values included
            (:func:`_int8_constant_bytes`, equal to the lowered step's); in fp32 every weight,
            bias and scale. Program code is not included.
        code_bytes: an estimate of the int8 training engine's code in flash (see
            :data:`CODE_BYTES_BASE`); 0 for fp32, which tinytune does not export.
        workspace_bytes: SRAM the int8 engine needs outside the arena: the float32 logits
            and one int32 exponent per int8 activation-gradient tensor (the statistics of a
            GroupNorm that nothing back-propagates through are not counted); 0 for fp32.
        saved_bytes: everything kept for backward: the derived buffers, and each whole tensor
            that some op keeps once, however many ops keep it.
        layout: every buffer's offset in one static arena (:func:`plan_layout`).
        arena_bytes: the size of that arena — what a device must reserve; at least
            ``peak_bytes`` (live bytes can fragment), equal to it but for alignment in practice.
        mcunetv3_extra_bytes: MCUNetV3's analytic extra memory (:mod:`.analytic`), per sample.
        aliases: the buffer each in-place depthwise output lives in (``t<out>`` → ``t<in>``).
        patches: the frozen prefix's patch plan, or None.
    """

    precision: str
    peak_bytes: int
    peak_step: int
    peak_phase: str
    peak_op: str
    breakdown: dict[str, int]
    timeline: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    flash_bytes: int
    saved_bytes: int
    layout: ArenaLayout
    mcunetv3_extra_bytes: int
    code_bytes: int = 0
    workspace_bytes: int = 0
    aliases: dict[str, str] = field(default_factory=dict)
    patches: PatchPlan | None = None

    @property
    def arena_bytes(self) -> int:
        return self.layout.arena_bytes

    def buffer_of(self, t: int) -> str:
        """The name of the buffer that holds tensor ``t``'s activation."""
        return self.aliases.get(f"t{t}", f"t{t}")


def _kept(op: Op, graph: Graph, p: Precision) -> tuple[list[int], list[tuple[str, int]]]:
    """What op keeps for backward: whole tensors (ids) and derived buffers (name, bytes)."""
    out = graph.tensors[op.output]
    if not out.requires_grad:
        return [], []
    ins = [graph.tensors[t] for t in op.inputs]
    whole: list[int] = []
    derived: list[tuple[str, int]] = []
    prm = op.params
    if op.kind == "conv":
        x = ins[0]
        k = prm.trained_in_channels
        if prm.trained_weight:
            if k == x.shape[1]:
                whole.append(x.id)
            else:  # the first k input channels, (N, k, H, W)
                derived.append(("input[:k]", x.numel // x.shape[1] * k * p.activation))
        if prm.scale_trained:
            derived.append(("conv out", out.numel * p.activation))
    elif op.kind == "linear":
        if prm.trained_weight:
            whole.append(ins[0].id)
    elif op.kind == "groupnorm":
        whole.append(ins[0].id)
        derived.append(("mean+rstd", 2 * out.shape[0] * op.attrs["groups"] * 4))
    elif op.kind == "maxpool":  # the windows' largest values are found again in backward
        whole.append(ins[0].id)
    elif op.kind == "mul":
        x, s = ins
        if s.requires_grad:
            whole.append(x.id)
        if x.requires_grad:
            whole.append(s.id)
    if op.act in ("relu", "relu6"):
        derived.append(("mask", math.ceil(out.numel / 8)))
    elif op.act in TABLE_ACTIVATIONS:
        derived.append(("pre-activation", out.numel * p.activation))
    return whole, derived


def _param_bytes(op: Op, p: Precision, trained_only: bool) -> int:
    prm = op.params
    wbytes = p.classifier if op.kind == "linear" else p.weight
    if trained_only:
        return (
            prm.trained_weight * wbytes
            + (prm.bias * p.bias if prm.bias_trained else 0)
            + (prm.scale * 4 if prm.scale_trained else 0)
        )
    return prm.weight * wbytes + prm.bias * p.bias + prm.scale * 4  # fp32 flash (int8: below)


def plan_memory(
    graph: Graph,
    *,
    precision: str = "int8",
    update: str = "fused",
    optimizer: str = "sgd",
    accumulate: int = 1,
    patches: PatchPlan | None = None,
    in_place: bool = True,
) -> MemoryReport:
    """Plan the buffers of one training step of ``graph`` and find its peak.

    Args:
        graph: the traced network; its batch size is that of the traced example.
        precision: ``fp32`` or ``int8`` (int8 activations and weights, int32 biases, fp32
            classifier and parameter gradients).
        update: when parameter gradients are applied (:data:`UPDATES`): ``fused`` (the
            int8 engine of the bundles: no gradient buffer), ``reordered`` (each gradient a
            buffer for its own backward step) or ``deferred`` (all held to the end).
        optimizer: ``sgd`` (no state, the on-device choice), ``sgd-momentum`` or ``adam``.
        accumulate: micro-batches whose gradients are summed before one update; above 1 every
            parameter gradient is held for the whole step (it outlives the micro-batch),
            whatever ``update`` says.
        patches: run the frozen prefix patch by patch (int8 only), from
            :func:`~tinytune.ir.patches.plan_patches` of this graph.
        in_place: in int8, run depthwise convolutions in place where they may, as the
            bundles' engine does; False plans every output apart (an engine that does not).
    """
    _check_plan(precision, update, optimizer, accumulate, patches)
    p = PRECISIONS[precision]
    n = len(graph.ops)
    last = 2 * n - 1
    producer = graph.producer()
    end_of: dict[int, int] = {}  # tensor id -> last step its activation is alive
    for t, readers in graph.consumers().items():
        end_of[t] = max(readers, default=producer.get(t, 0))
    end_of[graph.output] = max(end_of[graph.output], n - 1)

    buffers: list[Buffer] = []
    kept_whole: set[int] = set()  # a tensor that several ops keep is one buffer, held once
    saved_total = 0
    for op in graph.ops:
        whole, derived = _kept(op, graph, p)
        for t in whole:
            end_of[t] = max(end_of[t], last - op.index)
            kept_whole.add(t)
        for name, nbytes in derived:
            buffers.append(Buffer(f"{op.name}:{name}", "saved", nbytes, op.index, last - op.index))
            saved_total += nbytes
    saved_total += sum(graph.tensors[t].numel * p.activation for t in kept_whole)
    at = _tensor_buffers(graph, p, end_of, patches, buffers)
    buffers += _parameter_buffers(graph, p, update, optimizer, accumulate)
    aliases: dict[str, str] = {}
    if precision == "int8" and in_place:
        buffers = _run_in_place(graph, buffers, at, aliases, kept_whole, end_of, patches)
    timeline, peak_step, breakdown = _peak(buffers, last)
    op_index = peak_step if peak_step < n else last - peak_step
    int8 = precision == "int8"
    return MemoryReport(
        precision=precision,
        peak_bytes=timeline[peak_step],
        peak_step=peak_step,
        peak_phase="forward" if peak_step < n else "backward",
        peak_op=graph.ops[op_index].name,
        breakdown=breakdown,
        timeline=tuple(timeline),
        buffers=tuple(buffers),
        flash_bytes=(
            _int8_constant_bytes(graph)
            if int8
            else sum(_param_bytes(op, p, trained_only=False) for op in graph.ops)
        ),
        saved_bytes=saved_total,
        layout=plan_layout(buffers),
        mcunetv3_extra_bytes=mcunetv3_extra_bytes(graph),
        code_bytes=_code_bytes(graph) if int8 else 0,
        workspace_bytes=_workspace_bytes(graph, buffers) if int8 else 0,
        aliases=aliases,
        patches=patches,
    )


def _check_plan(
    precision: str, update: str, optimizer: str, accumulate: int, patches: PatchPlan | None
) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; allowed: {sorted(PRECISIONS)}")
    if update not in UPDATES:
        raise ConfigError(f"unknown update {update!r}; allowed: {', '.join(UPDATES)}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {optimizer!r}; allowed: {sorted(OPTIMIZERS)}")
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise ConfigError(f"gradient accumulation must be an integer >= 1, got {accumulate!r}")
    if patches is not None and precision != "int8":
        raise ConfigError(f"patch-based execution is planned in int8 only, got {precision}")


def _tensor_buffers(
    graph: Graph,
    p: Precision,
    end_of: dict[int, int],
    patches: PatchPlan | None,
    buffers: list[Buffer],
) -> dict[int, int]:
    """Append every tensor's activation buffer (its patch's region, where the frozen prefix
    runs patch by patch) and, where it needs one, its gradient's to ``buffers``; return
    tensor id -> the index of its activation's buffer."""
    n = len(graph.ops)
    last = 2 * n - 1
    producer, consumers = graph.producer(), graph.consumers()
    local = set(patches.local_tensors(graph)) if patches is not None else set()
    at: dict[int, int] = {}
    for t, info in graph.tensors.items():
        if p.name == "int8" and t == graph.output:
            continue  # the float32 logits and, in place, their gradient: the workspace's
        start, end, nbytes = producer.get(t, 0), end_of[t], info.numel * p.activation
        if patches is not None:
            if t == graph.input:
                end = max(end, patches.stage_end - 1)
            elif t == patches.output:
                region = patches.region_bytes(graph, t, p.activation)
                buffers.append(Buffer(f"t{t}:patch", "activation", region, start, start))
                start = 0
            elif t in local:
                nbytes = patches.region_bytes(graph, t, p.activation)
        at[t] = len(buffers)
        buffers.append(Buffer(f"t{t}", "activation", nbytes, start, end))
        if info.requires_grad:  # its gradient, from its last reader's backward to its writer's
            g_start = last - max(consumers[t] or [n - 1])
            g_end = last - producer[t] if t in producer else g_start
            buffers.append(
                Buffer(f"grad t{t}", "gradient", info.numel * p.gradient, g_start, g_end)
            )
    return at


def _parameter_buffers(
    graph: Graph, p: Precision, update: str, optimizer: str, accumulate: int
) -> list[Buffer]:
    """The trained parameters (alive over the whole step), their gradients where they are
    buffers (``update``, ``accumulate``) and the optimizer's state."""
    last = 2 * len(graph.ops) - 1
    out: list[Buffer] = []
    trained_elems = 0
    for op in graph.ops:
        trained = op.params.trained
        if not trained:
            continue
        trained_elems += trained
        out.append(Buffer(f"{op.name}:weights", "weights", _param_bytes(op, p, True), 0, last))
        if accumulate > 1:
            g_start, g_end = 0, last
        elif update == "fused":
            continue
        else:
            g_start = last - op.index
            g_end = g_start if update == "reordered" else last
        grad_bytes = trained * p.param_gradient
        out.append(Buffer(f"{op.name}:grad", "param_gradient", grad_bytes, g_start, g_end))
    state = OPTIMIZERS[optimizer] * trained_elems * 4
    if state:
        out.append(Buffer("optimizer state", "optimizer", state, 0, last))
    return out


def _peak(buffers: list[Buffer], last: int) -> tuple[list[int], int, dict[str, int]]:
    """The bytes alive at each step, the first step of the most, and what they are by
    category there."""
    timeline = [0] * (last + 1)
    for b in buffers:
        for step in range(b.start, b.end + 1):
            timeline[step] += b.nbytes
    peak_step = max(range(len(timeline)), key=timeline.__getitem__)
    breakdown: dict[str, int] = {}
    for b in buffers:
        if b.start <= peak_step <= b.end:
            breakdown[b.category] = breakdown.get(b.category, 0) + b.nbytes
    return timeline, peak_step, breakdown


def _run_in_place(
    graph: Graph,
    buffers: list[Buffer],
    at: dict[int, int],
    aliases: dict[str, str],
    kept: set[int],
    end_of: dict[int, int],
    patches: PatchPlan | None,
) -> list[Buffer]:
    """``buffers`` with the depthwise convolutions that may run in place (:func:`_in_place`)
    doing so where the peak does not grow: the output's buffer is its input's, as large as the
    larger of the two and alive over both lives, beside a one-channel buffer at the op's step.
    (A stride-2 layer's output is smaller than its input: its shared buffer holds the input's
    size for the output's life, which is worth it only where that life is short.) Fills
    ``aliases``."""
    steps = 2 * len(graph.ops)
    timeline = np.zeros(steps + 1, np.int64)
    for b in buffers:
        timeline[b.start] += b.nbytes
        timeline[b.end + 1] -= b.nbytes
    timeline = np.cumsum(timeline)[:steps]
    peak = int(timeline.max())
    gone = set()
    roots: dict[int, int] = {}
    for op, channel in _in_place(graph, kept, end_of, patches):
        x, y = op.inputs[0], op.output
        root = roots.get(x, x)  # the tensor whose buffer x lives in
        into = at[root]
        bx, by = buffers[into], buffers[at[y]]
        merged = Buffer(
            bx.name, bx.category, max(bx.nbytes, by.nbytes), bx.start, max(bx.end, by.end)
        )
        trial = timeline.copy()
        for b, sign in ((bx, -1), (by, -1), (merged, 1)):
            trial[b.start : b.end + 1] += sign * b.nbytes
        trial[op.index] += channel
        if trial.max() > peak:
            continue
        timeline = trial
        buffers[into] = merged
        gone.add(at[y])
        roots[y] = root
        aliases[f"t{y}"] = f"t{root}"
        buffers.append(Buffer(f"{op.name}:channel", "activation", channel, op.index, op.index))
    return [b for i, b in enumerate(buffers) if i not in gone]


def _in_place(
    graph: Graph, kept: set[int], end_of: dict[int, int], patches: PatchPlan | None
) -> list[tuple[Op, int]]:
    """The depthwise convolutions that run in place (see the module), each with the bytes of
    its one-channel buffer."""
    out = []
    for op in graph.ops:
        if op.kind != "conv" or not _depthwise(op):
            continue
        x, y = op.inputs[0], op.output
        if x == graph.input or x in kept or end_of[x] != op.index or op.params.trained_weight:
            continue
        if op.act in TABLE_ACTIVATIONS and graph.tensors[y].requires_grad:
            continue  # the pre-activation is kept for backward: the output is written twice
        if patches is not None and y == patches.output:
            continue  # written through its patch buffer
        _, _, h, w = graph.tensors[y].shape
        if op.act in ("relu", "relu6") and graph.tensors[y].requires_grad and (h * w) % 8:
            continue  # each channel's mask bits must start on a byte
        if patches is not None and op.index < patches.stage_end:
            h, w = 1, max(r[y].h * r[y].w for r in patches.held)
        out.append((op, h * w))
    return out


def _depthwise(op: Op) -> bool:
    """Whether a convolution is depthwise: one group per channel (weight (C, 1, k, k))."""
    groups = op.attrs["groups"]
    return groups > 1 and op.params.weight_shape[:2] == (groups, 1)


CODE_BYTES_BASE = 26_700 + 1_790
"""Code of the exported int8 engine, measured with ``arm-none-eabi-size`` (gcc 12.2, -O2,
Cortex-M7, hard float): the kernels (26,700 B of text with the SMLAD weight update and 3x3
depthwise paths, 5,120 B more than the 21,580 B before them, measured on the linked image of
the ``mcunetv3`` bundle of ``ofa-proxyless-w0.35`` at 40 px; 21,580 B with the DSP paths of the
1x1 and channel-wise convolutions, the in-place depthwise and the window copy; 19,120 B before them
with the Cortex-M paths of the 1x1 convolution and its input gradient; 17,660 B with the tiled
paths alone, 13,128 B before them) and the fixed part of a rendered step;
each kernel call of the step adds :data:`CODE_BYTES_PER_CALL`. Fitted on the ``last``,
``bias-only``, ``mcunetv3`` and ``tinytl`` bundles of ``ofa-proxyless-w0.35`` at 32 px (47 to
338 calls; within 7 %; the per-call part with the earlier kernels). The example program
and the C library come on top."""
CODE_BYTES_PER_CALL = 72
CODE_BYTES_MBV3 = 24_504 - 21_580
"""Text of the kernels that only MobileNetV3 steps call (h-swish/h-sigmoid tables, the
squeeze-and-excitation product and their gradients; ``arm-none-eabi-size`` as above), which
``--gc-sections`` leaves out of other images."""


def _int8_constant_bytes(graph: Graph) -> int:
    """The bytes of every constant array of the int8 step that the exporter lowers from
    ``graph`` (``tinytune.lowering.lower_step``), the initial values of trained parameters
    included: per convolution its int8 weight, int32 bias, requantization multiplier and shift
    per output channel, its activation's output table (256 int8) and, where a gradient flows
    through it, derivative table (256 int16), the input gradient's multiplier per output
    channel where its input needs a gradient, and the QAS step's multiplier and shift per output
    channel of a trained weight and of a trained bias; the float32 classifier and GroupNorm
    γ, β; the interpolation tables of an upsampling. Tested equal to the lowered step's."""
    total = 0
    for op in graph.ops:
        prm = op.params
        if op.kind == "conv":
            out_ch = prm.weight_shape[0]
            total += prm.weight + 4 * out_ch + 8 * out_ch  # weight, bias, mult and shift
            if op.act in TABLE_ACTIVATIONS:
                total += 256 + 512 * graph.tensors[op.output].requires_grad
            x = op.inputs[0]
            if x != graph.input and graph.tensors[x].requires_grad:
                total += 4 * out_ch  # the input gradient's multipliers
            total += 8 * out_ch * ((prm.trained_weight > 0) + prm.bias_trained)
        elif op.kind == "linear":
            total += 4 * (prm.weight + prm.bias)
        elif op.kind == "groupnorm":
            total += 4 * (prm.scale + prm.bias)
        elif op.kind == "upsample":
            (_, _, h_in, w_in) = graph.tensors[op.inputs[0]].shape
            (_, _, h_out, w_out) = graph.tensors[op.output].shape
            # per axis: n_in, n_out, then i0, i1, w0, w1 per output and lo, hi per input
            total += 4 * (4 + 4 * (h_out + w_out) + 2 * (h_in + w_in))
    return total


def _code_bytes(graph: Graph) -> int:
    calls = sum(len(phase_features(op, graph)) for op in graph.ops)
    tables = [op for op in graph.ops if op.act in TABLE_ACTIVATIONS]
    # a table activation is a call of its own, and so is its gradient
    calls += sum(1 + graph.tensors[op.output].requires_grad for op in tables)
    mbv3 = bool(tables) or any(op.kind == "mul" for op in graph.ops)
    return CODE_BYTES_BASE + CODE_BYTES_MBV3 * mbv3 + CODE_BYTES_PER_CALL * calls


def _workspace_bytes(graph: Graph, buffers: list[Buffer]) -> int:
    # the float32 logits, and their gradient in place (no exponent): not arena buffers
    gradients = sum(1 for b in buffers if b.category == "gradient")
    return 4 * graph.n_classes + 4 * max(1, gradients)
