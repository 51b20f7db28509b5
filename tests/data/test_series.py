"""``series:PATH``: a sensor's windows or a spectrogram's frames, as a folder of CSV windows
per class or as arrays, split as the image data sets are, each channel standardised with the
training part's statistics alone, read without unpickling anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinytune.data import get_dataset, repeated, train_subset
from tinytune.data.stratify import stratified_split
from tinytune.errors import DataError


def _windows(n_per_class: int = 10, classes: int = 3, shape=(6, 64), seed: int = 0):
    rng = np.random.default_rng(seed)
    scale = 1.0 + np.arange(shape[0])[:, None]  # channels of other ranges
    x = rng.normal(size=(n_per_class * classes, *shape)) * scale + 5.0
    y = np.repeat(np.arange(classes) * 7, n_per_class)  # labels need not be 0..K-1
    return x.astype(np.float32), y


def test_windows_become_c_by_1_by_t_standardised_on_the_training_part(tmp_path: Path) -> None:
    x, y = _windows()
    np.savez(tmp_path / "imu.npz", X=x, y=y)
    data = get_dataset(f"series:{tmp_path / 'imu.npz'}", seed=3)
    assert data.name == f"series:{tmp_path / 'imu.npz'}"
    assert data.input_shape == (6, 1, 64) and data.class_names == ("0", "7", "14")
    splits = data.load(1)
    train_idx, val_idx, test_idx = stratified_split(np.unique(y, return_inverse=True)[1], 3)
    mean = x[train_idx].astype(np.float64).mean(axis=(0, 2))
    std = x[train_idx].astype(np.float64).std(axis=(0, 2))
    assert np.array_equal(data.normalisation[0], mean)
    assert np.array_equal(data.normalisation[1], std)
    expected = ((x[test_idx].astype(np.float64) - mean[:, None]) / std[:, None]).astype(np.float32)
    assert np.array_equal(splits.test.x, expected[:, :, None, :])
    assert np.array_equal(splits.test.y, np.unique(y, return_inverse=True)[1][test_idx])
    assert not splits.train.images and splits.resolution == 1
    assert data.split_sizes() == (len(train_idx), len(val_idx), len(test_idx))
    # the training part is standardised exactly; validation and test only by its statistics
    assert np.allclose(splits.train.x.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    # repeated partitions and training subsets keep them samples, not images
    again = repeated(splits, 1, seed=3)
    assert not again.train.images and not again.val.images
    assert not train_subset(splits, 0.5, seed=0).train.images


def test_a_spectrogram_keeps_its_shape_and_named_classes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12, 1, 49, 10))
    y = np.array([0, 1, 2] * 4)
    np.savez(tmp_path / "kws.npz", X=x, y=y, classes=np.array(["yes", "no", "up"]))
    data = get_dataset(f"series:{tmp_path / 'kws.npz'}")
    assert data.input_shape == (1, 49, 10) and data.class_names == ("yes", "no", "up")
    assert data.load(49).train.x.shape[1:] == (1, 49, 10)
    with pytest.raises(DataError, match=r"not resized; resolution 64 was asked, expected 49"):
        data.load(64)


def test_a_pickled_array_is_refused_unread(tmp_path: Path) -> None:
    x, _ = _windows()
    labels = np.array([object()] * len(x), dtype=object)  # only a pickle holds it
    np.savez(tmp_path / "obj.npz", X=x, y=labels)
    with pytest.raises(DataError) as e:
        get_dataset(f"series:{tmp_path / 'obj.npz'}")
    text = str(e.value)
    assert "object array" in text and "never unpickles" in text and "\n" not in text


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        ({"X": np.zeros((9, 2, 8))}, "has no array 'y'"),
        ({"X": np.zeros((9, 8)), "y": np.zeros(9, int)}, "X must be a real array of shape"),
        ({"X": np.zeros((9, 2, 8)), "y": np.zeros(8, int)}, "y must be 9 integer labels"),
        ({"X": np.full((9, 2, 8), np.nan), "y": np.arange(9) % 3}, "NaN or an infinity"),
        ({"X": np.zeros((9, 2, 8)), "y": np.zeros(9, int)}, "has one class"),
        (
            {"X": np.zeros((9, 2, 8)), "y": np.arange(9) % 3, "classes": np.array(["a", "b"])},
            "classes must be 3 strings",
        ),
        ({"X": np.zeros((4, 2, 8)), "y": np.arange(4) % 2}, "each class needs at least 3"),
    ],
)
def test_bad_arrays_are_refused_in_one_line(tmp_path: Path, arrays: dict, words: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError) as e:
        get_dataset(f"series:{tmp_path / 'bad.npz'}")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_file_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.npz").write_text("X,y\n1,0\n")
    x, y = _windows()
    np.savez(tmp_path / "whole.npz", X=x, y=y)
    whole = (tmp_path / "whole.npz").read_bytes()
    (tmp_path / "torn.npz").write_bytes(whole[: len(whole) // 2])
    for name, words in (
        ("x.npz", "is not a NumPy archive"),
        ("torn.npz", "is not a NumPy archive"),
        ("none.npz", "does not exist"),
    ):
        with pytest.raises(DataError, match=words):
            get_dataset(f"series:{tmp_path / name}")
    with pytest.raises(DataError, match="names no folder or file"):
        get_dataset("series:")


def _csv_folder(root: Path, x: np.ndarray, y: np.ndarray, header: bool = True) -> list[Path]:
    """``x`` (N, C, T) written as one CSV per window (a row per step, a column per channel)
    under a folder per label, in order; the files."""
    files = []
    for i, (window, label) in enumerate(zip(x, y, strict=True)):
        folder = root / f"class-{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"w{i:03d}.csv"
        head = ",".join(f"ch{c}" for c in range(window.shape[0])) + "\n" if header else ""
        rows = "\n".join(",".join(repr(float(v)) for v in row) for row in window.T)
        path.write_text(head + rows + "\n")
        files.append(path)
    return files


def test_a_folder_of_csv_windows_is_the_archive_of_them(tmp_path: Path) -> None:
    x, y = _windows(n_per_class=5, shape=(3, 16))
    _csv_folder(tmp_path / "imu", x, y)
    (tmp_path / "imu" / "class-00" / "notes.txt").write_text("not a window")
    (tmp_path / "imu" / ".cache").mkdir()
    order = np.argsort(y, kind="stable")  # the folder is read class by class, file by file
    np.savez(tmp_path / "imu.npz", X=x[order], y=np.unique(y, return_inverse=True)[1][order])
    folder = get_dataset(f"series:{tmp_path / 'imu'}", seed=2)
    archive = get_dataset(f"series:{tmp_path / 'imu.npz'}", seed=2)
    assert folder.class_names == ("class-00", "class-07", "class-14")  # the folders' names
    assert folder.input_shape == archive.input_shape == (3, 1, 16)
    a, b = folder.load(1), archive.load(1)
    for mine, theirs in zip((a.train, a.val, a.test), (b.train, b.val, b.test), strict=True):
        assert np.array_equal(mine.x, theirs.x) and np.array_equal(mine.y, theirs.y)
    for mine, theirs in zip(folder.normalisation, archive.normalisation, strict=True):
        assert np.array_equal(mine, theirs)
    without = tmp_path / "plain"
    _csv_folder(without, x, y, header=False)
    assert np.array_equal(get_dataset(f"series:{without}", seed=2).load(1).train.x, a.train.x)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda f: f.write_text("a,b\n1,2\n3\n"), "line 3 has 1 values, the rows before it 2"),
        (lambda f: f.write_text("a,b\n1,2\n3,x\n"), "line 3: 'x' is not a number"),
        (lambda f: f.write_text("a,b\n1,2\n"), "holds 1 steps of 2 channels"),
        (lambda f: f.write_text("a,b\n"), "holds no row of numbers"),
        (lambda f: f.write_bytes(b"\xff\xfe\x00"), "cannot be read as CSV text"),
        (lambda f: f.write_text("a,b,c\n" + "1,2,nan\n" * 16), "a NaN or an infinity"),
    ],
)
def test_a_bad_window_is_refused_in_one_line_naming_it(tmp_path: Path, damage, words: str) -> None:
    x, y = _windows(n_per_class=4, shape=(3, 16))
    files = _csv_folder(tmp_path / "imu", x, y)
    damage(files[5])
    with pytest.raises(DataError) as e:
        get_dataset(f"series:{tmp_path / 'imu'}")
    assert "\n" not in str(e.value) and words in str(e.value)
    if "NaN" not in words:
        assert str(files[5]) in str(e.value)


def test_a_folder_without_two_classes_of_windows_is_refused(tmp_path: Path) -> None:
    x, y = _windows(n_per_class=4, classes=1, shape=(3, 16))
    _csv_folder(tmp_path / "one", x, y)
    with pytest.raises(DataError, match="has 1 class folder; a classifier needs two or more"):
        get_dataset(f"series:{tmp_path / 'one'}")
    (tmp_path / "one" / "empty").mkdir()
    with pytest.raises(DataError, match=r"class folder 'empty' holds no \.csv window"):
        get_dataset(f"series:{tmp_path / 'one'}")


def _sourced_folder(root: Path, sources: int, per_source: int, classes: int = 3) -> None:
    """Windows named ``SOURCE_nohash_N.csv``: each source (a machine) ``per_source`` windows of
    every class, with an offset of its own on every channel."""
    rng = np.random.default_rng(4)
    for s in range(sources):
        offset = rng.normal(size=(2, 1)) * 3.0
        for label in range(classes):
            folder = root / f"class-{label}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_source):
                window = rng.normal(size=(2, 16)) + offset + label
                rows = "\n".join(",".join(repr(float(v)) for v in row) for row in window.T)
                (folder / f"machine{s:02d}_nohash_{n}.csv").write_text(rows + "\n")


def test_a_sources_windows_stay_in_one_split_and_its_repeats(tmp_path: Path) -> None:
    """Windows of one machine are never in two of the training, validation and test splits,
    nor in two parts of a repeated partition of a small validation split: the test accuracy is
    that of machines the fine-tune never saw."""
    _sourced_folder(tmp_path / "imu", sources=10, per_source=2)
    data = get_dataset(f"series:{tmp_path / 'imu'}", seed=1)
    sources = np.array(data.sources)
    assert sorted(set(sources)) == [f"machine{s:02d}" for s in range(10)]
    parts = [set(sources[p]) for p in data._parts]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert [len(p) for p in data._parts] == [36, 12, 12]  # 6, 2 and 2 machines of 6 windows
    splits = data.load(1)
    for seed in range(3):
        again = repeated(splits, 1, seed=seed)
        train, val = set(again.train.groups.tolist()), set(again.val.groups.tolist())
        assert not train & val
    # another name than SOURCE_nohash_N: window by window, stratified
    (tmp_path / "imu" / "class-0" / "machine00_nohash_0.csv").rename(
        tmp_path / "imu" / "class-0" / "extra.csv"
    )
    assert get_dataset(f"series:{tmp_path / 'imu'}", seed=1).sources is None


def test_too_few_sources_to_hold_every_class_in_every_split_are_refused(tmp_path: Path) -> None:
    _sourced_folder(tmp_path / "imu", sources=2, per_source=3)
    with pytest.raises(DataError) as e:
        get_dataset(f"series:{tmp_path / 'imu'}")
    assert "2 sources are too few to hold every class in every split (each source's windows " in (
        str(e.value)
    )
