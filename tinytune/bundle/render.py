"""Render a lowered training step as a standalone C99 model: ``tt_model.h`` and ``tt_model.c``.

The model holds what :class:`~tinytune.lowering.program.StepProgram` describes and nothing
more:

* ONE static int8 arena of exactly the memory planner's size (``TT_ARENA_BYTES``), which holds
  every activation, mask, gradient and trained parameter at the planner's offsets; with
  ``-DTT_GUARD`` it is framed by guard bytes that :c:func:`tt_guard_intact` checks;
* two small buffers outside it, stated in the header: the scratch space (the float32 logits,
  see :data:`~tinytune.lowering.program.SCRATCH_NOTE`) and the table of gradient exponents;
* every constant (frozen weights, multipliers, interpolation tables, the trained parameters'
  initial values) as a ``static const`` array, which a microcontroller keeps in flash;
* the step as straight-line kernel calls written by the templates of
  :mod:`tinytune.bundle.templates`, one per kernel kind.

No heap, no global state besides those buffers. The C that this module writes is assembled
from templates; pointers become ``TT_ARENA(offset)``, ``TT_SCRATCH(offset)``,
``TT_EXPONENT(slot)`` or the name of a constant array.
"""

from __future__ import annotations

import hashlib
import math
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from string import Template
from typing import Any

import numpy as np

from tinytune.bundle.errors import BundleError
from tinytune.bundle.frames import input_table, resize_order
from tinytune.bundle.templates import (
    FRAME_DECLS,
    FRAME_IMPL,
    IMAGE_INPUT_DOC,
    KERNEL_TEMPLATES,
    MODEL_HEADER,
    MODEL_SOURCE,
    PROFILE_HEADER,
    TENSOR_INPUT_DOC,
)
from tinytune.lowering.program import KERNELS, Call, ExpRef, Label, Ptr, StepProgram
from tinytune.quant import QuantizedNet
from tinytune.quant.schedule import MAX_LR_HALVINGS

__all__ = [
    "C_TYPES",
    "PARAMS_HEADER_BYTES",
    "PARAMS_VERSION",
    "RATE_CONSTANTS",
    "ModelInfo",
    "c_array",
    "c_float",
    "c_string",
    "c_values",
    "model_id",
    "render_model",
    "render_profile",
]

C_TYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.uint16): "uint16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.float32): "float",
}
DTYPE_CODES = {np.dtype(np.int8): "b", np.dtype(np.int32): "i", np.dtype(np.float32): "f"}
GUARD_BYTES = 64
PER_LINE = {1: 20, 2: 14, 4: 8}  # values per line of a constant array, by element size


@dataclass(frozen=True)
class ModelInfo:
    """What the rendered model states about itself (the numbers of its header).

    Attributes:
        arena_bytes: the static arena, equal to the planner's int8 arena.
        scratch_bytes: the float32 scratch buffer.
        exponent_bytes: the int32 exponent table (at least one slot, C has no empty array).
        flash_bytes: the bytes of every constant array, initial values included.
        input_bytes: the int8 image.
        n_classes: logits.
        n_calls: kernel calls of one training step.
        input_scale, input_zero: the input's quantization (``TT_INPUT_SCALE``, float32).
        params_bytes: the blob of ``tt_params_save`` (header and trained parameters).
        model_id: ``TT_MODEL_ID``, which a blob must carry to load (:func:`model_id`).
        resize_order: the order of the passes of ``tt_quantize_rgb888`` (the Pillow rule of
            :func:`~tinytune.bundle.frames.resize_order`).
    """

    arena_bytes: int
    scratch_bytes: int
    exponent_bytes: int
    flash_bytes: int
    input_bytes: int
    n_classes: int
    n_calls: int
    input_scale: float
    input_zero: int
    params_bytes: int
    model_id: str
    resize_order: int


def c_float(value: float) -> str:
    """A float32 value as an exact C hexadecimal literal (``0x1.8p+1f``)."""
    v = float(np.float32(value))
    if not math.isfinite(v):
        raise BundleError(f"the constant {value!r} is not finite; a bundle holds finite floats")
    mantissa, exponent = v.hex().split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}f"


def c_values(values: np.ndarray, *, indent: str = "    ") -> str:
    """The values of an array as the lines of a C initializer (without braces), exactly as
    stored: integers in decimal, float32 in hexadecimal."""
    array = np.ascontiguousarray(values).reshape(-1)
    if array.dtype not in C_TYPES:
        raise BundleError(f"dtype {array.dtype} has no C type in a bundle")
    if array.dtype == np.float32:
        items = [c_float(v) for v in array.tolist()]
    else:
        items = [str(v) for v in array.tolist()]
    step = PER_LINE[array.dtype.itemsize]
    return "\n".join(
        indent + ", ".join(items[i : i + step]) + "," for i in range(0, len(items), step)
    )


def c_array(name: str, values: np.ndarray) -> str:
    """``static const T name[N] = {...};`` with the values exactly as stored."""
    array = np.asarray(values)
    ctype = C_TYPES.get(array.dtype)
    if ctype is None:
        raise BundleError(f"constant {name}: dtype {array.dtype} has no C type in a bundle")
    return f"static const {ctype} {name}[{array.size}] = {{\n{c_values(array)}\n}};\n"


def c_string(text: str) -> str:
    """``text`` as a C99 string literal of its UTF-8 bytes (bytes that a file name decoded with
    ``surrogateescape`` stood for are written back): printable ASCII as it is, but ``\\``,
    ``"`` and ``?`` (a trigraph's start) escaped, every other byte as a three-digit octal
    escape."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        char = chr(byte)
        if char in '\\"?':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


PARAMS_HEADER_BYTES = 24
"""``TT_PARAMS_HEADER_BYTES``: the blob's header (``tt_model.h`` lays it out)."""
PARAMS_VERSION = 1
"""``TT_PARAMS_VERSION``: the blob's format."""
RATE_CONSTANTS = ("_step_mult", "_step_shift")
"""The endings of the constants that the learning rate sets (the update multipliers of
:func:`tinytune.lowering.program.lower_step`), left out of :func:`model_id`."""


def model_id(program: StepProgram) -> str:
    """``TT_MODEL_ID``, 16 hex digits: the first 8 bytes of the SHA-256 of the trained
    parameters' layout (name, dtype, shape and arena offset of each, in order) and of every
    frozen constant but the update multipliers (:data:`RATE_CONSTANTS`), which the rate sets."""
    digest = hashlib.sha256(b"tinytune trained parameters 1\n")
    for name, (ptr, dtype, shape) in program.params.items():
        digest.update(f"{name} {np.dtype(dtype).str} {tuple(shape)} {ptr.offset}\n".encode())
    for name, (_, array) in program.flash.items():
        if not name.endswith(RATE_CONSTANTS):
            digest.update(f"{name} {array.dtype.str} {array.shape}\n".encode())
            digest.update(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).data)
    return digest.hexdigest()[:16]


def _class_names(names: Sequence[str], n_classes: int) -> str:
    """``TT_CLASS_NAMES``: an initializer of the names as C strings, over continued lines."""
    if len(names) != n_classes:
        raise BundleError(f"{len(names)} class names for a classifier of {n_classes} classes")
    lines, line = [], ""
    for item in (c_string(str(name)) for name in names):
        if line and len(line) + len(item) > 80:
            lines.append(line)
            line = ""
        line += item + ", "
    lines.append(line)
    body = " \\\n".join("    " + text.rstrip() for text in lines)
    return "{ \\\n" + body.rstrip(",") + " \\\n}"


def _identifier(prefix: str, name: str, taken: set[str]) -> str:
    base = prefix + re.sub(r"[^0-9A-Za-z_]", "_", name)
    ident, n = base, 1
    while ident in taken:
        n += 1
        ident = f"{base}_{n}"
    taken.add(ident)
    return ident


class _Operands:
    """Renders the operands of calls: values as C expressions, pointers into their space."""

    def __init__(self, program: StepProgram, names: Mapping[int, str]) -> None:
        self.program = program
        self.flash_names = names  # flash offset → array name
        self.flash_tables = {
            off: (names[off], arr) for off, arr in program.flash.values() if off in names
        }

    def pointer(self, ptr: Ptr) -> str:
        if ptr.space == "arena":
            return f"TT_ARENA({ptr.offset})"
        if ptr.space == "scratch":
            return f"TT_SCRATCH({ptr.offset})"
        if ptr.space == "exp":
            assert ptr.offset % 4 == 0, ptr
            return f"TT_EXPONENT({ptr.offset // 4})"
        if ptr.space == "flash":
            name = self.flash_names.get(ptr.offset)
            if name is None:
                raise BundleError(f"a call points into the middle of a constant at {ptr.offset}")
            return name
        raise BundleError(f"unknown memory space {ptr.space!r}; allowed: arena, flash, ...")

    def axis(self, ptr: Ptr) -> str:
        """An interpolation axis from its int32 table: n_in, n_out, i0, i1, w0, w1, lo, hi."""
        name, table = self.flash_tables[ptr.offset]
        n_in, n_out = int(table[0]), int(table[1])
        starts = [2, 2 + n_out, 2 + 2 * n_out, 2 + 3 * n_out, 2 + 4 * n_out, 2 + 4 * n_out + n_in]
        return "{" + ", ".join([str(n_in), str(n_out), *(f"{name} + {s}" for s in starts)]) + "}"

    def render(self, name: str, value: object) -> str:
        if name in ("rows", "cols"):
            assert isinstance(value, Ptr)
            return self.axis(value)
        if value is None:
            return "NULL"
        if isinstance(value, Label):
            return "label"
        if isinstance(value, ExpRef):
            return f"tt_exp[{value.slot}]"
        if isinstance(value, Ptr):
            return self.pointer(value)
        if isinstance(value, tuple):
            return "{" + ", ".join(self.render("", v) for v in value) + "}"
        if isinstance(value, float):
            return c_float(value)
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            return str(int(value))
        raise BundleError(f"operand {name}: cannot write {value!r} in C")


def _render_call(index: int, call: Call, ops: _Operands) -> tuple[str, str]:
    """(file-scope declarations, statement) of one call."""
    template = KERNEL_TEMPLATES.get(call.kernel)
    if template is None:
        raise BundleError(
            f"kernel {call.kernel!r} has no C template; templates exist for "
            f"{sorted(KERNEL_TEMPLATES)}"
        )
    values = {name: ops.render(name, value) for name, value in call.operands}
    values["id"] = f"c{index}"
    try:
        decls = Template(template.decls).substitute(values)
        statement = Template(template.call).substitute(values)
    except KeyError as e:  # a template names an operand the kernel does not have
        raise BundleError(f"the template of {call.kernel!r} names unknown operand {e}") from e
    comment = f"/* {index}: {call.op} {call.phase} ({call.kernel}) */"
    return decls, f"{comment}\n{statement}\nTT_MARK({index});"


def _indent(lines: Iterable[str], by: str = "    ") -> str:
    return "\n".join(by + line if line else line for text in lines for line in text.split("\n"))


def _check_alignment(program: StepProgram) -> None:
    """Trained float32/int32 parameters must be 4-byte aligned in the arena (the arena itself
    is 8-byte aligned)."""
    for name, (ptr, dtype, _) in program.params.items():
        if np.dtype(dtype).itemsize == 4 and ptr.offset % 4:
            raise BundleError(f"parameter {name} lies at arena offset {ptr.offset}, not 4-aligned")


@dataclass
class _Sections:
    """The rendered parts of ``tt_model.c``, as lists of C snippets."""

    constants: list[str]
    initial: list[str]
    init_copies: list[str]
    views: list[str]
    decls: list[str]
    forward: list[str]
    backward: list[str]
    flash_bytes: int


def _constants(program: StepProgram, taken: set[str]) -> tuple[list[str], dict[int, str], int]:
    """Every flash constant as a ``static const`` array: the arrays, their names by flash
    offset, and their bytes."""
    arrays, names, nbytes = [], {}, 0
    for key, (offset, array) in program.flash.items():
        names[offset] = _identifier("k_", key, taken)
        arrays.append(c_array(names[offset], array))
        nbytes += array.nbytes
    return arrays, names, nbytes


def _parameters(program: StepProgram, taken: set[str], sections: _Sections) -> None:
    """The trained parameters: their initial values (flash), the copies into the arena, and
    the table that ``tt_param`` returns."""
    init_by_offset = dict(program.arena_init)
    for key, (ptr, dtype, shape) in program.params.items():
        dtype = np.dtype(dtype)
        data = init_by_offset.pop(ptr.offset, None)
        if data is None:
            raise BundleError(f"parameter {key} has no initial value in the program")
        values = np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype)
        if values.size != int(np.prod(shape)):
            raise BundleError(f"parameter {key}: {values.size} initial values for shape {shape}")
        name = _identifier("init_", key, taken)
        sections.initial.append(c_array(name, values))
        sections.flash_bytes += values.nbytes
        sections.init_copies.append(f"memcpy(TT_ARENA({ptr.offset}), {name}, sizeof {name});")
        sections.views.append(
            f"{{\"{key}\", TT_ARENA({ptr.offset}), {values.nbytes}, '{DTYPE_CODES[dtype]}'}},"
        )
    if init_by_offset:
        raise BundleError(
            f"initial arena values at offsets {sorted(init_by_offset)} name no parameter"
        )


def _calls(program: StepProgram, ops: _Operands, sections: _Sections) -> None:
    """The step: forward calls (``tt_forward``, shared with ``tt_predict``), then the loss and
    backward calls (``tt_backward``), with the structs they take."""
    for index, call in enumerate(program.calls):
        decls, statement = _render_call(index, call, ops)
        if decls:
            sections.decls.append(decls)
        if call.phase == "forward":
            if sections.backward:
                raise BundleError(f"call {index} ({call.op}) runs forward after the backward")
            sections.forward.append(statement)
        else:
            sections.backward.append(statement)


def _check_program(program: StepProgram) -> None:
    """What the renderer needs of a program: a template for each kernel, 4-aligned trained
    parameters, whole float32s of scratch."""
    if set(KERNEL_TEMPLATES) != set(KERNELS):
        missing = sorted(set(KERNELS) ^ set(KERNEL_TEMPLATES))
        raise BundleError(f"kernels and C templates differ: {missing}")
    _check_alignment(program)
    if program.scratch_bytes % 4:
        raise BundleError(f"scratch of {program.scratch_bytes} bytes is not whole float32s")


def _input_code(
    net: QuantizedNet, frontend: tuple[str, str, str] | None, order: int
) -> tuple[str, str]:
    """The declarations and definitions of what makes the input: the front-end of an audio
    model, the frame helpers of an RGB one, else nothing."""
    if frontend is not None:
        return frontend[0], frontend[1]
    if net.graph.tensors[net.graph.input].shape[1] != 3:  # the frame helpers make RGB
        return "", ""
    return FRAME_DECLS, Template(FRAME_IMPL).substitute(
        input_table=c_values(input_table(net)),
        resize_order=("TT_RESIZE_HORIZONTAL_FIRST", "TT_RESIZE_PILLOW13")[order],
    )


def _feeding_fields(
    program: StepProgram,
    net: QuantizedNet,
    class_names: Sequence[str],
    input_rule: str,
    order: int | None,
    frontend: tuple[str, str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The template fields of the input, the classes and the parameters' blob, and the
    :class:`ModelInfo` fields they state (:func:`render_model`'s arguments)."""
    import PIL

    version = PIL.__version__
    order = resize_order(version) if order is None else order
    image = frontend is None and net.graph.tensors[net.graph.input].shape[1] == 3
    params_bytes = PARAMS_HEADER_BYTES + sum(
        np.dtype(dtype).itemsize * int(np.prod(shape))
        for _, dtype, shape in program.params.values()
    )
    ident = model_id(program)
    q_in = net.acts[net.graph.input]
    rule = f"This model's samples were {input_rule}.".replace("*/", "* /")
    doc = Template(IMAGE_INPUT_DOC if image else TENSOR_INPUT_DOC).substitute(
        input_rule="\n * ".join(textwrap.wrap(rule, 94)), pillow=version
    )
    if frontend is not None:
        doc += f"\n * {frontend[2]}"
    decls, impl = _input_code(net, frontend, order)
    fields = {
        "input_doc": doc,
        "input_decls": decls,
        "input_impl": impl,
        "class_names": _class_names(class_names, program.n_classes),
        "params_bytes": params_bytes,
        "params_version": PARAMS_VERSION,
        "params_header_bytes": PARAMS_HEADER_BYTES,
        "model_id": ident,
        "model_id_bytes": ", ".join(f"0x{ident[i : i + 2]}" for i in range(0, 16, 2)),
    }
    info = {
        "input_scale": float(np.float32(q_in.scale)),
        "input_zero": int(q_in.zero),
        "params_bytes": params_bytes,
        "model_id": ident,
        "resize_order": order,
    }
    return fields, info


def _input_shape(net: QuantizedNet, input_bytes: int) -> tuple[int, ...]:
    """The network's input shape (N, C, H, W), which the step's input buffer must hold.

    Raises:
        BundleError: the buffer is of another size.
    """
    shape = tuple(net.graph.tensors[net.graph.input].shape)
    if shape[1] * shape[2] * shape[3] != input_bytes:
        raise BundleError(f"the input buffer holds {input_bytes} bytes, the image {shape}")
    return shape


def render_model(
    program: StepProgram,
    net: QuantizedNet,
    *,
    title: str,
    class_names: Sequence[str],
    input_rule: str,
    order: int | None = None,
    frontend: tuple[str, str, str] | None = None,
) -> tuple[dict[str, str], ModelInfo]:
    """The C model of ``program`` (lowered from ``net``): ``{"tt_model.h": ..., "tt_model.c":
    ...}`` and the numbers it states.

    Args:
        program, net: the lowered step and the network it was lowered from.
        title: one line naming the candidate.
        class_names: the classes, in the order of the logits.
        input_rule: how its samples became its input (after "This model's samples were",
            :func:`~tinytune.bundle.frames.input_rule`).
        order: the pass order of the frame helpers; None: the installed Pillow's.
        frontend: what makes the input of recorded samples (:mod:`tinytune.bundle.frontend`):
            its declarations, its definitions and a sentence for the input's doc; else None.
    """
    _check_program(program)
    taken: set[str] = set()
    constants, flash_names, flash_bytes = _constants(program, taken)
    sections = _Sections(constants, [], [], [], [], [], [], flash_bytes)
    _parameters(program, taken, sections)
    ops = _Operands(program, flash_names)
    _calls(program, ops, sections)
    logits = [w.ptr for w in program.writes if w.kind == "logits"]
    if len(logits) != 1:
        raise BundleError(f"the step writes its logits {len(logits)} times; expected once")
    input_ptr, input_bytes = program.input
    _, channels, height, width = _input_shape(net, input_bytes)
    exp_slots = max(1, program.n_exponents)
    extra, feeding = _feeding_fields(program, net, class_names, input_rule, order, frontend)
    info = ModelInfo(
        arena_bytes=program.arena_bytes,
        scratch_bytes=program.scratch_bytes,
        exponent_bytes=4 * exp_slots,
        flash_bytes=sections.flash_bytes,
        input_bytes=input_bytes,
        n_classes=program.n_classes,
        n_calls=len(program.calls),
        **feeding,
    )
    fields = {
        "title": title.replace("*/", "* /"),
        "channels": channels,
        "height": height,
        "width": width,
        "input_bytes": input_bytes,
        "input_scale": c_float(info.input_scale),
        "input_zero": info.input_zero,
        "n_classes": program.n_classes,
        "arena_bytes": info.arena_bytes,
        "scratch_bytes": info.scratch_bytes,
        "exponent_bytes": info.exponent_bytes,
        "flash_bytes": info.flash_bytes,
        "n_params": len(program.params),
        "n_calls": info.n_calls,
        "lr": c_float(program.lr),
        "max_halvings": MAX_LR_HALVINGS,
        "guard_bytes": GUARD_BYTES,
        "scratch_words": program.scratch_bytes // 4,
        "exp_slots": exp_slots,
        "constants": "\n".join(sections.constants),
        "initial": "\n".join(sections.initial),
        "views": _indent(sections.views),
        "decls": "\n".join(sections.decls),
        "forward": _indent(sections.forward),
        "backward": _indent(sections.backward),
        "init_copies": _indent(sections.init_copies),
        "input_offset": input_ptr.offset,
        "logits": ops.pointer(logits[0]),
        **extra,
    }
    header, source = (Template(t).substitute(fields) for t in (MODEL_HEADER, MODEL_SOURCE))
    return {"tt_model.h": header, "tt_model.c": source}, info


PROFILE_CHUNK = 96
"""Characters of the graph's JSON per C string literal in ``tt_profile.h``."""


def _c_string(text: str) -> str:
    if not text.isascii():
        raise BundleError(f"cannot write {text[:40]!r}... as a C string: not ASCII")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_profile(
    program: StepProgram, *, name: str, device: str, clock_hz: float, graph_json: str
) -> str:
    """``tt_profile.h``, what ``platform/profile_main.c`` writes beside its times: the
    measurement's ``name``, the ``device`` and its clock, the op and kernel of every call, and
    the training graph (``graph_json``, :meth:`tinytune.ir.Graph.to_json`) that
    ``tinytune calibrate`` fits on."""
    calls = ",\n".join(
        f"    {{{_c_string(call.op)}, {_c_string(call.kernel)}}}" for call in program.calls
    )
    chunks = ",\n".join(
        f"    {_c_string(graph_json[i : i + PROFILE_CHUNK])}"
        for i in range(0, len(graph_json), PROFILE_CHUNK)
    )
    return Template(PROFILE_HEADER).substitute(
        name=_c_string(name),
        device=_c_string(device),
        clock_hz=repr(float(clock_hz)),
        n_calls=len(program.calls),
        calls=calls,
        graph=chunks,
    )
