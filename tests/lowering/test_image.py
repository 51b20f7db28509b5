"""``tt_resize_bilinear_s8`` against Pillow itself: an 8-bit frame resized as
``Image.resize((W, H), Image.Resampling.BILINEAR)`` resizes an RGB image (a grey one after
``convert("RGB")``), byte for byte, on random frames of every kind of size (down, up, one axis
alone, non-square, at the largest ratio), through a random table; and its refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import PIL
import pytest
from PIL import Image

from tests.bundle.support import needs
from tests.lowering.harness import build_driver, needs_gcc, run_program
from tinytune.bundle.frames import HORIZONTAL_FIRST, PILLOW13, resize_order

pytestmark = needs_gcc

MAX_RATIO = 16  # TT_RESIZE_MAX_RATIO
ORDER = resize_order(PIL.__version__)  # the installed Pillow's


def pillow(frame: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """What the image-folder data set makes of an 8-bit frame (H, W, 3) or (H, W): (H', W', 3)."""
    image = Image.fromarray(frame).convert("RGB")
    return np.asarray(image.resize((out_w, out_h), Image.Resampling.BILINEAR))


def vertical_first(w: int, h: int, out_w: int, out_h: int) -> bool:
    """Pillow 13's rule: the height loses more than twice the pixels the width loses."""
    return h - out_h > 0 and h - out_h > (w - out_w) * 2


def case(
    frame: np.ndarray,
    out_w: int,
    out_h: int,
    lut: np.ndarray,
    pad: int = 0,
    tail: bool = True,
    order: int = ORDER,
) -> tuple[list[np.ndarray], int]:
    """The driver's arrays for one frame, rows ``pad`` bytes longer than the pixels; without
    ``tail`` the last row stops at its last pixel (the buffer ends there)."""
    h, w = frame.shape[:2]
    channels = 1 if frame.ndim == 2 else 3
    stride = w * channels + pad
    buffer = np.full((h, stride), 0xEE, np.uint8)
    buffer[:, : w * channels] = frame.reshape(h, w * channels)
    data = buffer.reshape(-1)
    if not tail:
        data = data[: stride * (h - 1) + w * channels]
    params = np.array([w, h, stride, channels, out_w, out_h, order], np.int32)
    return [params, data, lut.astype(np.int8)], 3 * out_w * out_h


def run(binary: Path, cases: list[tuple[list[np.ndarray], int]]) -> list[tuple[int, np.ndarray]]:
    arrays = [a for arrays, _ in cases for a in arrays]
    out = run_program(binary, [], arrays)
    return [(int(out[2 * i][0]), out[2 * i + 1]) for i in range(len(cases))]


def sizes(rng: np.random.Generator, n: int) -> list[tuple[int, int, int, int]]:
    """(w, h, out_w, out_h): downscales, upscales, one axis kept, non-square, the ratio's edge."""
    picked = [
        (64, 48, 16, 16), (16, 40, 16, 16), (40, 16, 16, 16), (16, 16, 16, 16), (5, 7, 16, 16),
        (1, 1, 16, 16), (1, 100, 8, 8), (256, 256, 16, 16), (256, 1, 16, 1), (16, 255, 1, 16),
        (320, 240, 32, 32), (31, 17, 32, 12),
    ]  # fmt: skip
    while len(picked) < n:
        out_w, out_h = (int(v) for v in rng.integers(1, 40, 2))
        w = int(rng.integers(1, MAX_RATIO * out_w + 1))
        h = int(rng.integers(1, MAX_RATIO * out_h + 1))
        if w * h <= 200_000:
            picked.append((w, h, out_w, out_h))
    return picked


def frames(n: int) -> list[tuple[np.ndarray, int, int]]:
    """(frame, out_w, out_h): random and smooth content, RGB and grey, of :func:`sizes`."""
    rng = np.random.default_rng(7)
    out = []
    for i, (w, h, out_w, out_h) in enumerate(sizes(rng, n)):
        shape = (h, w) if i % 3 == 2 else (h, w, 3)
        if i % 4 == 0:  # smooth content: the roundings between 0 and 255, not only clipping
            yy, xx = np.mgrid[0:h, 0:w]
            base = (127.5 + 127.5 * np.sin(xx / 3.0 + yy / 5.0)).astype(np.uint8)
            frame = base if len(shape) == 2 else np.stack([base, base[::-1], 255 - base], -1)
        else:
            frame = rng.integers(0, 256, shape, dtype=np.uint8)
        out.append((frame, out_w, out_h))
    return out


LUT = np.random.default_rng(8).integers(-128, 128, 256)


@pytest.mark.parametrize("variant", ["O2", "sanitized"])
def test_frames_resize_as_pillow_resizes_them(tmp_path: Path, variant: str) -> None:
    """The installed Pillow's resize of every frame, through the table, channels first."""
    binary = build_driver("image_driver", variant, tmp_path)
    cases, expected = [], []
    for i, (frame, out_w, out_h) in enumerate(frames(160)):
        cases.append(case(frame, out_w, out_h, LUT, pad=i % 5, tail=i % 2 == 0))
        resized = pillow(frame, out_w, out_h)  # (out_h, out_w, 3)
        expected.append(LUT[resized].transpose(2, 0, 1).astype(np.int8).reshape(-1))
    for k, ((rc, got), want) in enumerate(zip(run(binary, cases), expected, strict=True)):
        assert rc == 0, k
        assert np.array_equal(got, want), f"frame {k}"


@pytest.mark.skipif(ORDER != PILLOW13, reason=f"Pillow {PIL.__version__} is not Pillow 13")
def test_the_order_of_the_passes_is_pillow_13s_and_matters(tmp_path: Path) -> None:
    """The frames exercise both of Pillow 13's orders; the other rule (horizontal first, Pillow
    10 to 12) gives its bytes where the rules agree and differs where they do not."""
    binary = build_driver("image_driver", "O2", tmp_path)
    picked = frames(160)
    rule = [vertical_first(f.shape[1], f.shape[0], w, h) for f, w, h in picked]
    assert 10 < sum(rule) < len(rule) - 10
    old = run(binary, [case(f, w, h, LUT, order=HORIZONTAL_FIRST) for f, w, h in picked])
    new = run(binary, [case(f, w, h, LUT) for f, w, h in picked])
    differ = [not np.array_equal(a[1], b[1]) for a, b in zip(old, new, strict=True)]
    assert not any(d for d, v in zip(differ, rule, strict=True) if not v)
    assert any(differ)


@needs_gcc
def test_frames_it_cannot_resize_are_refused_untouched(tmp_path: Path) -> None:
    binary = build_driver("image_driver", "O2", tmp_path)
    lut = np.arange(-128, 128)
    frame = np.zeros((10, 20, 3), np.uint8)
    wide = np.zeros((4, MAX_RATIO * 4 + 1), np.uint8)  # one pixel past the ratio, at 4 px
    ok = np.zeros((4, MAX_RATIO * 4), np.uint8)
    tall = np.zeros((MAX_RATIO * 2 + 1, 3, 3), np.uint8)
    bad_stride = case(frame, 4, 4, lut)
    bad_stride[0][0][2] = 20 * 3 - 1
    bad_channels = case(frame, 4, 4, lut)
    bad_channels[0][0][3] = 2
    bad_out = case(frame, 4, 4, lut)
    bad_out[0][0][4] = 0
    bad_order = case(frame, 4, 4, lut, order=2)
    results = run(
        binary,
        [
            case(wide, 4, 4, lut),
            case(ok, 4, 4, lut),
            case(tall, 3, 2, lut),
            bad_stride,
            bad_channels,
            bad_out,
            bad_order,
        ],
    )
    assert [rc for rc, _ in results] == [-1, 0, -1, -1, -1, -1, -1]
    for rc, out in results:
        if rc:
            assert (out.view(np.uint8) == 0x5A).all()


RV32 = ("-march=rv32imc", "-mabi=ilp32", "--specs=picolibc.specs", "--oslib=semihost",
        "--crt0=semihost", "-Wl,--defsym=__flash=0x80000000", "-Wl,--defsym=__flash_size=0x400000",
        "-Wl,--defsym=__ram=0x80400000", "-Wl,--defsym=__ram_size=0x400000",
        "-Wl,--defsym=__stack_size=0x2000")  # fmt: skip
QEMU_RV32 = ("qemu-system-riscv32", "-M", "virt", "-bios", "none", "-nographic", "-monitor",
             "none", "-serial", "none", "-chardev", "stdio,id=tt", "-semihosting-config",
             "enable=on,target=native,chardev=tt", "-icount", "shift=0,sleep=off")  # fmt: skip


def _rv32_counts(tmp_path: Path, rows: int) -> dict[tuple[int, int, int, int], float]:
    """Millions of instructions of each frame of ``csrc/image_cost.c`` at ``rows`` rows."""
    import subprocess

    from tests.lowering.harness import HERE
    from tinytune.lowering import csrc_dir

    elf = tmp_path / f"cost{rows}.elf"
    src = csrc_dir()
    subprocess.run(
        ["riscv64-unknown-elf-gcc", "-std=c99", "-ffp-contract=off", "-O2", "-Wall", "-Werror",
         f"-DTT_RESIZE_ROWS={rows}", f"-I{src}", str(HERE / "image_cost.c"),
         str(src / "tt_image.c"), *RV32, "-Wa,-march=rv32imc_zicsr", "-o", str(elf)],
        check=True,
    )  # fmt: skip
    done = subprocess.run(
        [*QEMU_RV32, "-kernel", str(elf)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    counts = {}
    for line in done.stdout.splitlines():
        w, h, c, side, n = (int(v) for v in line.split())
        counts[(w, h, c, side)] = round(n / 1e6, 1)
    return counts


@pytest.mark.slow
@needs("rv32imc")
def test_the_readmes_instruction_counts_are_measured(tmp_path: Path) -> None:
    """The bundle README's cost of the frame helpers on RV32IMC (its section on feeding an
    image model), counted again."""
    from importlib import resources

    readme = " ".join(
        (resources.files("tinytune.bundle") / "platform" / "feeding_image.md").read_text().split()
    )
    four, eight = _rv32_counts(tmp_path, 4), _rv32_counts(tmp_path, 8)
    said = (
        f"a 320×240 RGB frame takes {four[(320, 240, 3, 32)]} M instructions to 32×32 and "
        f"{four[(320, 240, 3, 64)]} M to 64×64, a 160×120 one {four[(160, 120, 3, 32)]} M to "
        f"32×32, a 320×240 grey one {four[(320, 240, 1, 32)]} M to 32×32, a 640×480 RGB one "
        f"{four[(640, 480, 3, 128)]} M to 128×128; `-DTT_RESIZE_ROWS=8` (1.8 KB of stack) takes "
        f"{eight[(320, 240, 3, 32)]} M for the first"
    )
    assert said in readme
