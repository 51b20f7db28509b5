"""Image folders of other kinds than the printed letters, from material that registry packages
ship: the search benchmarks on real features run on them (``bench.search_efficiency``).

* ``textures``: ten grey materials and surfaces, each a random crop of one of scikit-image's
  sample images (brick, grass, gravel, the moon's craters, coins, a page of print, the Hubble
  deep field, a stained tissue section, a camera-man's coat and lawn, a cup of coffee) at a
  random scale, rotation, flip, brightness and contrast: which surface is it, from its texture
  alone (no colour).
* ``textures-hard``: the same ten surfaces, harder: a crop of 20 to 56 pixels (fewer of the
  texture's elements, blurred by the up-sampling to 64), a lower contrast and three times the
  pixel noise. The presets saturate the ``textures`` folder (100 % on validation in some seeds,
  which no point can beat); this one leaves room above them.
* ``symbols``: ten pictograms of the DejaVu Sans font that matplotlib ships (♠ ♣ ♥ ♦ ★ ☂ ✈ ♪ ☀
  ☯), each in a random colour, size, position and rotation over a random crop of a photograph
  (scikit-learn's and matplotlib's sample photographs): small coloured shapes in clutter.
* ``drawings``: eight categories of objects drawn in colour (mammals, birds, sea animals,
  fruit, vegetables, land vehicles, aircraft and boats, buildings), each image one of 14 to 32
  different drawings of its category from the Noto Color Emoji font (Debian's
  ``fonts-noto-color-emoji``) at a random size, position and rotation over a crop of a
  photograph: which kind of thing is it, whichever of its drawings (a test image's drawing is
  often one that no training image of it shows).

Each image 64×64 PNG, one sub-folder per class, as ``--dataset imagefolder:PATH`` reads it.
Deterministic for a seed.

    python3 -m bench.folders textures OUT [--per-class 50] [--seed 0]
    python3 -m bench.folders textures-hard OUT [--per-class 50] [--seed 0]
    python3 -m bench.folders symbols OUT [--per-class 50] [--seed 0]
    python3 -m bench.folders drawings OUT [--per-class 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps

SIZE = 64
TEXTURES = (
    "brick",
    "grass",
    "gravel",
    "moon",
    "coins",
    "page",
    "hubble_deep_field",
    "immunohistochemistry",
    "camera",
    "coffee",
)
SYMBOLS = "♠♣♥♦★☂✈♪☀☯"
SYMBOL_NAMES = (
    "spade",
    "club",
    "heart",
    "diamond",
    "star",
    "umbrella",
    "plane",
    "note",
    "sun",
    "yinyang",
)

DRAWINGS = {
    "mammal": "🐶🐱🐭🐹🐰🦊🐻🐼🐨🐯🦁🐮🐷🐵🐺🐗🐴🦓🦌🐘🦏🦛🐪🦒🦘🐄🐎🐖🐑🐐🐈🦔",
    "bird": "🐔🐧🐦🐤🐥🦆🦅🦉🦃🦚🦜🦢🦩🕊🐓🦤",
    "sea": "🐟🐠🐡🦈🐬🐳🐋🦭🐙🦑🦐🦞🦀🐚",
    "fruit": "🍇🍈🍉🍊🍋🍌🍍🥭🍎🍏🍐🍑🍒🍓🫐🥝🥥",
    "vegetable": "🥑🍆🥔🥕🌽🌶🫑🥒🥬🥦🧄🧅🍄🥜",
    "land-vehicle": "🚗🚕🚙🚌🚎🏎🚓🚑🚒🚐🛻🚚🚛🚜🏍🛵🚲🛴🚂🚃🚄🚅🚈🚋🚍🚘🚖🚔",
    "craft": "✈🛩🛫🛬🪂🚁🚠🚡🛰🚀🛸⛵🛶🚤🛳⛴🛥🚢",
    "building": "🏠🏡🏘🏚🏗🏭🏢🏬🏣🏤🏥🏦🏨🏪🏫🏩💒🏛⛪🕌🕍🛕⛩🏯🏰🗼",
}
"""The ``drawings`` folder's categories and the emoji drawn for each."""

EMOJI_FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
"""Debian's ``fonts-noto-color-emoji`` (a bitmap font: drawn at its one size, 109 px)."""


def _photographs() -> list[Image.Image]:
    """The sample photographs of scikit-learn and matplotlib, in RGB."""
    import matplotlib.cbook
    from sklearn.datasets import load_sample_images

    photos = [Image.fromarray(a) for a in load_sample_images().images]
    with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
        photos.append(Image.open(f).convert("RGB"))
    return photos


def _grey_sources() -> list[Image.Image]:
    """scikit-image's sample images of :data:`TEXTURES`, in grey."""
    import skimage.data

    return [
        ImageOps.grayscale(Image.fromarray(getattr(skimage.data, name)())) for name in TEXTURES
    ]


def _crop(source: Image.Image, rng: np.random.Generator, low: int, high: int) -> Image.Image:
    """A square crop of a random side in ``[low, high)`` pixels (at most the source's), rotated by
    a multiple of 90° and maybe mirrored, resized to :data:`SIZE`."""
    side = int(rng.integers(low, min(high, *source.size) + 1))
    x = int(rng.integers(0, source.width - side + 1))
    y = int(rng.integers(0, source.height - side + 1))
    crop = source.crop((x, y, x + side, y + side)).rotate(90 * int(rng.integers(4)))
    if rng.random() < 0.5:
        crop = ImageOps.mirror(crop)
    return crop.resize((SIZE, SIZE), Image.Resampling.BILINEAR)


def texture(source: Image.Image, rng: np.random.Generator, hard: bool = False) -> Image.Image:
    """One image of ``source``'s surface: a crop of 48 to 160 pixels, its brightness and
    contrast jittered, with pixel noise; ``hard``: a crop of 20 to 56 pixels, a contrast of 0.3
    to 0.9 times the source's and noise of σ 20 grey levels (6 otherwise)."""
    low, high, contrast, noise = (20, 56, (0.3, 0.9), 20) if hard else (48, 160, (0.6, 1.4), 6)
    pixels = np.asarray(_crop(source, rng, low, high), np.float32)
    pixels = (pixels - pixels.mean()) * rng.uniform(*contrast) + rng.uniform(70, 180)
    pixels += rng.normal(0, noise, pixels.shape)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).convert("RGB")


def symbol(char: str, photos: list[Image.Image], rng: np.random.Generator) -> Image.Image:
    """One image of ``char``: a random colour, size, position and rotation over a crop of one
    of ``photos``."""
    import matplotlib

    background = _crop(photos[int(rng.integers(len(photos)))], rng, 64, 320)
    font_file = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    font = ImageFont.truetype(str(font_file), int(rng.integers(26, 46)))
    mask = Image.new("L", (2 * SIZE, 2 * SIZE), 0)
    draw = ImageDraw.Draw(mask)
    left, top, right, bottom = draw.textbbox((0, 0), char, font=font)
    x = SIZE - (right - left) / 2 - left + rng.integers(-8, 9)
    y = SIZE - (bottom - top) / 2 - top + rng.integers(-8, 9)
    draw.text((x, y), char, fill=255, font=font)
    mask = mask.rotate(float(rng.uniform(-30, 30)), resample=Image.Resampling.BILINEAR)
    mask = mask.crop((SIZE // 2, SIZE // 2, SIZE // 2 + SIZE, SIZE // 2 + SIZE))
    colour = tuple(int(v) for v in rng.integers(0, 256, 3))
    image = Image.composite(Image.new("RGB", (SIZE, SIZE), colour), background, mask)
    pixels = np.asarray(image, np.float32) + rng.normal(0, 8, (SIZE, SIZE, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _emoji(char: str) -> Image.Image:
    """``char`` as the Noto Color Emoji font draws it, cropped to the drawing (RGBA)."""
    if not EMOJI_FONT.exists():
        raise SystemExit(f"{EMOJI_FONT} is missing; install Debian's fonts-noto-color-emoji")
    font = ImageFont.truetype(str(EMOJI_FONT), 109)
    canvas = Image.new("RGBA", (160, 160), (0, 0, 0, 0))
    ImageDraw.Draw(canvas).text((10, 10), char, font=font, embedded_color=True)
    box = canvas.getbbox()
    if box is None:
        raise SystemExit(f"the font draws nothing for {char!r}")
    return canvas.crop(box)


def drawing(
    drawn: Image.Image, photos: list[Image.Image], rng: np.random.Generator
) -> Image.Image:
    """One image of the emoji ``drawn`` (RGBA): 55 to 90 % of the image's side, turned by up
    to 20° either way, at a random position over a crop of one of ``photos``."""
    background = _crop(photos[int(rng.integers(len(photos)))], rng, 64, 320)
    side = int(SIZE * rng.uniform(0.55, 0.9))
    scale = side / max(drawn.size)
    size = (max(1, round(drawn.width * scale)), max(1, round(drawn.height * scale)))
    item = drawn.resize(size, Image.Resampling.LANCZOS)
    item = item.rotate(float(rng.uniform(-20, 20)), Image.Resampling.BILINEAR, expand=True)
    x = int(rng.integers(min(0, SIZE - item.width), max(0, SIZE - item.width) + 1))
    y = int(rng.integers(min(0, SIZE - item.height), max(0, SIZE - item.height) + 1))
    background.paste(item, (x, y), item)
    pixels = np.asarray(background, np.float32) + rng.normal(0, 4, (SIZE, SIZE, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def write_folder(kind: str, root: Path, per_class: int, seed: int) -> Path:
    """Write the ``kind`` folder (``textures``, ``textures-hard``, ``symbols`` or
    ``drawings``); refuses to write into a folder that is not empty. A ``drawings`` image of a
    category shows one of its emoji drawn at random."""
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root} is not empty; give a new folder")
    rng = np.random.default_rng(seed)
    draws: dict[str, Callable[[], Image.Image]] = {}
    if kind in ("textures", "textures-hard"):
        hard = kind == "textures-hard"
        for name, source in zip(TEXTURES, _grey_sources(), strict=True):
            draws[name] = lambda source=source: texture(source, rng, hard)
    elif kind == "drawings":
        photos = _photographs()
        for name, chars in DRAWINGS.items():
            drawn = [_emoji(c) for c in chars]
            draws[name] = lambda drawn=drawn: drawing(
                drawn[int(rng.integers(len(drawn)))], photos, rng
            )
    else:
        photos = _photographs()
        for name, char in zip(SYMBOL_NAMES, SYMBOLS, strict=True):
            draws[name] = lambda char=char: symbol(char, photos, rng)
    for name, draw in draws.items():
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            draw().save(root / name / f"{i:03d}.png")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("textures", "textures-hard", "symbols", "drawings"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-class", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = write_folder(args.kind, args.out, args.per_class, args.seed)
    classes = sum(1 for _ in root.iterdir())
    print(f"wrote {classes * args.per_class} images in {classes} classes to {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
