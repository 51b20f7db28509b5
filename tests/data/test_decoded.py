"""An image folder decoded once per resolution into the on-disk cache: hits and misses, the
key, atomic files, the same bits as decoding every image into float32 at once, one decode for
every resolution asked, the one rule for unreadable files, and bounded memory."""

from __future__ import annotations

import os
import re
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.data.test_data import one_line_error_about, write_image_folder
from tinytune.data import DecodeProgress, ImageFolderDataset, Pixels, Splits, decoded_root
from tinytune.data import imagefolder as imagefolder_module
from tinytune.data.decoded import DECODING_VERSION, FORMAT_VERSION, content_key
from tinytune.data.stratify import stratified_split
from tinytune.errors import DataError


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of this test's own, so that every test starts without decoded files."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TINYTUNE_CACHE", str(cache))
    return cache


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every image file the image folder opens, in order."""
    seen: list[Path] = []
    real = Image.open

    def counting(path: object, *args: object, **kwargs: object) -> Image.Image:
        seen.append(Path(str(path)))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(imagefolder_module.Image, "open", counting)
    return seen


def eager_splits(dataset: ImageFolderDataset, resolution: int) -> list[np.ndarray]:
    """The float32 arrays of the train, val and test splits as the image folder built them
    before it had a cache: every image decoded, resized, stacked and converted at once."""
    out = []
    for idx in stratified_split(dataset._labels, dataset.seed):
        pixels = []
        for i in idx:
            with Image.open(dataset._files[i]) as image:
                rgb = imagefolder_module._to_rgb(image)
            resized = rgb.resize((resolution, resolution), Image.Resampling.BILINEAR)
            pixels.append(np.asarray(resized))
        x = np.stack(pixels).transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0
        out.append(np.ascontiguousarray(x))
    return out


def mixed_folder(root: Path) -> Path:
    """Three classes of images in many modes, sizes and formats, with noise, so that resizing
    and every mode's conversion show in the pixels."""
    rng = np.random.default_rng(7)
    modes = [
        ("RGB", ".png"),
        ("RGBA", ".png"),
        ("P", ".gif"),
        ("CMYK", ".tif"),
        ("L", ".jpg"),
        ("RGB", ".jpeg"),
        ("I;16", ".png"),
        ("F", ".tif"),
        ("LA", ".png"),
        ("1", ".bmp"),
    ]
    for c, name in enumerate(("cat", "dog", "owl")):
        (root / name).mkdir(parents=True)
        for i, (mode, suffix) in enumerate(modes):
            h, w = 5 + 3 * i, 31 - 2 * i + c
            rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            if mode == "I;16":
                image = Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))
            elif mode == "F":
                image = Image.fromarray(rng.random((h, w), dtype=np.float32))
            else:
                image = Image.fromarray(rgb).convert(mode)
            image.save(root / name / f"{i}{suffix}")
    return root


def _decoded_files(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "decoded").rglob("*") if p.is_file())


# --- the same bits as decoding everything into float32 at once ------------------------------


@pytest.mark.parametrize("resolution", [8, 37])
def test_splits_are_bit_identical_to_the_eager_float_arrays(
    tmp_path: Path, resolution: int
) -> None:
    dataset = ImageFolderDataset(mixed_folder(tmp_path / "images"), seed=3)
    assert {Image.open(p).mode for p in dataset._files} >= {"RGBA", "P", "CMYK", "I;16", "F"}
    splits = dataset.load(resolution)
    for split, expected in zip(
        (splits.train, splits.val, splits.test), eager_splits(dataset, resolution), strict=True
    ):
        assert isinstance(split.x, Pixels)
        assert split.x.shape == expected.shape and split.x.dtype == expected.dtype
        assert np.asarray(split.x).tobytes() == expected.tobytes()
        assert split.x[:].tobytes() == expected.tobytes()  # a slice converts the same way


# --- hits and misses -------------------------------------------------------------------------


def test_a_second_load_reads_no_image(
    tmp_path: Path, _private_cache: Path, opened: list[Path]
) -> None:
    root = write_image_folder(tmp_path / "images")
    first = ImageFolderDataset(root).load(16)
    assert len(opened) == 15  # each image once
    assert _decoded_files(_private_cache) == [".lock", "16px.uint8", "source.json"]
    del opened[:]
    again = ImageFolderDataset(root).load(16)  # another instance: another process, or run
    assert opened == []
    for part in ("train", "val", "test"):
        a, b = getattr(first, part), getattr(again, part)
        assert np.asarray(a.x).tobytes() == np.asarray(b.x).tobytes()
    ImageFolderDataset(root).load(24)  # a new resolution is a miss
    assert len(opened) == 15


def test_check_decodes_each_file_once_for_every_resolution_and_reports(
    tmp_path: Path, opened: list[Path]
) -> None:
    root = write_image_folder(tmp_path / "images")
    dataset = ImageFolderDataset(root)
    steps: list[DecodeProgress] = []
    dataset.check([48, 16, 32, 16], steps.append)
    assert sorted(opened) == sorted(dataset._files)  # once each, for three resolutions
    assert [s.done for s in steps] == list(range(1, 16))
    assert {(s.total, s.reused, s.folder) for s in steps} == {(15, False, dataset.decoded.folder)}
    assert dataset.decoded.folder.parent == decoded_root()
    del opened[:], steps[:]
    fresh = ImageFolderDataset(root)
    fresh.check([16, 32, 48], steps.append)  # all there: one report, nothing read
    assert opened == [] and steps == [DecodeProgress(15, 15, fresh.decoded.folder, True)]
    for r in (16, 32, 48):
        fresh.load(r)
    assert opened == []


def test_another_pillow_decodes_into_another_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pillow's resize moved between versions (13 runs a tall image's vertical pass first):
    pixels decoded by one version are never read as another's."""
    import PIL

    entries = [("a", "a/1.png", "0" * 64)]
    mine = content_key(entries)
    monkeypatch.setattr(PIL, "__version__", "12.1.1")
    assert content_key(entries) != mine


def test_the_key_follows_the_files_not_the_folders_place(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "a")

    def key() -> str:
        return ImageFolderDataset(root).decoded.key

    first = key()
    assert first == key()
    copy = tmp_path / "elsewhere" / "b"
    copy.parent.mkdir()
    os.rename(root, copy)  # the same files in another place (a copy shipped to another node)
    assert ImageFolderDataset(copy).decoded.key == first
    os.rename(copy, root)
    keys = {first}
    image = root / "mango" / "2.png"
    Image.new("RGB", (9, 9), (1, 2, 3)).save(image)  # other bytes
    keys.add(key())
    image.rename(root / "mango" / "2b.png")  # renamed
    keys.add(key())
    Image.new("RGB", (4, 4), (9, 9, 9)).save(root / "apple" / "new.png")  # added
    keys.add(key())
    assert len(keys) == 4
    # the key's recipe: the versions, then every (class, path, SHA-256) in order
    assert FORMAT_VERSION >= 1 and DECODING_VERSION >= 1
    assert content_key([("a", "a/1.png", "00")]) != content_key([("a", "a/1.png", "01")])


# --- whole files only ------------------------------------------------------------------------


def test_a_stale_temporary_file_or_a_short_file_is_never_read(
    tmp_path: Path, opened: list[Path]
) -> None:
    root = write_image_folder(tmp_path / "images")
    dataset = ImageFolderDataset(root)
    folder = dataset.decoded.folder
    folder.mkdir(parents=True)
    stale = folder / ".16px.uint8.killed.tmp"  # what a writer killed midway leaves
    stale.write_bytes(b"\x07" * 100)
    expected = eager_splits(dataset, 16)
    splits = dataset.load(16)
    assert not stale.exists()  # removed by the next writer
    assert np.asarray(splits.train.x).tobytes() == expected[0].tobytes()
    del opened[:]
    path = dataset.decoded.path(16)
    path.write_bytes(path.read_bytes()[:-1])  # a file of the wrong size: decoded again
    again = ImageFolderDataset(root).load(16)
    assert len(opened) == 15
    assert path.stat().st_size == 15 * 16 * 16 * 3
    assert np.asarray(again.test.x).tobytes() == expected[2].tobytes()


def test_two_loaders_at_once_decode_once(tmp_path: Path, opened: list[Path]) -> None:
    """Writers of one key take turns: the second finds the first's file and reads no image."""
    root = write_image_folder(tmp_path / "images")
    datasets = [ImageFolderDataset(root) for _ in range(2)]
    results: list[Splits] = []
    start = threading.Barrier(2)

    def load(dataset: ImageFolderDataset) -> None:
        start.wait()
        results.append(dataset.load(24))

    threads = [threading.Thread(target=load, args=(d,)) for d in datasets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and len(opened) == 15
    assert np.asarray(results[0].val.x).tobytes() == np.asarray(results[1].val.x).tobytes()


# --- the one rule for unreadable files -------------------------------------------------------


def test_unreadable_files_refuse_the_folder_before_anything_is_cached(
    tmp_path: Path, _private_cache: Path, opened: list[Path]
) -> None:
    root = write_image_folder(tmp_path / "images", images_per_class=8)
    bad = [root / "apple" / "2.png", root / "mango" / "5.PNG", root / "zebra" / "7.PNG"]
    for i, path in enumerate(bad):
        path.write_bytes(b"not an image %d" % i)
    dataset = ImageFolderDataset(root)
    steps: list[DecodeProgress] = []
    pattern = (
        f"cannot read image '{re.escape(str(bad[0]))}': cannot identify.*; 2 more unreadable: "
        f"'{re.escape(str(bad[1]))}', '{re.escape(str(bad[2]))}'; every file of an image "
        "folder .* must be an image that Pillow can read .*refused before anything is decoded"
    )
    one_line_error_about(bad[0], pattern, lambda: dataset.check([16, 32], steps.append))
    assert len(opened) == 24 and steps[-1].done == 24  # the whole pass, to count them all
    assert _decoded_files(_private_cache) == [".lock"]  # no decoded file, no temporary one
    one_line_error_about(bad[0], "cannot read image", lambda: dataset.load(16))


def test_many_unreadable_files_are_counted_and_the_first_named(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", images_per_class=8)
    for i, path in enumerate(sorted((root / "zebra").glob("*.[pP][nN][gG]"))):
        path.write_bytes(b"%d" % i)
    with pytest.raises(DataError, match=r"7 more unreadable: .* and 2 more; every") as info:
        ImageFolderDataset(root).check([8])
    assert "\n" not in str(info.value)


def test_a_cache_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_image_folder(tmp_path / "images")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TINYTUNE_CACHE", str(blocker))  # a file where the folder should be
    with pytest.raises(
        DataError, match=r"cannot write decoded images under .*TINYTUNE_CACHE"
    ) as e:
        ImageFolderDataset(root).load(16)
    assert str(blocker) in str(e.value) and "\n" not in str(e.value)


def test_a_disk_without_room_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[Path]
) -> None:
    import shutil

    from tinytune.data import decoded

    root = write_image_folder(tmp_path / "images")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(decoded.shutil, "disk_usage", lambda _: usage._replace(free=1000))
    need = 15 * (64 * 64 + 16 * 16) * 3
    with pytest.raises(DataError) as e:
        ImageFolderDataset(root).check([64, 16])
    assert (f"decoding 15 images at 16, 64 px needs {need / 1024:.1f} KB under ") in str(e.value)
    assert "and 256 MB left free beside them, and 1000 B is free" in str(e.value)
    assert "TINYTUNE_CACHE" in str(e.value) and "\n" not in str(e.value)
    assert opened == []


# --- bounded memory ---------------------------------------------------------------------------


def _tiny_folder(root: Path, n: int) -> Path:
    """``n`` tiny images in 4 classes."""
    rng = np.random.default_rng(0)
    for i in range(n):
        folder = root / f"c{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.png")
    return root


def test_a_folder_loads_and_is_read_without_its_float_array(tmp_path: Path) -> None:
    """3,000 images at 96 px are 332 MB as float32: the splits, their repeats and subsets, and
    a pass over every batch of 64 allocate one batch's floats and bytes at a time (numpy's
    allocations, traced: 7 + 1.8 MB), not the whole array."""
    import sklearn.model_selection  # noqa: F401  (imported before tracing: train_subset's)

    from tinytune.data import repeated, train_subset

    n, r = 3000, 96
    dataset = ImageFolderDataset(_tiny_folder(tmp_path / "images", n))
    dataset.check([r])
    float_bytes = n * 3 * r * r * 4
    tracemalloc.start()
    try:
        splits = dataset.load(r)
        parts = [repeated(splits, 2, 0), train_subset(splits, 0.5, 0)]
        seen = 0
        for s in (splits, *parts):
            for split in (s.train, s.val, s.test):
                for i in range(0, len(split), 64):
                    seen += len(split.x[i : i + 64])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen > 2 * n
    batch_bytes = 64 * 3 * r * r * 4
    assert peak < 1.25 * batch_bytes + (1 << 20) < float_bytes / 30, (peak, batch_bytes)


def test_a_folder_is_hashed_once_per_process_unless_a_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front door, the preflight and an evaluation in the same process each list the
    folder; each file is read for its SHA-256 once between them. A changed file is read
    again, and the folder's key follows it."""
    from tests.search.fakes import search_config
    from tinytune.data import get_dataset
    from tinytune.evaluators import task as task_module
    from tinytune.search.run.preflight import preflight

    read: list[Path] = []
    real = imagefolder_module.sha256_file

    def counting(path: Path) -> str:
        read.append(path)
        return real(path)

    monkeypatch.setattr(imagefolder_module, "sha256_file", counting)
    monkeypatch.setattr(imagefolder_module, "_digests", {})
    monkeypatch.setattr(task_module, "_datasets", {})
    monkeypatch.setattr(task_module, "_splits", {})
    root = write_image_folder(tmp_path / "images")
    spec = f"imagefolder:{root}"
    first = get_dataset(spec)  # the front door counts the classes
    config = search_config(tmp_path / "w.pt", dataset=spec, n_classes=3)
    preflight(config, None)
    task_module._data(spec, 0, 32)  # an evaluation in this process (an inline run)
    assert sorted(read) == sorted(first._files)  # 15 files, read once each
    changed = first._files[0]
    Image.new("RGB", (9, 9), (1, 2, 3)).save(changed)
    again = get_dataset(spec)
    assert read[15:] == [changed]
    assert again.decoded.key != first.decoded.key
