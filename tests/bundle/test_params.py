"""Saving what was learned: ``tt_params_save`` writes the blob that ``tt_model.h`` lays out
(checked here field by field, its CRC against zlib's), ``tt_params_load`` restores it exactly
and refuses, changing nothing, a blob that is short, not one, of another version, byte order
or model, or changed since it was written; the model id follows the layout and the frozen
constants, not the learning rate."""

from __future__ import annotations

import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.bundle.support import needs, write_test_bundle
from tests.quant.nets import SCHEMES, images, tiny_net
from tinytune.bundle.render import model_id
from tinytune.lowering.program import lower_step
from tinytune.quant import QConv, quantize

HARNESS = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt_data.h"
#include "tt_model.h"

/* the trained parameters as one stream of bytes, tensor after tensor */
static void print_params(void) {
    int32_t i, j;
    for (i = 0; i < TT_N_PARAMS; i++) {
        const tt_param_view *p = tt_param(i);
        for (j = 0; j < p->nbytes; j++) {
            printf("%02x", (unsigned)((const uint8_t *)p->data)[j]);
        }
    }
    printf("\\n");
}

int main(int argc, char **argv) {
    static uint8_t blob[TT_PARAMS_BYTES + 64];
    int32_t size;
    if (argc > 1 && strcmp(argv[1], "save") == 0) {
        tt_model_init();
        tt_train_step(tt_train_images[0], (int)tt_train_labels[0], NULL);
        tt_train_step(tt_train_images[1], (int)tt_train_labels[1], NULL);
        printf("%d %ld\\n", tt_params_save(blob, (int32_t)sizeof blob), (long)tt_params_size());
        printf("%d\\n", tt_params_save(blob, TT_PARAMS_BYTES - 1));
        printf("%d\\n", tt_params_save(NULL, TT_PARAMS_BYTES));
        fwrite(blob, 1, TT_PARAMS_BYTES, stdout);
        printf("\\n");
        print_params();
        return 0;
    }
    /* load: records of the int32 size to pass (-1: no buffer), the int32 count of bytes that
     * follow, and those bytes; each loaded after a reset */
    while (fread(&size, sizeof size, 1, stdin) == 1) {
        int32_t n;
        if (fread(&n, sizeof n, 1, stdin) != 1 || n > (int32_t)sizeof blob ||
            fread(blob, 1, (size_t)n, stdin) != (size_t)n) {
            return 3;
        }
        tt_model_init();
        printf("%d ", tt_params_load(size < 0 ? NULL : blob, size));
        print_params();
    }
    return 0;
}
"""


def _build(folder: Path) -> Path:
    (folder / "harness.c").write_text(HARNESS)
    binary = folder / "harness"
    kernels = sorted(str(p) for p in (folder / "kernels").glob("*.c"))
    cc = [
        "gcc",
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{folder}",
        f"-I{folder / 'kernels'}",
    ]
    sources = [str(folder / "harness.c"), str(folder / "tt_model.c"), str(folder / "tt_data.c")]
    subprocess.run([*cc, *sources, *kernels, "-o", str(binary), "-lm"], check=True)
    return binary


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes, bytes, str]:
    """A test bundle's harness, the blob it saved after two steps, the trained parameters then,
    the initial ones, and the bundle's model id."""
    q = quantize(tiny_net(SCHEMES["sparse"]), [images(16)])
    folder = tmp_path_factory.mktemp("params") / "b"
    program, *_ = write_test_bundle(folder, q, images(2, seed=3), images(2, seed=4))
    binary = _build(folder)
    out = subprocess.run([str(binary), "save"], capture_output=True, check=True).stdout
    first, second, third, rest = out.split(b"\n", 3)
    assert first.split() == [b"0", str(24 + sum(_sizes(program))).encode()]
    assert second == b"-1" and third == b"-1"  # too short a buffer, or none
    n = int(first.split()[1])
    blob, params = rest[:n], bytes.fromhex(rest[n + 1 :].decode().strip())
    initial = _load(binary, [b""])[0][1]  # a refused load: what tt_model_init() left
    return binary, blob, params, initial, model_id(program)


def _sizes(program: object) -> list[int]:
    return [
        np.dtype(dtype).itemsize * int(np.prod(shape))
        for _, dtype, shape in program.params.values()  # type: ignore[attr-defined]
    ]


def _load(
    binary: Path, blobs: list[bytes], sizes: list[int] | None = None
) -> list[tuple[int, bytes]]:
    sizes = sizes or [len(b) for b in blobs]
    data = b"".join(struct.pack("<ii", s, len(b)) + b for s, b in zip(sizes, blobs, strict=True))
    out = subprocess.run([str(binary), "load"], input=data, capture_output=True, check=True).stdout
    rows = [line.split() for line in out.decode().splitlines()]
    return [(int(code), bytes.fromhex(hexes)) for code, hexes in rows]


@needs("host")
def test_the_blob_is_laid_out_as_the_header_says(
    saved: tuple[Path, bytes, bytes, bytes, str],
) -> None:
    _, blob, params, initial, ident = saved
    assert blob[:4] == b"TTPB"
    assert struct.unpack_from("<H", blob, 4)[0] == 1 and blob[6:8] == b"\xff\xfe"
    assert blob[8:16] == bytes.fromhex(ident)
    assert struct.unpack_from("<I", blob, 16)[0] == len(blob) - 24 == len(params)
    assert struct.unpack_from("<I", blob, 20)[0] == zlib.crc32(blob[:20] + blob[24:])
    assert blob[24:] == params != initial  # the trained tensors, as the arena holds them


def _with(blob: bytes, at: int, value: bytes) -> bytes:
    return blob[:at] + value + blob[at + len(value) :]


@needs("host")
def test_a_saved_blob_loads_exactly_and_a_bad_one_changes_nothing(
    saved: tuple[Path, bytes, bytes, bytes, str],
) -> None:
    binary, blob, params, initial, _ = saved
    crc = struct.unpack_from("<I", blob, 20)[0]

    def recrc(b: bytes) -> bytes:  # a consistent checksum, so the field itself is what fails
        return _with(b, 20, struct.pack("<I", zlib.crc32(b[:20] + b[24:])))

    torn = bytearray(blob)
    torn[-1] ^= 0x01  # the last byte of a torn flash write
    cases = {
        "the blob": (blob, len(blob), 0),
        "the blob in a larger page": (blob + b"\xff" * 40, len(blob) + 40, 0),
        "a shorter buffer": (blob, len(blob) - 1, -1),
        "a header alone": (blob[:20], 20, -1),
        "no buffer": (b"", -1, -1),
        "another magic": (recrc(_with(blob, 0, b"TTPA")), len(blob), -2),
        "another version": (recrc(_with(blob, 4, struct.pack("<H", 2))), len(blob), -3),
        "a big-endian payload": (recrc(_with(blob, 6, b"\xfe\xff")), len(blob), -4),
        "another model": (recrc(_with(blob, 8, bytes(8))), len(blob), -5),
        "another payload size": (
            recrc(_with(blob, 16, struct.pack("<I", len(blob) - 23))),
            len(blob),
            -1,
        ),
        "a torn payload": (bytes(torn), len(blob), -6),
        "a torn header": (_with(blob, 20, struct.pack("<I", crc ^ 0x80000000)), len(blob), -6),
        "a zeroed blob": (bytes(len(blob)), len(blob), -2),
    }
    results = _load(binary, [b for b, _, _ in cases.values()], [s for _, s, _ in cases.values()])
    for (name, (_, _, code)), (got, state) in zip(cases.items(), results, strict=True):
        assert got == code, name
        assert state == (params if code == 0 else initial), name


def test_the_model_id_is_the_layout_and_the_frozen_constants_not_the_rate() -> None:
    q = quantize(tiny_net(SCHEMES["sparse"]), [images(16)])
    at_one_rate, at_another = lower_step(q, 0.01), lower_step(q, 0.002)
    assert model_id(at_one_rate) == model_id(at_another)
    assert len(model_id(at_one_rate)) == 16
    other_scheme = quantize(tiny_net(SCHEMES["bias+pw 1/4"]), [images(16)])
    assert model_id(lower_step(other_scheme, 0.01)) != model_id(at_one_rate)
    # one frozen weight of the stem changed by one step: another model
    changed = q.clone()
    stem = next(layer for layer in changed.layers if isinstance(layer, QConv))
    weight = stem.weight.clone()
    weight.view(-1)[0] += 1 if int(weight.view(-1)[0]) < 127 else -1
    changed.layers = tuple(
        replace(layer, weight=weight) if layer is stem else layer for layer in changed.layers
    )
    assert model_id(lower_step(changed, 0.01)) != model_id(at_one_rate)
