"""Compile C test programs against the kernels and exchange arrays with them.

Arrays travel over stdin/stdout framed as int32 dtype code, int32 element count, raw
little-endian elements (``kernel_driver.c`` reads and writes the same frames).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tinytune.lowering import C_LIBS, C_SOURCES, csrc_dir

HERE = Path(__file__).parent / "csrc"
CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-O2")
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-O1")
# The kernels never allocate; the leak checker needs ptrace, which some containers forbid.
RUN_ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"}
DTYPES = {
    np.dtype(np.int8): 0,
    np.dtype(np.int32): 1,
    np.dtype(np.float32): 2,
    np.dtype(np.uint8): 3,
}
CODES = {v: k for k, v in DTYPES.items()}

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this machine")


def build_driver(name: str, variant: str, tmp: Path) -> Path:
    """Compile ``csrc/<name>.c`` with the kernels: ``O2`` (the Cortex-M builds' level), ``O3``
    (the Linux builds' level, where the loops are vectorised; on x86-64 its kernels chosen at
    load time, AVX2 where the processor has it), ``O3-baseline`` (the same, the baseline x86-64
    kernels only), or ``sanitized``; skips when this gcc has no sanitizer runtime."""
    extra = {
        "sanitized": SANITIZE,
        "O3": ("-O3",),
        "O3-baseline": ("-O3", "-DTT_NO_CLONES"),
    }.get(variant, ())
    try:
        return compile_program(HERE / f"{name}.c", tmp / f"{name}_{variant}", extra)
    except RuntimeError as e:
        if variant == "sanitized" and "san" in str(e):
            pytest.skip(f"gcc cannot build with sanitizers here: {str(e).splitlines()[-1]}")
        raise


def compile_program(driver: Path, out: Path, extra: Sequence[str] = ()) -> Path:
    """``gcc`` the kernels with ``driver`` into ``out``; raises with gcc's messages on error."""
    src = csrc_dir()
    cmd = [
        "gcc", *CFLAGS, *extra, f"-I{src}", str(driver), *(str(src / s) for s in C_SOURCES),
        "-o", str(out), *C_LIBS,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"gcc failed:\n{done.stderr}")
    return out


def encode(arrays: Sequence[np.ndarray]) -> bytes:
    parts = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        parts.append(struct.pack("<ii", DTYPES[a.dtype], a.size))
        parts.append(a.astype(a.dtype.newbyteorder("<")).tobytes())
    return b"".join(parts)


def decode(data: bytes) -> list[np.ndarray]:
    out, pos = [], 0
    while pos < len(data):
        code, count = struct.unpack_from("<ii", data, pos)
        pos += 8
        dtype = CODES[code].newbyteorder("<")
        out.append(np.frombuffer(data, dtype=dtype, count=count, offset=pos).astype(CODES[code]))
        pos += count * dtype.itemsize
    return out


def run_program(
    binary: Path, args: Sequence[str], arrays: Sequence[np.ndarray]
) -> list[np.ndarray]:
    done = subprocess.run(
        [str(binary), *args], input=encode(arrays), capture_output=True, check=False, env=RUN_ENV
    )
    if done.returncode:
        raise RuntimeError(f"{binary.name} {' '.join(args)} failed: {done.stderr.decode()}")
    return decode(done.stdout)


# --- lowered training steps ------------------------------------------------------------------

SPACES = {"arena": 0, "flash": 1, "scratch": 2, "exp": 3}


def _i32(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * ((-len(data)) % 4)


def _operand(value: object) -> bytes:
    from tinytune.lowering.program import ExpRef, Label, Ptr

    if value is None:
        return _i32(2)
    if isinstance(value, Label):
        return _i32(5)
    if isinstance(value, ExpRef):
        return _i32(4, value.slot)
    if isinstance(value, Ptr):
        return _i32(1, SPACES[value.space], value.offset)
    if isinstance(value, tuple):  # floats inside a struct travel as their float32 bits
        words = [
            int(np.float32(v).view(np.int32)) if isinstance(v, float) else int(v) for v in value
        ]
        return _i32(6, len(words), *words)
    if isinstance(value, float):
        return _i32(3) + np.float32(value).tobytes()
    assert isinstance(value, int | np.integer), value
    return _i32(0, int(value))


def encode_program(program, dumps: Sequence[tuple[int, object, int, int | None]]) -> bytes:
    """The binary form that ``step_driver.c`` reads: spaces, flash, initial arena contents,
    calls, and the dumps (call index, pointer, byte count, exponent slot) to write."""
    flash = bytearray(program.flash_bytes)
    for offset, array in program.flash.values():
        flash[offset : offset + array.nbytes] = array.tobytes()
    out = [_i32(0x31505454, program.arena_bytes, len(flash), program.scratch_bytes,
                4 * program.n_exponents), _padded(bytes(flash))]  # fmt: skip
    out.append(_i32(len(program.arena_init)))
    for offset, data in program.arena_init:
        out += [_i32(offset, len(data)), _padded(data)]
    ptr, nbytes = program.input
    out.append(_i32(ptr.offset, nbytes, len(program.calls)))
    for call in program.calls:
        name = call.kernel.encode()
        out += [_i32(len(name)), _padded(name), _i32(len(call.operands))]
        out += [_operand(value) for _, value in call.operands]
    out.append(_i32(len(dumps)))
    for index, p, n, slot in dumps:
        out.append(_i32(index, SPACES[p.space], p.offset, n, -1 if slot is None else slot))
    return b"".join(out)


def run_steps(
    binary: Path, program_bytes: bytes, images: np.ndarray, labels: Sequence[int]
) -> list[np.ndarray]:
    """Run the step once per (image, label) and return every dumped array in order."""
    steps = b"".join(
        _i32(int(label)) + _padded(np.ascontiguousarray(img, dtype=np.int8).tobytes())
        for img, label in zip(images, labels, strict=True)
    )
    done = subprocess.run(
        [str(binary)], input=program_bytes + steps, capture_output=True, check=False, env=RUN_ENV
    )
    if done.returncode:
        raise RuntimeError(f"{binary.name} failed: {done.stderr.decode()}")
    return decode(done.stdout)
