"""Feeding a bundle: ``tt_quantize_rgb888`` and ``tt_quantize_grey8`` make from an 8-bit frame
the int8 input that the search made from the same image file (``ImageFolderDataset.load``, then
``QuantizedNet.quantize_input``, as the bundle's own samples are made), byte for byte, for 20
images of three folders (RGB, grey and palette PNGs, smaller, larger and not square); on the
host, and on the Cortex-M0+ and RV32IMC, whose doubles are software. The class names reach C
as the data set lists them, whatever their characters."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.bundle.support import make, needs, write_test_bundle
from tests.quant.nets import RESOLUTION, SCHEMES, tiny_net
from tinytune.bundle.assemble import _samples
from tinytune.bundle.frames import input_table
from tinytune.bundle.render import c_values
from tinytune.data import ImageFolderDataset
from tinytune.models.layers import Classifier
from tinytune.quant import quantize

# the folders sort in this order; each name holds what C strings must escape
CLASSES = {
    'grey "L" \\ 8-bit': "L",
    "palette ??= P": "P",
    "rgb café ☕": "RGB",
}
# (width, height) of each folder's images at RESOLUTION = 16: down, up, one axis kept, square
SIZES = {
    "L": [(40, 30), (9, 12), (16, 40), (100, 64), (5, 5), (23, 16), (16, 16)],
    "P": [(64, 48), (12, 9), (50, 17), (16, 23), (7, 31), (200, 40)],
    "RGB": [(30, 40), (16, 16), (3, 4), (48, 64), (17, 50), (250, 20), (90, 90)],
}

FRAME_MAIN = """\
#include <stdint.h>
#include <stdio.h>

#include "frames.h"
#include "tt_model.h"

int main(void) {
    static int8_t input[TT_INPUT_BYTES];
    int i, j;
    for (i = 0; i < N_FRAMES; i++) {
        int rc;
        memset(input, 0, sizeof input);
        rc = frame_grey[i]
                 ? tt_quantize_grey8(frame_data[i], frame_w[i], frame_h[i], frame_stride[i], input)
                 : tt_quantize_rgb888(frame_data[i], frame_w[i], frame_h[i], frame_stride[i],
                                      input);
        printf("frame %d %d ", i, rc);
        for (j = 0; j < TT_INPUT_BYTES; j++) {
            printf("%02x", (unsigned)(uint8_t)input[j]);
        }
        printf("\\n");
    }
    for (i = -1; i <= TT_N_CLASSES; i++) {
        const char *name = tt_class_name(i);
        printf("class %d ", i);
        if (name == NULL) {
            printf("NULL");
        }
        for (; name != NULL && *name != 0; name++) {
            printf("%02x", (unsigned)(unsigned char)*name);
        }
        printf("\\n");
    }
    return 0;
}
"""


def _image(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    """A smooth image with noise (the resize's roundings matter), of ``mode``."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    base = 127.5 + 100.0 * np.sin(xx / (1.5 + seed % 4) + yy / 2.5) + rng.normal(0, 20, (h, w))
    rgb = np.stack([base, base[::-1] if h > 1 else base, 255 - base], axis=-1)
    image = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    if mode == "L":
        return image.convert("L")
    if mode == "P":
        return image.quantize(colors=37, method=Image.Quantize.MEDIANCUT)
    return image


@pytest.fixture
def folder(tmp_path: Path, use_session_cache: Path) -> Path:
    root = tmp_path / "images"
    for i, (name, mode) in enumerate(CLASSES.items()):
        (root / name).mkdir(parents=True)
        for j, size in enumerate(SIZES[mode]):
            image = _image(mode, size, 10 * i + j)
            assert image.mode == mode
            image.save(root / name / f"{j:02d}.png")
    return root


def _frames_header(files: list[Path]) -> tuple[str, list[bool]]:
    """``frames.h``: each file as the firmware has it (grey as 1 byte a pixel, RGB and palette
    expanded to RGB888), its rows padded to a stride past the pixels."""
    data, widths, heights, strides, grey = [], [], [], [], []
    for k, path in enumerate(files):
        with Image.open(path) as image:
            is_grey = image.mode == "L"
            pixels = np.asarray(image if is_grey else image.convert("RGB"))
        h, w = pixels.shape[:2]
        row = w * (1 if is_grey else 3)
        stride = row + k % 3
        padded = np.zeros((h, stride), np.uint8)
        padded[:, :row] = pixels.reshape(h, row)
        data.append(f"static const uint8_t frame{k}[] = {{\n{c_values(padded)}\n}};")
        widths.append(w)
        heights.append(h)
        strides.append(stride)
        grey.append(is_grey)

    def ints(name: str, values: list[int]) -> str:
        return f"static const int32_t {name}[] = {{{', '.join(map(str, values))}}};"

    text = "\n".join(
        [
            "#include <stdint.h>",
            "#include <string.h>",
            f"#define N_FRAMES {len(files)}",
            *data,
            "static const uint8_t *const frame_data[] = {"
            + ", ".join(f"frame{k}" for k in range(len(files)))
            + "};",
            ints("frame_w", widths),
            ints("frame_h", heights),
            ints("frame_stride", strides),
            ints("frame_grey", [int(g) for g in grey]),
        ]
    )
    return text + "\n", grey


def _parse(text: str) -> tuple[dict[int, tuple[int, bytes]], dict[int, bytes | None]]:
    frames, classes = {}, {}
    for line in text.splitlines():
        kind, index, *rest = line.split()
        if kind == "frame":
            frames[int(index)] = (int(rest[0]), bytes.fromhex(rest[1]))
        elif kind == "class":
            classes[int(index)] = (
                None if rest == ["NULL"] else bytes.fromhex(rest[0] if rest else "")
            )
    return frames, classes


@pytest.fixture
def bundle(folder: Path, tmp_path: Path) -> tuple[Path, dict[Path, bytes], list[str]]:
    """A bundle of the tiny network, calibrated on the folder's images, with the folder's
    classes, its ``main.c`` the frame program; and the search's int8 input of every file."""
    dataset = ImageFolderDataset(folder)
    splits = dataset.load(RESOLUTION)
    calibration = torch.from_numpy(np.asarray(splits.train.x))
    net = tiny_net(SCHEMES["bias+pw 1/4"], seed=1)
    net.classifier = Classifier(32, len(CLASSES), torch.Generator().manual_seed(1))
    q = quantize(net, [calibration])
    expected: dict[Path, bytes] = {}
    for split in (splits.train, splits.val, splits.test):
        # what build_bundle embeds of its first samples
        samples = _samples(q, split.x[: len(split.x)], split.y, "any")
        for row, image in zip(split.x.index, samples.images, strict=True):
            expected[dataset._files[int(row)]] = image.tobytes()
    assert len(expected) == 20
    out = tmp_path / "bundle"
    x = calibration[:2]
    write_test_bundle(out, q, x, x, class_names=list(dataset.class_names))
    files = sorted(expected)
    header, grey = _frames_header(files)
    assert sum(grey) == len(SIZES["L"])
    (out / "frames.h").write_text(header)
    (out / "main.c").write_text(FRAME_MAIN)
    return out, {f: expected[f] for f in files}, list(dataset.class_names)


def _check(printed: str, expected: dict[Path, bytes], names: list[str]) -> None:
    frames, classes = _parse(printed)
    assert len(frames) == len(expected) == 20
    for k, (path, want) in enumerate(expected.items()):
        rc, got = frames[k]
        assert rc == 0 and got == want, f"{path.parent.name}/{path.name}: not the search's input"
    assert classes[-1] is None and classes[len(names)] is None
    assert [classes[i] for i in range(len(names))] == [n.encode() for n in names]


@needs("host")
def test_a_frame_becomes_the_searchs_input_and_the_classes_their_names(
    bundle: tuple[Path, dict[Path, bytes], list[str]],
) -> None:
    folder, expected, names = bundle
    assert names == sorted(CLASSES)
    header = (folder / "tt_model.h").read_text()
    assert "#define TT_CLASS_NAMES" in header and "\\303\\251" in header  # é, escaped
    _check(make(folder, "run-host"), expected, names)


@needs("cortex-m0plus")
@needs("rv32imc")
def test_cores_with_software_doubles_make_the_same_input(
    bundle: tuple[Path, dict[Path, bytes], list[str]],
) -> None:
    folder, expected, names = bundle
    _check(make(folder, "run-cortex-m0plus"), expected, names)
    _check(make(folder, "run-rv32imc"), expected, names)


def test_the_table_is_the_data_sets_mapping_then_the_quantization() -> None:
    """Each 8-bit value through v / 127.5 - 1 (float32) and the input's round half to even."""
    q = quantize(tiny_net(SCHEMES["last"]), [torch.rand(4, 3, RESOLUTION, RESOLUTION) * 2 - 1])
    table = input_table(q)
    scale, zero = q.acts[q.graph.input].scale, q.acts[q.graph.input].zero
    real = np.arange(256, dtype=np.float32) / np.float32(127.5) - np.float32(1.0)
    want = np.clip(np.round(real.astype(np.float64) / scale) + zero, -128, 127)
    assert table.dtype == np.int8 and np.array_equal(table, want.astype(np.int8))
    assert len(set(table.tolist())) > 200  # a table, not a constant


def test_the_header_states_the_input_rule(tmp_path: Path) -> None:
    q = quantize(tiny_net(SCHEMES["last"]), [torch.rand(4, 3, RESOLUTION, RESOLUTION) * 2 - 1])
    x = torch.rand(2, 3, RESOLUTION, RESOLUTION) * 2 - 1
    write_test_bundle(tmp_path / "b", q, x, x)
    header = " ".join(
        re.sub(r"^\s*\*", "", line)
        for line in (tmp_path / "b" / "tt_model.h").read_text().split("\n")
    )
    words = " ".join(header.split())
    assert "This model's samples were random test images." in words
    assert "tt_quantize_rgb888() and tt_quantize_grey8() make that input" in words
    assert "another class, or another order, needs a new search and export" in words
