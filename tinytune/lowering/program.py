"""Lower one int8 training step to an ordered list of kernel calls over one static arena.

The step of a :class:`~tinytune.quant.QuantizedNet` is the one the simulator runs
(:func:`tinytune.quant.train_step`), written as calls of the C kernels of ``csrc/tt_int8.h``.
Every pointer is an offset into one of four spaces:

* ``arena``: the buffers of the memory planner (:func:`tinytune.hwmodels.plan_memory`, int8),
  at the offsets of its layout — activations ``t<id>``, activation gradients ``grad t<id>``,
  ReLU masks ``<op>:mask``, h-swish/h-sigmoid pre-activations ``<op>:pre-activation``, the
  kept input channels ``<op>:input[:k]`` and the trained parameters ``<op>:weights`` (a
  convolution's trained int32 bias, then its trained int8 weight channels; the classifier's
  float32 weight, then its bias). The trained parameters live there for good: the planner
  keeps them alive over the whole step.
* ``flash``: constants — frozen weights and biases, requantisation and update multipliers,
  activation tables.
* ``scratch``: the float32 logits (and, in place, their gradient), outside the planner's
  buffers (the planner counts them in its workspace; see :data:`SCRATCH_NOTE`), and the
  statistics of a GroupNorm that nothing back-propagates through (the planner keeps none).
* ``exp``: one int32 exponent per gradient tensor.

Each call's sizes are checked against the planner's buffer sizes, so a kernel cannot write
outside its buffer. A renderer emits these calls as C with its own templates; the tests run
them through a small interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinytune.hwmodels import MemoryReport, plan_memory
from tinytune.ir import PatchPlan, Region, patch_op
from tinytune.lowering.passes import Node, PassRecord, run_passes
from tinytune.quant import (
    QAdd,
    QCat,
    QConv,
    QGap,
    QGroupNorm,
    QLinear,
    QMaxPool,
    QMul,
    QPool,
    QuantizedNet,
    QUpsample,
    qas_multipliers,
)
from tinytune.quant.errors import QuantizationError
from tinytune.quant.kernels import ACT_GRAD_FRAC_BITS, InterpAxis

__all__ = [
    "KERNELS",
    "SCRATCH_NOTE",
    "Call",
    "ExpRef",
    "Label",
    "Ptr",
    "StepProgram",
    "Write",
    "lower_step",
]

SCRATCH_NOTE = (
    "the float32 logits (and, in place, their gradient) live in a scratch buffer outside the "
    "arena; the memory planner counts them in its workspace, not among the arena's buffers"
)

# kernel name (``tt_<name>`` in C) → its operands in the order of the C prototype. Structs
# travel as tuples: ``geom`` the 13 fields of tt_conv_geom (of a max pooling: the 11 of
# tt_pool_geom), ``norm`` those of tt_groupnorm
# (7 ints, then x_scale, y_scale, eps as floats); ``rows``/``cols`` point to an int32 table
# n_in, n_out, i0, i1, w0, w1, lo, hi (a tt_interp_axis); ``copy_s8`` is a plain ``memcpy``.
KERNELS: dict[str, tuple[str, ...]] = {
    "conv2d_s8": (
        "geom", "x", "w_train", "w_frozen", "k", "bias", "x_zero", "y_zero", "act_min",
        "act_max", "mult", "shift", "y", "mask",
    ),
    "conv2d_inplace_s8": (
        "geom", "xy", "w_train", "w_frozen", "k", "bias", "x_zero", "y_zero", "act_min",
        "act_max", "mult", "shift", "channel", "mask",
    ),
    "window_s8": (
        "src", "channels", "src_h", "src_w", "src_r", "src_c", "h", "w", "dst", "dst_h",
        "dst_w", "dst_r", "dst_c",
    ),
    "act_table_s8": ("pre", "table", "n", "y"),
    "add_s8": ("a", "b", "n", "a_zero", "b_zero", "a_mult", "b_mult", "shift", "y_zero", "y"),
    "add_act_s8": (
        "a", "b", "n", "a_zero", "b_zero", "a_mult", "b_mult", "shift", "y_zero", "act_min",
        "act_max", "y", "mask",
    ),
    "mul_s8": (
        "x", "s", "channels", "hw", "x_zero", "s_zero", "mult", "shift", "y_zero", "y",
    ),
    "gap_s8": ("x", "channels", "hw", "x_zero", "mult", "shift", "y_zero", "y"),
    "linear_f32": ("x", "in_f", "x_zero", "x_scale", "w", "b", "out_f", "logits"),
    "copy_s8": ("dst", "src", "n"),
    "softmax_xent_grad": ("logits", "n", "label", "grad"),
    "linear_f32_backward": (
        "x", "in_f", "x_zero", "x_scale", "w", "b", "out_f", "grad", "lr", "gx", "gx_exp",
    ),
    "grad_mask": ("g", "mask", "n"),
    "grad_act_table": ("g", "g_exp", "pre", "table", "frac_bits", "n"),
    "mul_grad_x": (
        "gy", "gy_exp", "s", "channels", "hw", "s_zero", "s_mult", "frac_bits", "gx", "gx_exp",
        "accumulate",
    ),
    "mul_grad_scale": (
        "gy", "gy_exp", "x", "channels", "hw", "x_zero", "x_mult", "frac_bits", "gx", "gx_exp",
        "accumulate",
    ),
    "conv2d_grad_input": (
        "geom", "gy", "gy_exp", "w_train", "w_frozen", "k", "w_mult", "frac_bits", "gx",
        "gx_exp", "accumulate",
    ),
    "gap_grad_input": (
        "gy", "gy_exp", "channels", "hw", "hw_mult", "frac_bits", "gx", "gx_exp", "accumulate",
    ),
    "grad_accumulate": ("g", "g_exp", "n", "dst", "dst_exp", "accumulate"),
    "update_bias": ("gy", "gy_exp", "channels", "hw", "bias", "mult", "shift"),
    "conv2d_update_weight": (
        "geom", "gy", "gy_exp", "x_saved", "x_zero", "w_train", "k", "mult", "shift",
    ),
    "avgpool_s8": (
        "x", "channels", "in_h", "in_w", "ratio", "ratio_w", "x_zero", "mult", "shift", "y_zero",
        "y",
    ),
    "avgpool_grad_input": (
        "gy", "gy_exp", "channels", "in_h", "in_w", "ratio", "ratio_w", "area_mult", "frac_bits",
        "gx", "gx_exp", "accumulate",
    ),
    "maxpool_s8": ("x", "geom", "y"),
    "maxpool_grad_input": ("gy", "gy_exp", "x", "geom", "gx", "gx_exp", "accumulate"),
    "upsample_s8": ("x", "channels", "rows", "cols", "x_zero", "mult", "shift", "y_zero", "y"),
    "upsample_grad_input": (
        "gy", "gy_exp", "channels", "rows", "cols", "frac_bits", "gx", "gx_exp", "accumulate",
    ),
    "groupnorm_f32": ("x", "norm", "gamma", "beta", "stats", "y", "mask"),
    "groupnorm_f32_backward": (
        "gy", "gy_exp", "x", "norm", "gamma", "beta", "stats", "lr", "gx", "gx_exp",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Ptr:
    """A byte offset into one of the spaces ``arena``, ``flash``, ``scratch``, ``exp``."""

    space: str
    offset: int


@dataclass(frozen=True)
class ExpRef:
    """The value of a gradient exponent at the time of the call (passed by value)."""

    slot: int


@dataclass(frozen=True)
class Label:
    """The class label of the step's image (known only at run time)."""


Operand = int | float | Ptr | ExpRef | Label | None | tuple[int | float, ...]


@dataclass(frozen=True)
class Call:
    """One kernel call: its operands by name (see :data:`KERNELS`), the op it belongs to and
    its phase (``forward``, ``loss`` or ``backward``)."""

    kernel: str
    operands: tuple[tuple[str, Operand], ...]
    op: str
    phase: str

    def __getitem__(self, name: str) -> Operand:
        return dict(self.operands)[name]


@dataclass(frozen=True)
class Write:
    """What a call leaves in a buffer, for checking a run against the simulator: an
    activation (``act``), a masked gradient (``masked``), a gradient through an activation
    table (``activated``, with its exponent slot), a gradient after one write (``grad``, with
    its exponent slot), or the logits."""

    call: int
    kind: str
    tensor: int
    ptr: Ptr
    nbytes: int
    exp_slot: int | None = None


@dataclass(frozen=True)
class StepProgram:
    """A lowered training step.

    Attributes:
        arena_bytes: the planner's arena size.
        flash: constant arrays by name, with their offsets in ``flash`` (4-byte aligned).
        arena_init: trained parameters' initial values: (offset, bytes) in the arena.
        scratch_bytes: size of the scratch space (the float32 logits; the statistics of a
            GroupNorm that nothing back-propagates through).
        n_exponents: gradient exponent slots.
        input: where the int8 image goes, and its byte count.
        params: every trained parameter tensor: name → (arena pointer, dtype, shape).
        calls: the step, in order.
        writes: the buffers each call leaves, in order (activations, gradients, logits).
        lr: the learning rate baked into the update multipliers.
        nodes: the training graph after :data:`~tinytune.lowering.passes.PASSES`, one or more
            calls per node; ``passes``: its node count before and after each pass.
    """

    arena_bytes: int
    flash: dict[str, tuple[int, np.ndarray]]
    arena_init: tuple[tuple[int, bytes], ...]
    scratch_bytes: int
    n_exponents: int
    input: tuple[Ptr, int]
    params: dict[str, tuple[Ptr, np.dtype, tuple[int, ...]]]
    calls: tuple[Call, ...]
    writes: tuple[Write, ...]
    lr: float
    n_classes: int
    report: MemoryReport = field(repr=False)
    nodes: tuple[Node, ...] = field(default=(), repr=False)
    passes: PassRecord | None = None
    buffers_used: frozenset[str] = frozenset()

    @property
    def flash_bytes(self) -> int:
        return max((off + arr.nbytes for off, arr in self.flash.values()), default=0)


class _Lowering:
    """Collects constants, calls and buffer writes while walking the step."""

    def __init__(self, net: QuantizedNet, report: MemoryReport, lr: float) -> None:
        self.net, self.report, self.lr = net, report, lr
        self.buffers = {
            b.name: (off, b.nbytes)
            for b, off in zip(report.buffers, report.layout.offsets, strict=True)
        }
        self.flash: dict[str, tuple[int, np.ndarray]] = {}
        self.flash_end = 0
        self.init: list[tuple[int, bytes]] = []
        self.params: dict[str, tuple[Ptr, np.dtype, tuple[int, ...]]] = {}
        self.calls: list[Call] = []
        self.writes: list[Write] = []
        self.exp_slots: dict[int, int] = {}
        self.written: set[int] = set()
        self.conv_ptrs: dict[int, dict[str, Ptr | None]] = {}
        self.norm_ptrs: dict[int, dict[str, Ptr | None]] = {}
        self.classifier: tuple[Ptr, Ptr] | None = None
        self.used: set[str] = set()  # the planner's buffers the step reads or writes
        self.scratch_end = 4 * net.graph.n_classes  # the float32 logits come first

    def scratch(self, nbytes: int) -> Ptr:
        ptr = Ptr("scratch", self.scratch_end)
        self.scratch_end += (nbytes + 3) // 4 * 4
        return ptr

    # --- memory ---------------------------------------------------------------------------

    def const(self, name: str, array: np.ndarray) -> Ptr | None:
        if array.size == 0:
            return None
        array = np.ascontiguousarray(array)
        offset = (self.flash_end + 3) // 4 * 4
        self.flash[name] = (offset, array)
        self.flash_end = offset + array.nbytes
        return Ptr("flash", offset)

    def const_once(self, name: str, array: np.ndarray) -> Ptr | None:
        """:meth:`const`, or the pointer of the array stored under ``name`` already."""
        if name in self.flash:
            return Ptr("flash", self.flash[name][0])
        return self.const(name, array)

    def arena(self, name: str, nbytes: int, at: int = 0) -> Ptr:
        if name not in self.buffers:
            raise QuantizationError(f"the memory plan has no buffer {name!r}")
        offset, size = self.buffers[name]
        self.used.add(name)
        if at + nbytes > size:
            raise QuantizationError(
                f"buffer {name!r} holds {size} bytes, the step needs {at + nbytes}"
            )
        return Ptr("arena", offset + at)

    def numel(self, t: int) -> int:
        return self.net.graph.tensors[t].numel

    def act(self, t: int, nbytes: int | None = None) -> Ptr:
        """Tensor ``t``'s activation: its buffer (an in-place depthwise output shares its
        input's), holding ``nbytes`` (default: the whole tensor)."""
        return self.arena(self.report.buffer_of(t), self.numel(t) if nbytes is None else nbytes)

    def grad(self, t: int) -> Ptr:
        return self.arena(f"grad t{t}", self.numel(t))

    def exp_slot(self, t: int) -> int:
        return self.exp_slots.setdefault(t, len(self.exp_slots))

    def exp_ptr(self, t: int) -> Ptr:
        return Ptr("exp", 4 * self.exp_slot(t))

    def param(self, name: str, ptr: Ptr, values: np.ndarray) -> Ptr:
        self.init.append((ptr.offset, np.ascontiguousarray(values).tobytes()))
        self.params[name] = (ptr, values.dtype, values.shape)
        return ptr

    # --- calls ----------------------------------------------------------------------------

    def call(self, kernel: str, op: str, phase: str, **operands: Operand) -> int:
        names = KERNELS[kernel]
        if set(operands) != set(names):
            raise AssertionError(f"{kernel}: operands {sorted(operands)} != {sorted(names)}")
        self.calls.append(Call(kernel, tuple((n, operands[n]) for n in names), op, phase))
        return len(self.calls) - 1

    def wrote(self, call: int, kind: str, t: int, ptr: Ptr, nbytes: int) -> None:
        slot = self.exp_slot(t) if kind in ("grad", "activated") else None
        self.writes.append(Write(call, kind, t, ptr, nbytes, slot))

    def grad_dest(self, t: int) -> dict[str, Operand]:
        """The destination operands of a gradient write; the first write is fresh."""
        accumulate = int(t in self.written)
        self.written.add(t)
        return {"gx_exp": self.exp_ptr(t), "accumulate": accumulate}


# --- per layer -----------------------------------------------------------------------------


def _geom(net: QuantizedNet, layer: QConv) -> tuple[int, ...]:
    """The fields of ``tt_conv_geom`` on the whole tensors."""
    x = net.graph.tensors[layer.op.inputs[0]].shape
    y = net.graph.tensors[layer.op.output].shape
    top, _, left, _ = net.graph.pads(layer.op)
    return _conv_fields(layer, x[1:], y[1:], top, left)


def _conv_fields(
    layer: QConv, x: tuple[int, ...], y: tuple[int, ...], top: int, left: int
) -> tuple[int, ...]:
    """The fields of ``tt_conv_geom`` for an input and output of (C, H, W) ``x`` and ``y``,
    padded ``top`` and ``left`` before; the padding after follows from the sizes."""
    (kh, kw), (sh, sw) = layer.op.kernel_hw, layer.op.stride_hw
    return (*x, *y, kh, sh, top, left, layer.groups, kw, sw)


def _conv_params(lw: _Lowering, layer: QConv) -> dict[str, Ptr | None]:
    """Pointers to the bias and both weight parts; trained ones in the arena."""
    op = layer.op
    train, frozen = (p.numpy().astype(np.int8) for p in layer.split_weight())
    bias = layer.bias.numpy().astype(np.int32)
    trained_bytes = (bias.nbytes if layer.bias_trained else 0) + train.nbytes
    ptrs: dict[str, Ptr | None] = {"w_frozen": lw.const(f"{op.name}.weight_frozen", frozen)}
    if trained_bytes:
        lw.arena(f"{op.name}:weights", trained_bytes)
    if layer.bias_trained:
        ptrs["bias"] = lw.param(f"{op.name}.bias", lw.arena(f"{op.name}:weights", 4), bias)
    else:
        ptrs["bias"] = lw.const(f"{op.name}.bias", bias)
    if train.size:
        at = bias.nbytes if layer.bias_trained else 0
        ptr = lw.arena(f"{op.name}:weights", train.nbytes, at)
        ptrs["w_train"] = lw.param(f"{op.name}.weight_train", ptr, train)
    else:
        ptrs["w_train"] = None
    return ptrs


def _conv_call(
    lw: _Lowering,
    layer: QConv,
    geom: tuple[int, ...],
    x: Ptr,
    y: Ptr,
    mask: Ptr | None,
    pre: bool,
    name: str | None = None,
) -> int:
    """The call of a convolution's forward kernel, named ``name`` (default: its op's); in place
    where the planner put its output over its input (then ``x`` is ``y``). The constants are
    the layer's, stored once."""
    op, net = layer.op, lw.net
    name = name or op.name
    if op.index not in lw.conv_ptrs:
        lw.conv_ptrs[op.index] = {
            **_conv_params(lw, layer),
            "mult": lw.const(f"{op.name}.mult", layer.mult.numpy().astype(np.int32)),
            "shift": lw.const(f"{op.name}.shift", layer.shift.numpy().astype(np.int32)),
        }
    ptrs = lw.conv_ptrs[op.index]
    operands: dict[str, Operand] = dict(
        geom=geom, w_train=ptrs["w_train"], w_frozen=ptrs["w_frozen"],
        k=layer.trained_channels, bias=ptrs["bias"], x_zero=net.acts[op.inputs[0]].zero,
        y_zero=layer.pre.zero if layer.pre is not None else net.acts[op.output].zero,
        act_min=layer.act_min, act_max=layer.act_max, mult=ptrs["mult"], shift=ptrs["shift"],
        mask=mask,
    )  # fmt: skip
    if lw.report.buffer_of(op.output) != f"t{op.output}" and not pre:
        channel = lw.arena(f"{op.name}:channel", geom[4] * geom[5])
        return lw.call("conv2d_inplace_s8", name, "forward", xy=x, channel=channel, **operands)
    return lw.call("conv2d_s8", name, "forward", x=x, y=y, **operands)


def _conv_forward(lw: _Lowering, layer: QConv) -> None:
    op, net = layer.op, lw.net
    (x,) = op.inputs
    numel = lw.numel(op.output)
    needs = net.graph.tensors[op.output].requires_grad
    mask = None  # kept only where a gradient will flow through the clamp, as the planner does
    if layer.keeps_mask and needs:
        mask = lw.arena(f"{op.name}:mask", (numel + 7) // 8)
    y = lw.act(op.output)
    pre = layer.pre is not None and needs  # the pre-activation, kept where backward reads it
    if pre:
        y = lw.arena(f"{op.name}:pre-activation", numel)
    i = _conv_call(lw, layer, _geom(net, layer), lw.act(x), y, mask, pre)
    if layer.act_table is not None:
        i = _act_table_call(lw, layer, y, numel, lw.act(op.output))
    lw.wrote(i, "act", op.output, lw.act(op.output), numel)
    saved = layer.saved_channels
    if saved and saved < net.graph.tensors[x].shape[1]:
        n = lw.numel(x) // net.graph.tensors[x].shape[1] * saved
        lw.call(
            "copy_s8", op.name, "forward",
            dst=lw.arena(f"{op.name}:input[:k]", n), src=lw.act(x), n=n,
        )  # fmt: skip


def _act_table_call(
    lw: _Lowering, layer: QConv, pre: Ptr, n: int, y: Ptr, name: str | None = None
) -> int:
    """The call of a convolution's table activation over ``n`` pre-activations."""
    assert layer.act_table is not None
    table = lw.const_once(f"{layer.op.name}.act_table", layer.act_table.numpy().astype(np.int8))
    name = name or layer.op.name
    return lw.call("act_table_s8", name, "forward", pre=pre, table=table, n=n, y=y)


def _add_call(
    lw: _Lowering,
    layer: QAdd,
    a: Ptr,
    b: Ptr,
    n: int,
    y: Ptr,
    name: str | None = None,
    mask: Ptr | None = None,
) -> int:
    """The call of an addition of ``n`` elements (with its ReLU or ReLU6, and then the mask of
    what it left unchanged where ``mask`` is given)."""
    op, acts = layer.op, lw.net.acts
    ta, tb = op.inputs
    operands: dict[str, Operand] = dict(
        a=a, b=b, n=n, a_zero=acts[ta].zero, b_zero=acts[tb].zero, a_mult=layer.a_mult,
        b_mult=layer.b_mult, shift=layer.shift, y_zero=acts[op.output].zero, y=y,
    )  # fmt: skip
    if op.act == "none":
        return lw.call("add_s8", name or op.name, "forward", **operands)
    bounds = dict(act_min=layer.act_min, act_max=layer.act_max)
    return lw.call("add_act_s8", name or op.name, "forward", **operands, **bounds, mask=mask)


def _add_forward(lw: _Lowering, layer: QAdd) -> None:
    op = layer.op
    a, b = op.inputs
    numel = lw.numel(op.output)
    mask = None  # kept only where a gradient will flow through the clamp, as the planner does
    if layer.keeps_mask and lw.net.graph.tensors[op.output].requires_grad:
        mask = lw.arena(f"{op.name}:mask", (numel + 7) // 8)
    i = _add_call(lw, layer, lw.act(a), lw.act(b), numel, lw.act(op.output), mask=mask)
    lw.wrote(i, "act", op.output, lw.act(op.output), numel)


def _gap_forward(lw: _Lowering, layer: QGap) -> None:
    op, acts = layer.op, lw.net.acts
    (x,) = op.inputs
    shape = lw.net.graph.tensors[x].shape
    i = lw.call(
        "gap_s8", op.name, "forward",
        x=lw.act(x), channels=shape[1], hw=shape[2] * shape[3], x_zero=acts[x].zero,
        mult=layer.mult, shift=layer.shift, y_zero=acts[op.output].zero, y=lw.act(op.output),
    )  # fmt: skip
    lw.wrote(i, "act", op.output, lw.act(op.output), lw.numel(op.output))


def _linear_forward(lw: _Lowering, layer: QLinear) -> None:
    op = layer.op
    (x,) = op.inputs
    j, c = layer.weight.shape
    base = lw.arena(f"{op.name}:weights", 4 * (j * c + j))
    w = lw.param(f"{op.name}.weight", base, layer.weight.astype(np.float32))
    b = lw.param(
        f"{op.name}.bias", Ptr("arena", base.offset + 4 * j * c), layer.bias.astype(np.float32)
    )
    lw.classifier = (w, b)
    q = lw.net.acts[x]
    i = lw.call(
        "linear_f32", op.name, "forward",
        x=lw.act(x), in_f=c, x_zero=q.zero, x_scale=float(np.float32(q.scale)), w=w, b=b,
        out_f=j, logits=Ptr("scratch", 0),
    )  # fmt: skip
    lw.writes.append(Write(i, "logits", op.output, Ptr("scratch", 0), 4 * j))


def _conv_grad_activation(lw: _Lowering, layer: QConv) -> None:
    op = layer.op
    numel = lw.numel(op.output)
    gy = lw.grad(op.output)
    if layer.grad_table is None:
        i = lw.call(
            "grad_mask", op.name, "backward",
            g=gy, mask=lw.arena(f"{op.name}:mask", (numel + 7) // 8), n=numel,
        )  # fmt: skip
        lw.wrote(i, "masked", op.output, gy, numel)
        return
    table = layer.grad_table.numpy().astype(np.int16)
    i = lw.call(
        "grad_act_table", op.name, "backward",
        g=gy, g_exp=lw.exp_ptr(op.output), pre=lw.arena(f"{op.name}:pre-activation", numel),
        table=lw.const(f"{op.name}.grad_table", table), frac_bits=ACT_GRAD_FRAC_BITS, n=numel,
    )  # fmt: skip
    lw.wrote(i, "activated", op.output, gy, numel)


def _conv_grad_input(lw: _Lowering, layer: QConv) -> None:
    op, net = layer.op, lw.net
    (x,) = op.inputs
    ptrs = lw.conv_ptrs[op.index]
    gy, gy_exp = lw.grad(op.output), ExpRef(lw.exp_slot(op.output))
    i = lw.call(
        "conv2d_grad_input", op.name, "backward",
        geom=_geom(net, layer), gy=gy, gy_exp=gy_exp, w_train=ptrs["w_train"],
        w_frozen=ptrs["w_frozen"], k=layer.trained_channels,
        w_mult=lw.const(f"{op.name}.grad_mult", layer.grad_mult.numpy().astype(np.int32)),
        frac_bits=layer.grad_frac_bits, gx=lw.grad(x), **lw.grad_dest(x),
    )  # fmt: skip
    lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _conv_weight_step(lw: _Lowering, layer: QConv) -> None:
    op, net = layer.op, lw.net
    (x,) = op.inputs
    ptrs = lw.conv_ptrs[op.index]
    gy, gy_exp = lw.grad(op.output), ExpRef(lw.exp_slot(op.output))
    upd = qas_multipliers(layer, net.acts[x].scale, lw.lr)
    channels = net.graph.tensors[x].shape[1]
    if layer.saved_channels < channels:
        n = lw.numel(x) // channels * layer.saved_channels
        x_saved = lw.arena(f"{op.name}:input[:k]", n)
    else:
        x_saved = lw.act(x)
    lw.call(
        "conv2d_update_weight", op.name, "backward",
        geom=_geom(net, layer), gy=gy, gy_exp=gy_exp, x_saved=x_saved,
        x_zero=net.acts[x].zero, w_train=ptrs["w_train"], k=layer.trained_channels,
        mult=lw.const(f"{op.name}.weight_step_mult", upd.weight_mult.numpy().astype(np.int32)),
        shift=lw.const(
            f"{op.name}.weight_step_shift", upd.weight_shift.numpy().astype(np.int32)
        ),
    )  # fmt: skip


def _conv_bias_step(lw: _Lowering, layer: QConv) -> None:
    op, net = layer.op, lw.net
    (x,) = op.inputs
    ptrs = lw.conv_ptrs[op.index]
    gy, gy_exp = lw.grad(op.output), ExpRef(lw.exp_slot(op.output))
    upd = qas_multipliers(layer, net.acts[x].scale, lw.lr)
    shape = net.graph.tensors[op.output].shape
    lw.call(
        "update_bias", op.name, "backward",
        gy=gy, gy_exp=gy_exp, channels=shape[1], hw=shape[2] * shape[3], bias=ptrs["bias"],
        mult=lw.const(f"{op.name}.bias_step_mult", upd.bias_mult.numpy().astype(np.int32)),
        shift=lw.const(f"{op.name}.bias_step_shift", upd.bias_shift.numpy().astype(np.int32)),
    )  # fmt: skip


_CONV_NODES = {
    "grad_activation": _conv_grad_activation,
    "grad_input": _conv_grad_input,
    "weight_step": _conv_weight_step,
    "bias_step": _conv_bias_step,
}


def _add_backward(lw: _Lowering, layer: QAdd) -> None:
    op = layer.op
    if layer.keeps_mask:  # through the ReLU first
        numel = lw.numel(op.output)
        i = lw.call(
            "grad_mask", op.name, "backward",
            g=lw.grad(op.output), mask=lw.arena(f"{op.name}:mask", (numel + 7) // 8), n=numel,
        )  # fmt: skip
        lw.wrote(i, "masked", op.output, lw.grad(op.output), numel)
    for t in op.inputs:
        if not lw.net.graph.tensors[t].requires_grad:
            continue
        dest = lw.grad_dest(t)
        i = lw.call(
            "grad_accumulate", op.name, "backward",
            g=lw.grad(op.output), g_exp=ExpRef(lw.exp_slot(op.output)), n=lw.numel(t),
            dst=lw.grad(t), dst_exp=dest["gx_exp"], accumulate=dest["accumulate"],
        )  # fmt: skip
        lw.wrote(i, "grad", t, lw.grad(t), lw.numel(t))


def _mul_forward(lw: _Lowering, layer: QMul) -> None:
    op, acts = layer.op, lw.net.acts
    x, s = op.inputs
    _, c, h, w = lw.net.graph.tensors[x].shape
    i = lw.call(
        "mul_s8", op.name, "forward",
        x=lw.act(x), s=lw.act(s), channels=c, hw=h * w, x_zero=acts[x].zero,
        s_zero=acts[s].zero, mult=layer.mult, shift=layer.shift, y_zero=acts[op.output].zero,
        y=lw.act(op.output),
    )  # fmt: skip
    lw.wrote(i, "act", op.output, lw.act(op.output), lw.numel(op.output))


def _mul_backward(lw: _Lowering, layer: QMul) -> None:
    op, acts, tensors = layer.op, lw.net.acts, lw.net.graph.tensors
    x, s = op.inputs
    _, c, h, w = tensors[x].shape
    gy, gy_exp = lw.grad(op.output), ExpRef(lw.exp_slot(op.output))
    if tensors[x].requires_grad:
        i = lw.call(
            "mul_grad_x", op.name, "backward",
            gy=gy, gy_exp=gy_exp, s=lw.act(s), channels=c, hw=h * w, s_zero=acts[s].zero,
            s_mult=layer.s_mult, frac_bits=layer.s_frac_bits, gx=lw.grad(x), **lw.grad_dest(x),
        )  # fmt: skip
        lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))
    if tensors[s].requires_grad:
        i = lw.call(
            "mul_grad_scale", op.name, "backward",
            gy=gy, gy_exp=gy_exp, x=lw.act(x), channels=c, hw=h * w, x_zero=acts[x].zero,
            x_mult=layer.x_mult, frac_bits=layer.x_frac_bits, gx=lw.grad(s), **lw.grad_dest(s),
        )  # fmt: skip
        lw.wrote(i, "grad", s, lw.grad(s), lw.numel(s))


def _gap_backward(lw: _Lowering, layer: QGap) -> None:
    op = layer.op
    (x,) = op.inputs
    if not lw.net.graph.tensors[x].requires_grad:
        return
    shape = lw.net.graph.tensors[x].shape
    i = lw.call(
        "gap_grad_input", op.name, "backward",
        gy=lw.grad(op.output), gy_exp=ExpRef(lw.exp_slot(op.output)), channels=shape[1],
        hw=shape[2] * shape[3], hw_mult=layer.hw_mult, frac_bits=layer.hw_frac_bits,
        gx=lw.grad(x), **lw.grad_dest(x),
    )  # fmt: skip
    lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _linear_backward(lw: _Lowering, layer: QLinear) -> None:
    op = layer.op
    (x,) = op.inputs
    j, c = layer.weight.shape
    assert lw.classifier is not None
    w, b = lw.classifier
    logits = Ptr("scratch", 0)
    lw.call("softmax_xent_grad", op.name, "loss", logits=logits, n=j, label=Label(), grad=logits)
    needs = lw.net.graph.tensors[x].requires_grad
    gx = lw.grad(x) if needs else None
    if needs:
        lw.written.add(x)
    q = lw.net.acts[x]
    i = lw.call(
        "linear_f32_backward", op.name, "backward",
        x=lw.act(x), in_f=c, x_zero=q.zero, x_scale=float(np.float32(q.scale)), w=w, b=b,
        out_f=j, grad=logits, lr=float(np.float32(lw.lr)), gx=gx,
        gx_exp=lw.exp_ptr(x) if needs else None,
    )  # fmt: skip
    if needs:
        lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _pool_forward(lw: _Lowering, layer: QPool) -> None:
    op, acts = layer.op, lw.net.acts
    (x,) = op.inputs
    _, c, h, w = lw.net.graph.tensors[x].shape
    i = lw.call(
        "avgpool_s8", op.name, "forward",
        x=lw.act(x), channels=c, in_h=h, in_w=w, ratio=layer.ratio, ratio_w=layer.ratio_w,
        x_zero=acts[x].zero,
        mult=layer.mult, shift=layer.shift, y_zero=acts[op.output].zero, y=lw.act(op.output),
    )  # fmt: skip
    lw.wrote(i, "act", op.output, lw.act(op.output), lw.numel(op.output))


def _pool_backward(lw: _Lowering, layer: QPool) -> None:
    op = layer.op
    (x,) = op.inputs
    if not lw.net.graph.tensors[x].requires_grad:
        return
    _, c, h, w = lw.net.graph.tensors[x].shape
    i = lw.call(
        "avgpool_grad_input", op.name, "backward",
        gy=lw.grad(op.output), gy_exp=ExpRef(lw.exp_slot(op.output)), channels=c, in_h=h,
        in_w=w, ratio=layer.ratio, ratio_w=layer.ratio_w, area_mult=layer.area_mult,
        frac_bits=layer.area_frac_bits,
        gx=lw.grad(x), **lw.grad_dest(x),
    )  # fmt: skip
    lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _cat_parts(lw: _Lowering, layer: QCat) -> list[tuple[int, int, int]]:
    """(input, its first byte in the output, its bytes) of each input: the channels of batch 1
    are contiguous."""
    parts, at = [], 0
    for t in layer.op.inputs:
        parts.append((t, at, lw.numel(t)))
        at += lw.numel(t)
    return parts


def _cat_forward(lw: _Lowering, layer: QCat) -> None:
    op = layer.op
    out = lw.report.buffer_of(op.output)
    i = -1
    for t, at, n in _cat_parts(lw, layer):
        dst = lw.arena(out, n, at)
        i = lw.call("copy_s8", op.name, "forward", dst=dst, src=lw.act(t), n=n)
    lw.wrote(i, "act", op.output, lw.act(op.output), lw.numel(op.output))


def _cat_backward(lw: _Lowering, layer: QCat) -> None:
    op = layer.op
    for t, at, n in _cat_parts(lw, layer):
        if not lw.net.graph.tensors[t].requires_grad:
            continue
        dest = lw.grad_dest(t)
        i = lw.call(
            "grad_accumulate", op.name, "backward",
            g=lw.arena(f"grad t{op.output}", n, at), g_exp=ExpRef(lw.exp_slot(op.output)), n=n,
            dst=lw.grad(t), dst_exp=dest["gx_exp"], accumulate=dest["accumulate"],
        )  # fmt: skip
        lw.wrote(i, "grad", t, lw.grad(t), n)


def _pool_geom(lw: _Lowering, layer: QMaxPool) -> tuple[int, ...]:
    """The fields of ``tt_pool_geom`` on the whole tensors."""
    op = layer.op
    (_, c, h, w), (_, _, oh, ow) = (lw.net.graph.tensors[t].shape for t in (*op.inputs, op.output))
    return _pool_fields(layer, (c, h, w), (oh, ow), op.attrs["pad_top"], op.attrs["pad_left"])


def _pool_fields(
    layer: QMaxPool, x: tuple[int, int, int], y: tuple[int, int], top: int, left: int
) -> tuple[int, ...]:
    """The fields of ``tt_pool_geom`` for an input of (C, H, W) ``x`` and an output of
    (H, W) ``y``, padded ``top`` and ``left`` before."""
    a = layer.op.attrs
    return (*x, *y, a["kernel_h"], a["kernel_w"], a["stride_h"], a["stride_w"], top, left)


def _maxpool_forward(lw: _Lowering, layer: QMaxPool) -> None:
    op = layer.op
    (x,) = op.inputs
    y = lw.act(op.output)
    i = lw.call("maxpool_s8", op.name, "forward", x=lw.act(x), geom=_pool_geom(lw, layer), y=y)
    lw.wrote(i, "act", op.output, y, lw.numel(op.output))


def _maxpool_backward(lw: _Lowering, layer: QMaxPool) -> None:
    op = layer.op
    (x,) = op.inputs
    if not lw.net.graph.tensors[x].requires_grad:
        return
    i = lw.call(
        "maxpool_grad_input", op.name, "backward",
        gy=lw.grad(op.output), gy_exp=ExpRef(lw.exp_slot(op.output)), x=lw.act(x),
        geom=_pool_geom(lw, layer), gx=lw.grad(x), **lw.grad_dest(x),
    )  # fmt: skip
    lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _axis_table(axis: InterpAxis) -> np.ndarray:
    parts = [[axis.n_in, axis.n_out], axis.i0, axis.i1, axis.w0, axis.w1, axis.lo, axis.hi]
    return np.concatenate(parts).astype(np.int32)


def _upsample_tables(lw: _Lowering, layer: QUpsample) -> tuple[Ptr | None, Ptr | None]:
    name = layer.op.name
    rows = lw.const(f"{name}.rows", _axis_table(layer.rows))
    cols = lw.const(f"{name}.cols", _axis_table(layer.cols))
    return rows, cols


def _upsample_forward(lw: _Lowering, layer: QUpsample) -> None:
    op, acts = layer.op, lw.net.acts
    (x,) = op.inputs
    rows, cols = _upsample_tables(lw, layer)
    i = lw.call(
        "upsample_s8", op.name, "forward",
        x=lw.act(x), channels=lw.net.graph.tensors[x].shape[1], rows=rows, cols=cols,
        x_zero=acts[x].zero, mult=layer.mult, shift=layer.shift, y_zero=acts[op.output].zero,
        y=lw.act(op.output),
    )  # fmt: skip
    lw.wrote(i, "act", op.output, lw.act(op.output), lw.numel(op.output))


def _upsample_backward(lw: _Lowering, layer: QUpsample) -> None:
    op = layer.op
    (x,) = op.inputs
    if not lw.net.graph.tensors[x].requires_grad:
        return
    rows, cols = (
        Ptr("flash", lw.flash[f"{op.name}.rows"][0]),
        Ptr("flash", lw.flash[f"{op.name}.cols"][0]),
    )
    i = lw.call(
        "upsample_grad_input", op.name, "backward",
        gy=lw.grad(op.output), gy_exp=ExpRef(lw.exp_slot(op.output)),
        channels=lw.net.graph.tensors[x].shape[1], rows=rows, cols=cols,
        frac_bits=layer.frac_bits, gx=lw.grad(x), **lw.grad_dest(x),
    )  # fmt: skip
    lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


def _norm_operand(lw: _Lowering, layer: QGroupNorm) -> tuple[int | float, ...]:
    op, acts = layer.op, lw.net.acts
    (x,) = op.inputs
    _, c, h, w = lw.net.graph.tensors[x].shape
    scales = (float(np.float32(v)) for v in (acts[x].scale, acts[op.output].scale, layer.eps))
    return (
        c, h * w, layer.groups, acts[x].zero, acts[op.output].zero, layer.act_min,
        layer.act_max, *scales,
    )  # fmt: skip


def _groupnorm_forward(lw: _Lowering, layer: QGroupNorm) -> None:
    op, prm = layer.op, layer.op.params
    (x,) = op.inputs
    gamma, beta = layer.weight.astype(np.float32), layer.bias
    trained = (gamma.nbytes if prm.scale_trained else 0) + (
        beta.nbytes if beta is not None and prm.bias_trained else 0
    )
    at = 0
    ptrs: dict[str, Ptr | None] = {}
    for key, values, is_trained in (
        ("gamma", gamma, prm.scale_trained),
        ("beta", beta, prm.bias_trained),
    ):
        if values is None:
            ptrs[key] = None
        elif is_trained:
            ptr = lw.arena(f"{op.name}:weights", trained, 0)
            ptrs[key] = lw.param(
                f"{op.name}.{'weight' if key == 'gamma' else 'bias'}",
                Ptr("arena", ptr.offset + at),
                values.astype(np.float32),
            )
            at += values.nbytes
        else:
            ptrs[key] = lw.const(f"{op.name}.{key}", values.astype(np.float32))
    needs = lw.net.graph.tensors[op.output].requires_grad
    stats_bytes = 8 * layer.groups
    stats = lw.arena(f"{op.name}:mean+rstd", stats_bytes) if needs else lw.scratch(stats_bytes)
    ptrs["stats"] = stats
    lw.norm_ptrs[op.index] = ptrs
    numel = lw.numel(op.output)
    mask = None
    if layer.keeps_mask and needs:
        mask = lw.arena(f"{op.name}:mask", (numel + 7) // 8)
    i = lw.call(
        "groupnorm_f32", op.name, "forward",
        x=lw.act(x), norm=_norm_operand(lw, layer), gamma=ptrs["gamma"], beta=ptrs["beta"],
        stats=stats, y=lw.act(op.output), mask=mask,
    )  # fmt: skip
    lw.wrote(i, "act", op.output, lw.act(op.output), numel)


def _groupnorm_backward(lw: _Lowering, layer: QGroupNorm) -> None:
    op = layer.op
    (x,) = op.inputs
    ptrs = lw.norm_ptrs[op.index]
    numel = lw.numel(op.output)
    gy = lw.grad(op.output)
    if layer.keeps_mask:
        i = lw.call(
            "grad_mask", op.name, "backward",
            g=gy, mask=lw.arena(f"{op.name}:mask", (numel + 7) // 8), n=numel,
        )  # fmt: skip
        lw.wrote(i, "masked", op.output, gy, numel)
    needs = lw.net.graph.tensors[x].requires_grad
    if needs and x in lw.written:
        raise QuantizationError(f"{op.name}: a GroupNorm input with several readers")
    if needs:
        lw.written.add(x)
    i = lw.call(
        "groupnorm_f32_backward", op.name, "backward",
        gy=gy, gy_exp=ExpRef(lw.exp_slot(op.output)), x=lw.act(x),
        norm=_norm_operand(lw, layer), gamma=ptrs["gamma"], beta=ptrs["beta"],
        stats=ptrs["stats"], lr=float(np.float32(lw.lr)), gx=lw.grad(x) if needs else None,
        gx_exp=lw.exp_ptr(x) if needs else None,
    )  # fmt: skip
    if needs:
        lw.wrote(i, "grad", x, lw.grad(x), lw.numel(x))


@dataclass(frozen=True)
class _Patch:
    """Patch ``index`` of a patched stage, as its calls are lowered."""

    lw: _Lowering
    plan: PatchPlan
    index: int

    @property
    def held(self) -> dict[int, Region]:
        return self.plan.held[self.index]

    def region(self, t: int) -> tuple[Ptr, int, int, int]:
        """Where the patch holds tensor ``t``: its pointer, channels, rows, columns."""
        graph = self.lw.net.graph
        c = graph.tensors[t].shape[1]
        if t == graph.input:
            _, _, h, w = graph.tensors[t].shape
            return self.lw.act(t), c, h, w
        r = self.held[t]
        if t == self.plan.output:
            return self.lw.arena(f"t{t}:patch", c * r.h * r.w), c, r.h, r.w
        return self.lw.act(t, c * r.h * r.w), c, r.h, r.w

    def offset(self, t: int, win: Region) -> tuple[int, int]:
        """Window ``win``'s first row and column in the region tensor ``t`` is held as."""
        r = self.held.get(t)
        return (win.r0 - r.r0, win.c0 - r.c0) if r is not None else (win.r0, win.c0)


def _patched_stage(lw: _Lowering, plan: PatchPlan) -> None:
    """The frozen prefix ``ops[:plan.stage_end]`` patch by patch
    (:mod:`tinytune.ir.patches`): per patch, each op on its held regions, an addition's
    larger inputs cropped in place first, and the output's patch copied into the whole
    output. Each call names its op on its patch (:func:`~tinytune.ir.patch_op`), as the
    unrolled graph a bundle's profile carries does."""
    graph = lw.net.graph
    layers = {layer.op.index: layer for layer in lw.net.layers}
    out = plan.output
    _, channels, out_h, out_w = graph.tensors[out].shape
    place = -1
    for p, window in enumerate(plan.patches):
        patch = _Patch(lw, plan, p)
        for op in graph.ops[: plan.stage_end]:
            layer = layers[op.index]
            _PATCHED[type(layer)](patch, layer, patch_op(op.name, p))
        src, _, h, w = patch.region(out)
        r0, c0 = patch.offset(out, window)
        place = lw.call(
            "window_s8", patch_op(graph.ops[plan.stage_end - 1].name, p), "forward",
            src=src, channels=channels, src_h=h, src_w=w, src_r=r0, src_c=c0, h=window.h,
            w=window.w, dst=lw.act(out), dst_h=out_h, dst_w=out_w, dst_r=window.r0,
            dst_c=window.c0,
        )  # fmt: skip
    lw.wrote(place, "act", out, lw.act(out), lw.numel(out))


def _patched_conv(patch: _Patch, layer: QConv, name: str) -> None:
    op = layer.op
    x, c_in, h_in, w_in = patch.region(op.inputs[0])
    y, c_out, h_out, w_out = patch.region(op.output)
    top, _, left, _ = patch.plan.pads(patch.lw.net.graph, op, patch.index)
    geom = _conv_fields(layer, (c_in, h_in, w_in), (c_out, h_out, w_out), top, left)
    _conv_call(patch.lw, layer, geom, x, y, None, False, name)
    if layer.act_table is not None:
        _act_table_call(patch.lw, layer, y, c_out * h_out * w_out, y, name)


def _patched_maxpool(patch: _Patch, layer: QMaxPool, name: str) -> None:
    op = layer.op
    x, c_in, h_in, w_in = patch.region(op.inputs[0])
    y, _, h_out, w_out = patch.region(op.output)
    top, _, left, _ = patch.plan.pads(patch.lw.net.graph, op, patch.index)
    geom = _pool_fields(layer, (c_in, h_in, w_in), (h_out, w_out), top, left)
    patch.lw.call("maxpool_s8", name, "forward", x=x, geom=geom, y=y)


def _patched_cat(patch: _Patch, layer: QCat, name: str) -> None:
    """Each input's window into its channels of the output's region."""
    op = layer.op
    y, _, h_out, w_out = patch.region(op.output)
    at = 0
    for t in op.inputs:
        src, c, h, w = patch.region(t)
        r0, c0 = patch.offset(t, patch.held[op.output])
        patch.lw.call(
            "window_s8", name, "forward",
            src=src, channels=c, src_h=h, src_w=w, src_r=r0, src_c=c0, h=h_out, w=w_out,
            dst=Ptr(y.space, y.offset + at), dst_h=h_out, dst_w=w_out, dst_r=0, dst_c=0,
        )  # fmt: skip
        at += c * h_out * w_out


def _patched_add(patch: _Patch, layer: QAdd, name: str) -> None:
    """The sum of the inputs' windows, an input held larger cropped in place to it first."""
    op = layer.op
    y, c_out, h_out, w_out = patch.region(op.output)
    crops = {(index, t): w for index, t, w in patch.plan.crops[patch.index]}
    ab = []
    for t in op.inputs:
        src, c, h, w = patch.region(t)
        if (op.index, t) in crops:  # the window this add computes, to the front
            win = crops[(op.index, t)]
            r0, c0 = patch.offset(t, win)
            patch.lw.call(
                "window_s8", name, "forward",
                src=src, channels=c, src_h=h, src_w=w, src_r=r0, src_c=c0, h=win.h, w=win.w,
                dst=src, dst_h=win.h, dst_w=win.w, dst_r=0, dst_c=0,
            )  # fmt: skip
        ab.append(src)
    _add_call(patch.lw, layer, ab[0], ab[1], c_out * h_out * w_out, y, name)


_PATCHED = {
    QConv: _patched_conv,
    QMaxPool: _patched_maxpool,
    QCat: _patched_cat,
    QAdd: _patched_add,
}


_FORWARD = {
    QConv: _conv_forward,
    QAdd: _add_forward,
    QMul: _mul_forward,
    QGap: _gap_forward,
    QPool: _pool_forward,
    QMaxPool: _maxpool_forward,
    QCat: _cat_forward,
    QUpsample: _upsample_forward,
    QGroupNorm: _groupnorm_forward,
    QLinear: _linear_forward,
}
_BACKWARD = {
    QAdd: _add_backward,
    QMul: _mul_backward,
    QGap: _gap_backward,
    QPool: _pool_backward,
    QMaxPool: _maxpool_backward,
    QCat: _cat_backward,
    QUpsample: _upsample_backward,
    QGroupNorm: _groupnorm_backward,
    QLinear: _linear_backward,
}


def lower_step(net: QuantizedNet, lr: float, report: MemoryReport | None = None) -> StepProgram:
    """The training step of ``net`` at learning rate ``lr`` as kernel calls over the arena of
    ``report`` (default: :func:`plan_memory` of ``net.graph`` in int8, as the search plans
    it). ``net`` is not modified; its current parameters become the arena's initial values."""
    report = report if report is not None else plan_memory(net.graph, precision="int8")
    if report.precision != "int8":
        raise QuantizationError(f"an int8 step needs an int8 memory plan, got {report.precision}")
    if net.graph.batch_size != 1:
        raise QuantizationError(f"the device step takes batch 1, got {net.graph.batch_size}")
    lw = _Lowering(net, report, lr)
    nodes, record = run_passes(net)
    plan = report.patches
    for node in nodes:
        layer = net.layers[node.layer]
        if plan is not None and node.kind == "forward" and layer.op.index < plan.stage_end:
            if layer.op.index == 0:
                _patched_stage(lw, plan)
            continue
        if node.kind == "forward":
            _FORWARD[type(layer)](lw, layer)
        elif node.kind == "backward":
            _BACKWARD[type(layer)](lw, layer)
        elif node.kind in _CONV_NODES:
            _CONV_NODES[node.kind](lw, layer)
        else:
            raise QuantizationError(f"no kernel for training-graph node {node.kind!r}")
    graph = net.graph
    return StepProgram(
        arena_bytes=report.arena_bytes,
        flash=lw.flash,
        arena_init=tuple(lw.init),
        scratch_bytes=lw.scratch_end,
        n_exponents=len(lw.exp_slots),
        input=(lw.act(graph.input), lw.numel(graph.input)),
        params=lw.params,
        calls=tuple(lw.calls),
        writes=tuple(lw.writes),
        lr=lr,
        n_classes=graph.n_classes,
        report=report,
        nodes=nodes,
        passes=record,
        buffers_used=frozenset(lw.used),
    )
