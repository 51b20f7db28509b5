"""Tests of tinytune.data: the data set contract, the split, and each data set."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from sklearn.datasets import load_digits

from tinytune.data import (
    DATASET_NAMES,
    DigitsDataset,
    ImageDataset,
    ImageFolderDataset,
    Pixels,
    ProceduralDataset,
    ProceduralTask,
    Split,
    Splits,
    get_dataset,
    stratified_split,
)
from tinytune.errors import DataError

# Colours of the classes of the test image folder, given in sorted class order.
FOLDER_CLASSES = {"apple": (255, 0, 0), "mango": (0, 255, 0), "zebra": (0, 0, 255)}


def write_image_folder(root: Path, images_per_class: int = 5) -> Path:
    """A folder of solid-colour images, one sub-folder per class, created out of sorted order."""
    for name in ("zebra", "apple", "mango"):
        class_dir = root / name
        class_dir.mkdir(parents=True)
        for i in range(images_per_class):
            suffix = ".PNG" if i % 2 else ".png"  # extensions match in any case
            size = (10 + i, 7 + 2 * i)  # any size and aspect ratio
            Image.new("RGB", size, FOLDER_CLASSES[name]).save(class_dir / f"{i}{suffix}", "PNG")
        (class_dir / "notes.txt").write_text("not an image")  # ignored: not an image extension
    return root


def block_mean(x: np.ndarray, factor: int) -> np.ndarray:
    """Downsample ``(N, C, R, R)`` by averaging ``factor x factor`` blocks."""
    x = np.asarray(x)
    n, c, r, _ = x.shape
    return x.reshape(n, c, r // factor, factor, r // factor, factor).mean(axis=(3, 5))


def correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each pair of samples ``a[i]``, ``b[i]``."""
    a, b = np.asarray(a), np.asarray(b)
    a = a.reshape(len(a), -1) - a.reshape(len(a), -1).mean(axis=1, keepdims=True)
    b = b.reshape(len(b), -1) - b.reshape(len(b), -1).mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


# --- the contract, for every data set ------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("folder") / "images")


@pytest.fixture(params=["digits", "procedural", "imagefolder"])
def spec(request: pytest.FixtureRequest, folder: Path) -> str:
    return f"imagefolder:{folder}" if request.param == "imagefolder" else request.param


def test_every_name_is_tested() -> None:
    # series:PATH: tests/data/test_series.py
    assert DATASET_NAMES == (
        "digits",
        "procedural",
        "imagefolder:PATH",
        "series:PATH",
        "audio:PATH",
    )


def test_contract(spec: str) -> None:
    dataset = get_dataset(spec, seed=1)
    assert isinstance(dataset, ImageDataset)
    assert dataset.name == spec
    assert dataset.num_classes == len(dataset.class_names) >= 2
    splits = dataset.load(16)
    assert dataset.load(16) is splits  # cached per resolution
    for split in (splits.train, splits.val, splits.test):
        assert split.x.dtype == np.float32 and split.y.dtype == np.int64
        assert split.x.shape == (len(split), 3, 16, 16)
        x = np.asarray(split.x)
        assert x.dtype == np.float32 and x.shape == split.x.shape
        assert x.min() >= -1.0 and x.max() <= 1.0
        assert np.array_equal(np.unique(split.y), np.arange(dataset.num_classes))
        assert not split.y.flags.writeable
        if isinstance(split.x, Pixels):  # an image folder's: shared bytes, no way to write
            with pytest.raises(TypeError):
                split.x[0] = 0.0  # type: ignore[index]
        else:
            assert not split.x.flags.writeable


def test_deterministic_and_seeded(spec: str) -> None:
    a, b = get_dataset(spec, seed=3).load(8), get_dataset(spec, seed=3).load(8)
    other = get_dataset(spec, seed=4).load(8)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(a, part).x, getattr(b, part).x)
        np.testing.assert_array_equal(getattr(a, part).y, getattr(b, part).y)
    assert not np.array_equal(a.train.x, other.train.x)


def test_split_does_not_depend_on_resolution(spec: str) -> None:
    dataset = get_dataset(spec)
    low, high = dataset.load(8), dataset.load(32)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(low, part).y, getattr(high, part).y)
        # The same sample sits at the same place: its image, shrunk, matches the low one.
        agreement = correlations(getattr(low, part).x, block_mean(getattr(high, part).x, 4))
        assert np.nanmedian(agreement) > 0.8


@pytest.mark.parametrize("resolution", [7, 513, 0, -32, 32.0, True, "32", None])
def test_resolution_out_of_range(resolution: object) -> None:
    with pytest.raises(DataError, match=r"\[8, 512\]") as info:
        get_dataset("procedural").load(resolution)  # type: ignore[arg-type]
    assert repr(resolution) in str(info.value)


@pytest.mark.parametrize("resolution", [8, 512])
def test_resolution_bounds_are_allowed(resolution: int) -> None:
    dataset = ProceduralDataset(num_classes=2, per_class=(1, 1, 1))
    assert dataset.load(resolution).resolution == resolution


# --- get_dataset ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["mnist", "Digits", " digits", "imagefolder", "", 3, None])
def test_unknown_spec_lists_the_allowed_forms(spec: object) -> None:
    with pytest.raises(DataError) as info:
        get_dataset(spec)  # type: ignore[arg-type]
    message = str(info.value)
    assert repr(spec) in message
    assert all(name in message for name in DATASET_NAMES)


def test_imagefolder_spec_needs_a_path() -> None:
    with pytest.raises(DataError, match="imagefolder:PATH"):
        get_dataset("imagefolder:")


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seed(seed: object) -> None:
    with pytest.raises(DataError, match="seed"):
        get_dataset("digits", seed=seed)  # type: ignore[arg-type]


def test_seed_is_kept() -> None:
    assert get_dataset("digits", seed=7).seed == 7


# --- Split and Splits ----------------------------------------------------------------------


def make_split(n: int = 4, resolution: int = 8) -> Split:
    return Split(np.zeros((n, 3, resolution, resolution), np.float32), np.zeros(n, np.int64))


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.zeros((4, 3, 8, 8), np.float64), np.zeros(4, np.int64)),  # x not float32
        (np.zeros((4, 1, 8, 8), np.float32), np.zeros(4, np.int64)),  # not 3 channels
        (np.zeros((4, 3, 8, 9), np.float32), np.zeros(4, np.int64)),  # not square
        (np.zeros((4, 3, 8, 8), np.float32), np.zeros(4, np.int32)),  # y not int64
        (np.zeros((4, 3, 8, 8), np.float32), np.zeros(3, np.int64)),  # lengths differ
        (np.full((4, 3, 8, 8), 1.5, np.float32), np.zeros(4, np.int64)),  # out of [-1, 1]
        (np.full((4, 3, 8, 8), np.nan, np.float32), np.zeros(4, np.int64)),  # not a number
        (np.zeros((4, 3, 8, 8), np.float32), np.full(4, -1, np.int64)),  # negative label
        ([[0.0]], np.zeros(1, np.int64)),  # not an array
    ],
)
def test_split_rejects_malformed_arrays(x: object, y: object) -> None:
    with pytest.raises(DataError, match="Split"):
        Split(x, y)  # type: ignore[arg-type]


def test_split_does_not_freeze_the_callers_array() -> None:
    x = np.zeros((2, 3, 8, 8), np.float32)
    split = Split(x, np.zeros(2, np.int64))
    x[0, 0, 0, 0] = 0.5  # the caller's array stays writable ...
    assert split.x[0, 0, 0, 0] == 0.5  # ... and is not copied
    with pytest.raises(ValueError, match="read-only"):
        split.x[0, 0, 0, 0] = 0.0
    assert len(split) == 2 and split.resolution == 8


def test_splits_share_one_resolution() -> None:
    with pytest.raises(DataError, match="resolution"):
        Splits(train=make_split(), val=make_split(resolution=16), test=make_split())
    with pytest.raises(DataError, match="Split"):
        Splits(train=make_split(), val=make_split(), test=None)  # type: ignore[arg-type]


# --- stratified_split ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=3, max_value=60), min_size=1, max_size=8),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_stratified_split_partitions_every_class_60_20_20(counts: list[int], seed: int) -> None:
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(counts)), counts))
    parts = stratified_split(labels, seed)
    everything = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(everything), np.arange(len(labels)))  # a partition
    for part, fraction in zip(parts, (0.6, 0.2, 0.2), strict=True):
        assert part.dtype == np.int64
        per_class = np.bincount(labels[part], minlength=len(counts))
        assert np.all(per_class >= 1)
        assert np.all(np.abs(per_class - fraction * np.array(counts)) <= 1.0)
    for part, again in zip(parts, stratified_split(labels, seed), strict=True):
        np.testing.assert_array_equal(part, again)


def test_stratified_split_depends_on_the_seed() -> None:
    labels = np.repeat(np.arange(4), 20)
    assert not np.array_equal(stratified_split(labels, 0)[0], stratified_split(labels, 1)[0])


def test_stratified_split_needs_three_per_class() -> None:
    with pytest.raises(DataError, match=r"\{1: 2\}.*at least 3"):
        stratified_split(np.array([0, 0, 0, 1, 1]), 0)


# --- digits --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    bunch = load_digits()
    return bunch.images, bunch.target


def test_digits_are_the_sklearn_digits(sklearn_digits: tuple[np.ndarray, np.ndarray]) -> None:
    images, target = sklearn_digits
    dataset = DigitsDataset(seed=2)
    splits = dataset.load(8)
    assert dataset.num_classes == 10 and dataset.class_names[3] == "3"
    for split, idx in zip(
        (splits.train, splits.val, splits.test), stratified_split(target, 2), strict=True
    ):
        np.testing.assert_array_equal(split.y, target[idx])
        expected = (images[idx] / 16.0 * 2.0 - 1.0).astype(np.float32)  # 0..16 -> [-1, 1]
        for channel in range(3):
            np.testing.assert_array_equal(split.x[:, channel], expected)
    assert len(splits.train) + len(splits.val) + len(splits.test) == len(target) == 1797


def test_digits_upsampled_keep_the_original(sklearn_digits: tuple[np.ndarray, np.ndarray]) -> None:
    images, target = sklearn_digits
    splits = DigitsDataset(seed=0).load(32)
    idx = stratified_split(target, 0)[2]
    shrunk = block_mean(splits.test.x, 4)[:, 0]  # (N, 8, 8)
    assert np.all(correlations(shrunk, images[idx]) > 0.9)


def test_digits_split_proportions(sklearn_digits: tuple[np.ndarray, np.ndarray]) -> None:
    _, target = sklearn_digits
    splits = DigitsDataset(seed=5).load(8)
    totals = np.bincount(target)
    parts = (splits.train, splits.val, splits.test)
    for split, fraction in zip(parts, (0.6, 0.2, 0.2), strict=True):
        assert np.all(np.abs(np.bincount(split.y, minlength=10) - fraction * totals) <= 1.0)


# --- procedural ----------------------------------------------------------------------------


def test_procedural_batch_is_determined_by_its_inputs() -> None:
    task = ProceduralTask(num_classes=12, seed=0)
    x, y = task.batch(16, 24, np.random.default_rng(5))
    assert x.shape == (16, 3, 24, 24) and x.dtype == np.float32
    assert y.shape == (16,) and y.dtype == np.int64
    assert x.min() >= -1.0 and x.max() <= 1.0 and y.min() >= 0 and y.max() < 12
    again = ProceduralTask(num_classes=12, seed=0).batch(16, 24, np.random.default_rng(5))
    np.testing.assert_array_equal(x, again[0])
    np.testing.assert_array_equal(y, again[1])
    assert not np.array_equal(x, task.batch(16, 24, np.random.default_rng(6))[0])


def test_procedural_task_seed_defines_the_classes() -> None:
    labels = np.arange(12)
    a, _ = ProceduralTask(12, seed=0).render(labels, 16, np.random.default_rng(0))
    b, _ = ProceduralTask(12, seed=1).render(labels, 16, np.random.default_rng(0))
    assert ProceduralTask(12, seed=0).class_names != ProceduralTask(12, seed=1).class_names
    assert not np.array_equal(a, b)


def test_procedural_classes_are_distinct_combinations() -> None:
    task = ProceduralTask(num_classes=200, seed=0)
    assert len(set(task.class_names)) == 200


def test_procedural_scene_does_not_depend_on_resolution() -> None:
    task = ProceduralTask(num_classes=40, seed=0)
    low, _ = task.render(np.arange(40), 16, np.random.default_rng(1))
    high, _ = task.render(np.arange(40), 64, np.random.default_rng(1))
    assert np.median(correlations(low, block_mean(high, 4))) > 0.8


def test_procedural_classes_are_learnable() -> None:
    """Nearest class mean on raw pixels, fitted and scored on fresh samples, beats chance."""
    task = ProceduralTask(num_classes=10, seed=0)
    x, y = task.render(np.repeat(np.arange(10), 30), 16, np.random.default_rng(1))
    means = np.stack([x[y == c].mean(axis=0).ravel() for c in range(10)])  # (10, D)
    x_new, y_new = task.batch(300, 16, np.random.default_rng(2))
    distances = ((x_new.reshape(300, 1, -1) - means[None]) ** 2).sum(axis=-1)  # (300, 10)
    accuracy = (distances.argmin(axis=1) == y_new).mean()
    assert accuracy > 0.3  # chance is 0.1


def test_procedural_empty_batch() -> None:
    x, y = ProceduralTask(2).batch(0, 8, np.random.default_rng(0))
    assert x.shape == (0, 3, 8, 8) and y.shape == (0,)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ProceduralTask(num_classes=1), "num_classes"),
        (lambda: ProceduralTask(num_classes=10_000), "num_classes"),
        (lambda: ProceduralTask(seed=-1), "seed"),
        (lambda: ProceduralTask().batch(-1, 8, np.random.default_rng()), "n must"),
        (lambda: ProceduralTask().batch(4, 8, 0), "Generator"),  # type: ignore[arg-type]
        (lambda: ProceduralTask().batch(4, 4, np.random.default_rng()), "resolution"),
        (lambda: ProceduralTask(3).render([0, 3], 8, np.random.default_rng()), r"\[0, 2\]"),
        (lambda: ProceduralTask(3).render([0.5], 8, np.random.default_rng()), "ints"),
        (lambda: ProceduralDataset(per_class=(5, 0, 5)), "per_class"),
    ],
)
def test_procedural_bad_arguments(call: object, match: str) -> None:
    with pytest.raises(DataError, match=match):
        call()  # type: ignore[operator]


def test_procedural_dataset_sizes() -> None:
    dataset = get_dataset("procedural")
    assert dataset.num_classes == 10
    splits = dataset.load(8)
    for split, count in zip((splits.train, splits.val, splits.test), (50, 20, 20), strict=True):
        np.testing.assert_array_equal(np.bincount(split.y), np.full(10, count))


# --- imagefolder ---------------------------------------------------------------------------


def test_imagefolder_classes_labels_and_pixels(folder: Path) -> None:
    dataset = ImageFolderDataset(folder)
    assert dataset.class_names == ("apple", "mango", "zebra")  # sorted, not creation order
    splits = dataset.load(8)
    assert [len(s) for s in (splits.train, splits.val, splits.test)] == [9, 3, 3]
    colours = np.array(list(FOLDER_CLASSES.values()), np.float32) / 127.5 - 1.0  # (3, 3)
    for split in (splits.train, splits.val, splits.test):
        expected = colours[split.y][:, :, None, None]  # solid colour of each image's class
        np.testing.assert_allclose(split.x, np.broadcast_to(expected, split.x.shape), atol=1e-6)


def test_imagefolder_relative_path_gets_an_absolute_name(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder.parent)
    dataset = get_dataset(f"imagefolder:{folder.name}")
    assert dataset.name == f"imagefolder:{folder.resolve()}"
    assert dataset.class_names == ("apple", "mango", "zebra")


def one_line_error_about(path: Path, match: str, call: object) -> None:
    with pytest.raises(DataError, match=match) as info:
        call()  # type: ignore[operator]
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message


def test_imagefolder_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    one_line_error_about(missing, "does not exist", lambda: get_dataset(f"imagefolder:{missing}"))


def test_imagefolder_not_a_directory(tmp_path: Path) -> None:
    file = tmp_path / "file.png"
    file.write_bytes(b"")
    one_line_error_about(file, "not a directory", lambda: ImageFolderDataset(file))


def test_imagefolder_single_class(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    for name in ("mango", "zebra"):
        for path in (root / name).iterdir():
            path.unlink()
        (root / name).rmdir()
    (root / ".hidden").mkdir()  # hidden folders are not classes
    one_line_error_about(
        root, "has 1 class sub-folder.*at least 2", lambda: ImageFolderDataset(root)
    )


def test_imagefolder_too_few_images(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", images_per_class=3)
    (root / "mango" / "0.png").unlink()
    one_line_error_about(
        root, "class 'mango'.* has 2 image.*at least 3", lambda: ImageFolderDataset(root)
    )


def test_imagefolder_corrupt_image(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    corrupt = root / "mango" / "9.png"
    corrupt.write_bytes(b"this is not a png")
    dataset = ImageFolderDataset(root)  # listing does not read the images
    one_line_error_about(corrupt, "cannot read image", lambda: dataset.load(8))


def test_imagefolder_uses_each_image_once(tmp_path: Path) -> None:
    """Copies, links and duplicated sub-folders of an image are left out (else a copy could be
    trained on and its original tested on); so are images below hidden folders."""
    root = write_image_folder(tmp_path / "images")
    originals = {path.read_bytes() for path in root.rglob("*.[pP][nN][gG]")}
    shutil.copytree(root / "apple", root / "apple" / "backup")  # 5 copies
    (root / "mango" / "copy.png").write_bytes((root / "mango" / "2.png").read_bytes())
    (root / "zebra" / "link.png").symlink_to(root / "zebra" / "3.PNG")
    hidden = root / "zebra" / ".thumbnails"
    hidden.mkdir()
    Image.new("RGB", (3, 3), (1, 2, 3)).save(hidden / "small.png")  # not listed: hidden
    dataset = ImageFolderDataset(root)
    assert dataset.copies == 7
    splits = dataset.load(8)
    assert [len(s) for s in (splits.train, splits.val, splits.test)] == [9, 3, 3]
    assert sorted(path.read_bytes() for path in dataset._files) == sorted(originals)
    again = ImageFolderDataset(root).load(8).train.x
    assert np.asarray(dataset.load(8).train.x).tobytes() == np.asarray(again).tobytes()
    assert get_dataset("digits").copies == 0


def test_imagefolder_refuses_one_image_in_two_classes(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    stray = root / "zebra" / "stray.png"
    stray.write_bytes((root / "apple" / "1.PNG").read_bytes())
    one_line_error_about(
        stray,
        r"class 'zebra' has the same bytes as '.*apple/1.PNG' of class 'apple'.*one class",
        lambda: ImageFolderDataset(root),
    )


def test_imagefolder_counts_a_class_without_its_copies(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", images_per_class=3)
    (root / "mango" / "0.png").unlink()
    (root / "mango" / "again.png").write_bytes((root / "mango" / "1.PNG").read_bytes())
    one_line_error_about(
        root,
        "class 'mango'.* has 2 image.* besides copies.*at least 3 different",
        lambda: ImageFolderDataset(root),
    )


# --- check: every file read once, before any training --------------------------------------


def test_check_passes_on_a_good_folder_and_on_built_in_data_sets(folder: Path) -> None:
    dataset = ImageFolderDataset(folder)  # its notes.txt files are not images: never read
    assert dataset.check() is None
    assert dataset.check() is None  # a second call returns at once
    for spec in ("digits", "procedural"):
        assert get_dataset(spec).check() is None


def truncated_png(path: Path) -> None:
    """A PNG whose header is valid but whose pixel data is cut off."""
    Image.new("RGB", (64, 64), (1, 2, 3)).save(path, "PNG")
    path.write_bytes(path.read_bytes()[:60])


@pytest.mark.parametrize(
    ("name", "write", "reason"),
    [
        ("3.png", lambda p: p.write_bytes(np.random.default_rng(0).bytes(512)), "cannot identify"),
        ("3.png", lambda p: p.write_bytes(b""), "cannot identify"),
        ("3.JPG", lambda p: p.write_text("a text file named as a JPEG"), "cannot identify"),
        ("3.png", truncated_png, "truncated|broken|ended|EOF"),
    ],
    ids=["random-bytes", "empty", "text-with-an-image-extension", "truncated"],
)
def test_check_names_an_unreadable_file_and_why(
    tmp_path: Path, name: str, write: object, reason: str
) -> None:
    root = write_image_folder(tmp_path / "images")
    bad = root / "mango" / name
    write(bad)  # type: ignore[operator]
    dataset = ImageFolderDataset(root)  # listing does not read the images
    one_line_error_about(
        bad, f"cannot read image '{re.escape(str(bad))}': .*({reason})", dataset.check
    )
    with pytest.raises(DataError, match="must be an image that Pillow can read") as info:
        dataset.check()  # still fails: only a successful check is remembered
    assert "'.png'" in str(info.value)  # the extensions read as images


def test_check_reads_files_by_extension_only(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images")
    (root / "zebra" / "3.json").write_bytes(b"\x00\x01 not an image")  # not an image extension
    ImageFolderDataset(root).check()


# --- every mode Pillow reads, as the colour it shows -----------------------------------------

GREYS = {"apple": 40, "mango": 128, "zebra": 220}


def _grey(level: int, mode: str, width: int) -> Image.Image:
    """A solid image of the grey ``level`` (0..255), 9 high, in a mode wider than 8 bits."""
    if mode == "I;16":
        return Image.fromarray(np.full((9, width), level * 257, np.uint16))
    if mode == "I":
        return Image.fromarray(np.full((9, width), level * 257, np.int32))
    return Image.fromarray(np.full((9, width), level / 255, np.float32))  # F


@pytest.mark.parametrize(
    ("mode", "suffix"), [("I;16", ".png"), ("I;16", ".tif"), ("I", ".tif"), ("F", ".tif")]
)
def test_imagefolder_scales_wide_samples_instead_of_clipping_them(
    tmp_path: Path, mode: str, suffix: str
) -> None:
    """A 16-bit or float image reads as the grey it shows (Pillow's convert alone clips: a
    16-bit image turned white, a float one black)."""
    for name, level in GREYS.items():
        (tmp_path / name).mkdir()
        for i in range(3):
            _grey(level, mode, 6 + i).save(tmp_path / name / f"{i}{suffix}")
    assert Image.open(tmp_path / "apple" / f"0{suffix}").mode == mode  # stored as written
    splits = ImageFolderDataset(tmp_path).load(8)
    levels = np.array(list(GREYS.values()), np.float32) / 127.5 - 1.0
    for split in (splits.train, splits.val, splits.test):
        expected = levels[split.y][:, None, None, None]
        np.testing.assert_allclose(split.x, np.broadcast_to(expected, split.x.shape), atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "suffix"),
    [("RGBA", ".png"), ("P", ".gif"), ("P", ".png"), ("CMYK", ".tif"), ("LA", ".png")],
)
def test_imagefolder_reads_palette_cmyk_and_alpha_images_as_their_colours(
    tmp_path: Path, mode: str, suffix: str
) -> None:
    colours = (
        {name: (grey,) * 3 for name, grey in GREYS.items()} if mode == "LA" else FOLDER_CLASSES
    )
    for name, colour in colours.items():
        (tmp_path / name).mkdir()
        for i in range(3):
            image = Image.new("RGB", (5 + i, 11), colour).convert(mode)
            image.save(tmp_path / name / f"{i}{suffix}")
    assert Image.open(tmp_path / "apple" / f"0{suffix}").mode == mode
    splits = ImageFolderDataset(tmp_path).load(8)
    expected_colours = np.array(list(colours.values()), np.float32) / 127.5 - 1.0  # (3, 3)
    for split in (splits.train, splits.val, splits.test):
        expected = expected_colours[split.y][:, :, None, None]
        np.testing.assert_allclose(split.x, np.broadcast_to(expected, split.x.shape), atol=1e-6)


def test_wide_samples_outside_their_nominal_range_span_black_to_white() -> None:
    from tinytune.data.imagefolder import _to_rgb

    ramp = np.linspace(-3.0, 5.0, 5, dtype=np.float32)[None, :]  # (1, 5): a float image
    assert np.asarray(_to_rgb(Image.fromarray(ramp)))[0, :, 0].tolist() == [0, 64, 128, 191, 255]
    wide = np.array([[0, 70000, 140000]], np.int32)  # 32-bit samples beyond 16 bits
    assert np.asarray(_to_rgb(Image.fromarray(wide)))[0, :, 1].tolist() == [0, 128, 255]
