"""The benchmark's image folders of other kinds than the letters (``bench/folders.py``): ten
classes each, as ``--dataset imagefolder:PATH`` reads them, the same bytes for a seed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench.folders import DRAWINGS, EMOJI_FONT, SIZE, write_folder
from tinytune.data import get_dataset


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.png")):
        h.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("kind", ["textures", "textures-hard", "symbols"])
def test_a_folder_has_ten_classes_of_images_and_is_the_same_for_a_seed(
    kind: str, tmp_path: Path
) -> None:
    root = write_folder(kind, tmp_path / "a", per_class=3, seed=0)
    classes = sorted(p.name for p in root.iterdir())
    assert len(classes) == 10 and all(len(list((root / c).glob("*.png"))) == 3 for c in classes)
    image = Image.open(next(root.rglob("*.png")))
    assert image.size == (SIZE, SIZE) and image.mode == "RGB"
    pixels = np.asarray(image)
    assert pixels.std() > 5  # not a blank image
    assert _digest(write_folder(kind, tmp_path / "b", per_class=3, seed=0)) == _digest(root)
    assert _digest(write_folder(kind, tmp_path / "c", per_class=3, seed=1)) != _digest(root)
    data = get_dataset(f"imagefolder:{root}")
    assert data.num_classes == 10


@pytest.mark.skipif(not EMOJI_FONT.exists(), reason="Debian's fonts-noto-color-emoji is missing")
def test_the_drawings_show_one_of_their_categorys_emoji_in_colour(tmp_path: Path) -> None:
    root = write_folder("drawings", tmp_path / "a", per_class=3, seed=0)
    assert sorted(p.name for p in root.iterdir()) == sorted(DRAWINGS)
    assert min(len(chars) for chars in DRAWINGS.values()) >= 14
    every = "".join(DRAWINGS.values())  # one code point a drawing, each in one category
    assert len(set(every)) == len(every)
    image = np.asarray(Image.open(next(root.rglob("*.png"))))
    assert image.shape == (SIZE, SIZE, 3) and image.std() > 5
    assert _digest(write_folder("drawings", tmp_path / "b", per_class=3, seed=0)) == _digest(root)
    assert get_dataset(f"imagefolder:{root}").num_classes == len(DRAWINGS)


def test_the_hard_textures_have_more_pixel_noise_than_the_textures(tmp_path: Path) -> None:
    def noise(kind: str) -> float:
        """The median over a folder's images of the spread of a pixel's difference from its
        right-hand neighbour (grey levels)."""
        root = write_folder(kind, tmp_path / kind, per_class=4, seed=0)
        spreads = []
        for path in root.rglob("*.png"):
            grey = np.asarray(Image.open(path).convert("L"), np.float32)
            spreads.append(float(np.diff(grey, axis=1).std()))
        return float(np.median(spreads))

    # σ 20 against σ 6 of noise: a neighbour's difference carries √2 of each
    assert noise("textures-hard") > 1.5 * noise("textures")


def test_a_folder_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("mine")
    with pytest.raises(SystemExit, match="is not empty"):
        write_folder("textures", tmp_path, per_class=1, seed=0)
    assert (tmp_path / "kept.txt").read_text() == "mine"
