"""Patch-based execution of a frozen prefix (MCUNetV2's scheduling, exact).

The first stage of a CNN holds most of its activation memory, and a frozen prefix keeps
nothing for the backward pass. So the prefix may run **patch by patch**: its output is split
into n × n spatial patches (n along time for a sensor's window, whose maps have height 1),
and for each patch the stage computes only the region of every
tensor that the patch depends on (its receptive field), with zero padding only at the image's
border. Only one patch's regions are alive at a time, beside the network's input and the
stage's output, which is whole. Neighbouring patches recompute the overlap of their regions:
the memory is bought with multiply-accumulates (MCUNetV2, arXiv 2110.15352, §3.1).

A :class:`PatchPlan` says, for each patch, which region of each tensor of the stage is
computed and held (:class:`Region`) and how each op of the stage runs on it:

* a convolution reads its input's held region and computes its output's region; its padding
  is that of the whole convolution at the image's border and none inside (negative where the
  held input starts before the first row the output reads). A 1×1 convolution computes every
  pixel of its input's region, so that its output region is its input's and the fast kernels
  apply; a k×k one only what its readers need;
* a max pooling, as a k×k convolution: its window's rows and columns, its padding (rows and
  columns no window chooses) at the image's border only;
* an addition computes what its readers need; an input held larger is **cropped in place** to
  that window first (the copy runs forward, to lower addresses only, so it is safe in place),
  which requires the addition to be that input's last reader;
* a concatenation (along the channels) computes what its readers need, each input's window
  copied into its channels of the output's region;
* the stage's output is computed region by region into a patch buffer, and its patch is copied
  into the whole output tensor.

Every value is the one the whole-image computation gives, bit for bit in int8 (integer sums do
not depend on their order) and to float rounding in fp32: the regions are computed, never
approximated. The frozen prefix's accuracy is unchanged; patches are a matter of device memory
and time only.

The stage is ``graph.ops[:stage_end]``. It must consist of convolutions, max poolings,
additions and concatenations only (a global pooling, as in squeeze-and-excitation, needs the
whole tensor), train nothing and
need no gradient, read the network input only inside the stage, and hand exactly one tensor to
the rest of the network. :func:`block_end` finds the end of the first ``blocks`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tinytune.errors import ConfigError
from tinytune.ir.graph import Graph, Op, TensorInfo

__all__ = [
    "PATCHABLE_KINDS",
    "PatchPlan",
    "Region",
    "block_end",
    "patch_blocks",
    "patch_op",
    "patched_op",
    "plan_patches",
    "split_axis",
    "unrolled",
]

PATCHABLE_KINDS = ("conv", "maxpool", "add", "cat")
_WINDOWED = ("conv", "maxpool")
"""The ops whose output pixel reads a window of their input's (the others read the same
pixel of each input)."""


@dataclass(frozen=True)
class Region:
    """Rows ``r0 .. r1 - 1`` and columns ``c0 .. c1 - 1`` of a tensor's (H, W) plane."""

    r0: int
    r1: int
    c0: int
    c1: int

    @property
    def h(self) -> int:
        return self.r1 - self.r0

    @property
    def w(self) -> int:
        return self.c1 - self.c0

    def union(self, other: Region) -> Region:
        return Region(
            min(self.r0, other.r0),
            max(self.r1, other.r1),
            min(self.c0, other.c0),
            max(self.c1, other.c1),
        )

    def contains(self, other: Region) -> bool:
        return (
            self.r0 <= other.r0
            and other.r1 <= self.r1
            and self.c0 <= other.c0
            and other.c1 <= self.c1
        )


def split_axis(n: int, parts: int) -> list[tuple[int, int]]:
    """``n`` positions in ``parts`` runs as even as can be, the longer ones first."""
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + base + (i < extra)
        bounds.append((start, end))
        start = end
    return bounds


def _window_rows(op: Op, graph: Graph, lo: int, hi: int, axis: int) -> tuple[int, int]:
    """The input rows (axis 2) or columns (axis 3) that outputs ``lo .. hi - 1`` read."""
    k, s, before = _axis(op, graph, axis)
    n_in = graph.tensors[op.inputs[0]].shape[axis]
    return max(0, lo * s - before), min(n_in, (hi - 1) * s - before + k)


def _axis(op: Op, graph: Graph, axis: int) -> tuple[int, int, int]:
    """Convolution or max pooling ``op``'s window, stride and padding before along rows
    (axis 2) or columns (axis 3)."""
    if op.kind == "maxpool":
        a, side = op.attrs, ("h", "w")[axis - 2]
        return a[f"kernel_{side}"], a[f"stride_{side}"], a[("pad_top", "pad_left")[axis - 2]]
    top, _, left, _ = graph.pads(op)
    along = axis - 2
    return op.kernel_hw[along], op.stride_hw[along], (top, left)[along]


@dataclass(frozen=True)
class PatchPlan:
    """How the stage ``graph.ops[:stage_end]`` runs in ``n`` × ``n`` patches (``n`` along
    time where the stage's output has height 1: a sensor's window).

    Attributes:
        n: patches per side (1: the whole image at once, which needs no plan).
        stage_end: the index of the first op after the stage.
        output: the tensor the stage hands on, computed patch by patch into its whole buffer.
        patches: the output's window of each patch, row by row.
        held: per patch, the region of each tensor of the stage that is computed and held
            (the network input is held whole and is not listed).
        crops: per patch, ``(add op index, input tensor, window)`` for each input of an
            addition held larger than the window the addition computes.
    """

    n: int
    stage_end: int
    output: int
    patches: tuple[Region, ...]
    held: tuple[dict[int, Region], ...]
    crops: tuple[tuple[tuple[int, int, Region], ...], ...]

    def local_tensors(self, graph: Graph) -> tuple[int, ...]:
        """The tensors that live only inside a patch: every tensor the stage writes, the
        output's patch buffer included."""
        return tuple(graph.ops[i].output for i in range(self.stage_end))

    def region_bytes(self, graph: Graph, t: int, element: int = 1) -> int:
        """The bytes of tensor ``t``'s largest held region over the patches."""
        channels = graph.tensors[t].shape[1]
        return max(channels * r[t].h * r[t].w for r in self.held) * element

    def pads(self, graph: Graph, op: Op, patch: int) -> tuple[int, int, int, int]:
        """Convolution or max pooling ``op``'s padding (top, bottom, left, right) on patch
        ``patch``'s held input region: the whole op's at the image's border, negative where
        the region holds input rows or columns the output region does not read."""
        held = self.held[patch]
        x, y = op.inputs[0], op.output
        xr = held.get(x, _whole(graph, x))
        yr = held[y]
        (kh, sh, before_h), (kw, sw, before_w) = _axis(op, graph, 2), _axis(op, graph, 3)
        top = before_h + xr.r0 - yr.r0 * sh
        left = before_w + xr.c0 - yr.c0 * sw
        bottom = (yr.h - 1) * sh + kh - top - xr.h
        right = (yr.w - 1) * sw + kw - left - xr.w
        return top, bottom, left, right

    def macs(self, graph: Graph) -> tuple[int, int]:
        """The stage's multiply-accumulates patch by patch, and whole: their ratio is the
        recomputation's cost."""
        patched = whole = 0
        for i in range(self.stage_end):
            op = graph.ops[i]
            whole += op.macs
            out = graph.tensors[op.output].shape
            for held in self.held:
                r = held[op.output]
                patched += op.macs * r.h * r.w // (out[2] * out[3])
        return patched, whole


def _whole(graph: Graph, t: int) -> Region:
    _, _, h, w = graph.tensors[t].shape
    return Region(0, h, 0, w)


def _check_stage(graph: Graph, stage_end: int) -> int:
    """The stage's output tensor, or a one-line error saying why the stage cannot be patched."""
    n_ops = len(graph.ops)
    if isinstance(stage_end, bool) or not isinstance(stage_end, int) or not 0 < stage_end < n_ops:
        raise ConfigError(f"a patched stage ends after op 1 .. {n_ops - 1}, got {stage_end!r}")
    stage = graph.ops[:stage_end]
    for op in stage:
        if op.kind not in PATCHABLE_KINDS:
            raise ConfigError(
                f"a patched stage holds convolutions, max poolings, additions and "
                f"concatenations only; {_label(op.name)} is a "
                f"{op.kind} (patch a shallower stage)"
            )
        if op.params.any_trained or graph.tensors[op.output].requires_grad:
            raise ConfigError(
                f"a patched stage must end at or before the first layer that trains anything; "
                f"{_label(op.name)} trains or back-propagates (patch a shallower stage)"
            )
    written = {op.output for op in stage}
    crossing = sorted(
        {t for op in graph.ops[stage_end:] for t in op.inputs if t in written or t == graph.input}
    )
    if len(crossing) != 1 or crossing[0] == graph.input:
        names = ", ".join(f"t{t}" for t in crossing)
        raise ConfigError(
            f"a patched stage must hand one tensor to the rest of the network; the stage "
            f"ending before {_label(graph.ops[stage_end].name)} hands on {names} (end it at a "
            f"block's end)"
        )
    return crossing[0]


def _block(name: str) -> int | None:
    """The block an op of this name belongs to: ``stages_.<i>.`` is stage i of a network,
    whose stage 0 is its stem (-1) and stage i its block i - 1."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "stages_" and parts[1].isdigit():
        return int(parts[1]) - 1
    return None


def _label(name: str) -> str:
    """An op as a message names it: ``stages_.5.ops.blocks_4_pw1`` is ``blocks_4_pw1 (block 4,
    stage 5)``: its node, and where it is."""
    parts = name.split(".")
    if len(parts) > 3 and parts[0] == "stages_" and parts[1].isdigit() and parts[2] == "ops":
        stage = int(parts[1])
        where = f"block {stage - 1}, stage {stage}" if stage else "the stem's stage 0"
        return f"{'.'.join(parts[3:])} ({where})"
    return name


def patch_blocks(graph: Graph) -> int:
    """How many blocks after the stem a patched stage of ``graph`` may cover: its stages after
    the stem's but the head's (the last ones whose convolutions are all ``head`` 1×1s), as
    :func:`tinytune.spaces.block_count` numbers them."""
    roles: dict[int, list[str]] = {}
    for op in graph.ops:
        if (b := _block(op.name)) is not None and b >= 0:
            roles.setdefault(b, []).extend([op.role] if op.kind == "conv" else [])
    n = len(roles)
    while n and all(role == "head" for role in roles[n - 1]):
        n -= 1
    return n


def block_end(graph: Graph, blocks: int) -> int:
    """The index of the first op after the stem and the first ``blocks`` blocks (ops named as
    :func:`_block` reads them).

    Raises:
        ConfigError: ``blocks`` outside the network's, or a network of no block after its stem.
    """
    number = {op.index: b for op in graph.ops if (b := _block(op.name)) is not None}
    n_blocks = patch_blocks(graph)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 0 <= blocks <= n_blocks:
        raise ConfigError(
            f"a patched stage covers 0 .. {n_blocks} blocks of this network, got {blocks!r}"
        )
    if blocks == 0:
        after_stem = [i for i, b in number.items() if b >= 0]
        if not after_stem:  # cut after its stem: nothing follows it to end a patched stage at
            raise ConfigError(
                "this network holds no block after its stem (a cut there): it has no patched "
                "stage; run it on whole inputs (patches none)"
            )
        return min(after_stem)
    return 1 + max(i for i, b in number.items() if b < blocks)


def plan_patches(graph: Graph, n: int, stage_end: int) -> PatchPlan:
    """The plan of ``graph.ops[:stage_end]`` in ``n`` × ``n`` patches (see the module).

    Raises:
        ConfigError: a stage that cannot run patch by patch, or more patches per side than
            the stage's output has rows or columns.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"patches per side must be an integer >= 1, got {n!r}")
    output = _check_stage(graph, stage_end)
    _, _, out_h, out_w = graph.tensors[output].shape
    rows = 1 if out_h == 1 else n  # a window of a sensor (height 1): n patches along time
    most = min(out_h, out_w) if rows > 1 else out_w
    if n > most:
        raise ConfigError(
            f"{n} patches per side need a stage output of at least {rows} x {n} pixels; the "
            f"stage ending before {_label(graph.ops[stage_end].name)} outputs {out_h} x {out_w} "
            f"(allowed: 1 .. {most})"
        )
    stage = graph.ops[:stage_end]
    windows = [
        Region(r0, r1, c0, c1)
        for r0, r1 in split_axis(out_h, rows)
        for c0, c1 in split_axis(out_w, n)
    ]
    held_all, crops_all = [], []
    for window in windows:
        needed: dict[int, Region] = {output: window}
        for op in reversed(stage):  # what each tensor's readers need
            want = needed[op.output]
            if op.kind in _WINDOWED:
                r0, r1 = _window_rows(op, graph, want.r0, want.r1, 2)
                c0, c1 = _window_rows(op, graph, want.c0, want.c1, 3)
                reads = [(op.inputs[0], Region(r0, r1, c0, c1))]
            else:
                reads = [(t, want) for t in op.inputs]
            for t, r in reads:
                needed[t] = needed[t].union(r) if t in needed else r
        held: dict[int, Region] = {}
        crops = []
        for op in stage:  # what each op computes
            x = op.inputs[0]
            if op.kind == "conv" and op.kernel_hw == (1, 1) and op.stride_hw == (1, 1):
                held[op.output] = held.get(x, _whole(graph, x))
            else:
                held[op.output] = needed[op.output]
            if op.kind == "add":
                for t in op.inputs:
                    if held[t] != held[op.output]:
                        crops.append((op.index, t, held[op.output]))
        held_all.append(held)
        crops_all.append(tuple(crops))
    _check_crops(graph, crops_all)
    return PatchPlan(n, stage_end, output, tuple(windows), tuple(held_all), tuple(crops_all))


def _check_crops(graph: Graph, crops: list[tuple[tuple[int, int, Region], ...]]) -> None:
    readers = graph.consumers()
    for patch in crops:
        for index, t, _ in patch:
            if max(readers[t]) != index or t == graph.input:
                raise ConfigError(
                    f"{_label(graph.ops[index].name)} adds a tensor that is read after it; a "
                    f"patched stage crops it in place (patch a shallower stage)"
                )


def patch_op(name: str, patch: int) -> str:
    """The name of op ``name`` run on patch ``patch`` (in :func:`unrolled` and a bundle's
    calls, so that a bundle's per-call timings fit the patched ops they belong to)."""
    return f"{name}@{patch}"


def patched_op(name: str) -> str:
    """The op that call or op ``name`` runs: ``name`` less the patch :func:`patch_op` gave it."""
    base, at, patch = name.rpartition("@")
    return base if at and patch.isdigit() else name


def unrolled(graph: Graph, plan: PatchPlan) -> Graph:
    """``graph`` with its patched stage written out patch by patch: each op of the stage once
    per patch (named by :func:`patch_op`), on tensors of its held regions' shapes, with the
    multiply-accumulates of its region; then the rest of the network. What a latency model
    prices, the recomputed overlap included (the window copies, bytes moved once per patch,
    are not ops of it). Not a network to plan memory for: the stage's output has a writer per
    patch."""
    tensors = dict(graph.tensors)
    next_id = max(tensors) + 1
    ops: list[Op] = []
    for p, held in enumerate(plan.held):
        ids: dict[int, int] = {}
        for op in graph.ops[: plan.stage_end]:
            inputs = tuple(ids.get(t, t) for t in op.inputs)
            out = graph.tensors[op.output]
            r = held[op.output]
            if op.output == plan.output:
                out_id = op.output
            else:
                out_id = ids[op.output] = next_id
                next_id += 1
                n, c = out.shape[:2]
                tensors[out_id] = TensorInfo(out_id, (n, c, r.h, r.w), False)
            macs = op.macs * r.h * r.w // (out.shape[2] * out.shape[3])
            ops.append(
                replace(
                    op,
                    index=len(ops),
                    name=patch_op(op.name, p),
                    inputs=inputs,
                    output=out_id,
                    macs=macs,
                )
            )
    for op in graph.ops[plan.stage_end :]:
        ops.append(replace(op, index=len(ops)))
    return Graph(tuple(ops), tensors, graph.input, graph.output, graph.n_classes)
