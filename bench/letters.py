"""A small image folder of printed letters, the kind of data set a user brings.

Ten classes (``A`` to ``J``), each image a letter in Pillow's built-in font at a random size,
position and rotation, grey on grey with pixel noise, 48×48 PNG — one sub-folder per class, as
``--dataset imagefolder:PATH`` reads it. Deterministic for a seed.

    python3 -m bench.letters OUT [--per-class 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CLASSES = "ABCDEFGHIJ"
SIZE = 48


def letter(char: str, rng: np.random.Generator) -> Image.Image:
    """One image of ``char``."""
    background, ink = (int(v) for v in rng.choice(256, size=2, replace=False))
    if abs(background - ink) < 80:  # keep the letter legible
        ink = (background + 128) % 256
    font = ImageFont.load_default(size=int(rng.integers(20, 35)))
    canvas = Image.new("L", (2 * SIZE, 2 * SIZE), background)
    draw = ImageDraw.Draw(canvas)
    left, top, right, bottom = draw.textbbox((0, 0), char, font=font)
    x = SIZE - (right - left) / 2 - left + rng.integers(-6, 7)
    y = SIZE - (bottom - top) / 2 - top + rng.integers(-6, 7)
    draw.text((x, y), char, fill=ink, font=font)
    angle = float(rng.uniform(-15, 15))
    canvas = canvas.rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=background)
    crop = canvas.crop((SIZE // 2, SIZE // 2, SIZE // 2 + SIZE, SIZE // 2 + SIZE))
    pixels = np.asarray(crop, np.float32) + rng.normal(0, 12, (SIZE, SIZE))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).convert("RGB")


def write_letters(root: Path, per_class: int, seed: int) -> Path:
    """Write the folder; refuses to write into a folder that is not empty."""
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} is not empty; give a new folder")
    rng = np.random.default_rng(seed)
    for char in CLASSES:
        (root / char).mkdir(parents=True)
        for i in range(per_class):
            letter(char, rng).save(root / char / f"{i:03d}.png")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-class", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = write_letters(args.out, args.per_class, args.seed)
    print(f"wrote {len(CLASSES) * args.per_class} images in {len(CLASSES)} classes to {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
