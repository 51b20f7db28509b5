"""Pixels: 8-bit images that read as the float32 array they stand for, by any index."""

from __future__ import annotations

import numpy as np
import pytest

from tinytune.data import Pixels, Split, Splits, repeated, train_subset
from tinytune.data.splits import TO_FLOAT
from tinytune.errors import DataError

STORAGE = np.random.default_rng(0).integers(0, 256, (12, 5, 5, 3), dtype=np.uint8)
ROWS = np.array([3, 1, 4, 1, 5, 9, 2, 6])


def as_floats(storage: np.ndarray) -> np.ndarray:
    """The conversion the image folder made before it kept bytes."""
    return storage.transpose(0, 3, 1, 2).astype(np.float32) / 127.5 - 1.0


def test_the_table_holds_the_conversion_of_every_byte() -> None:
    every = np.arange(256, dtype=np.uint8)
    assert TO_FLOAT.tobytes() == (every.astype(np.float32) / 127.5 - 1.0).tobytes()
    assert TO_FLOAT[0] == -1.0 and TO_FLOAT[255] == 1.0


@pytest.mark.parametrize(
    "key",
    [
        slice(None),
        slice(2, 6),
        slice(None, None, -3),
        0,
        -1,
        np.int64(2),
        [1, 7, 1],
        np.array([6, 0]),
        np.array([[0, 1], [2, 3]]),
        np.array([True, False] * 4),
        (slice(None), 1),
        (2, 0, 1),
        (slice(0, 4), slice(None), 0, slice(1, 3)),
        (np.array([0, 1]), 2),
        (np.array([0, 1]), np.array([2, 0])),  # arrays that index together
        (Ellipsis, 0),
        (slice(None), None),
    ],
)
def test_indexing_returns_what_the_float_array_returns(key: object) -> None:
    pixels = Pixels(STORAGE, ROWS)
    expected = as_floats(STORAGE)[ROWS][key]  # type: ignore[index]
    got = pixels[key]
    assert isinstance(got, np.ndarray)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_it_looks_like_the_float_array_and_converts_as_one() -> None:
    pixels = Pixels(STORAGE, ROWS, key="k")
    floats = as_floats(STORAGE)[ROWS]
    assert (pixels.shape, pixels.dtype, pixels.ndim, pixels.size, len(pixels)) == (
        floats.shape,
        floats.dtype,
        4,
        floats.size,
        8,
    )
    assert np.asarray(pixels).tobytes() == floats.tobytes()
    assert np.array(pixels, dtype=np.float64).dtype == np.float64
    assert np.array_equal(pixels, floats)
    with pytest.raises(ValueError, match="new float32 array"):
        np.asarray(pixels, copy=False)
    with pytest.raises(TypeError):
        pixels[0] = 0.0  # type: ignore[index]
    assert not pixels.storage.flags.writeable and not pixels.index.flags.writeable
    assert np.asarray(Pixels(STORAGE)).tobytes() == as_floats(STORAGE).tobytes()  # all rows


def test_subsets_and_joins_are_views_of_one_storage() -> None:
    a, b = Pixels(STORAGE, ROWS[:5], "k"), Pixels(STORAGE, ROWS[5:], "k")
    joined = Pixels.concatenate(a, b)
    assert joined.storage is a.storage
    assert np.asarray(joined).tobytes() == as_floats(STORAGE)[ROWS].tobytes()
    taken = joined.take(np.array([7, 0, 0]))
    assert taken.storage is a.storage and taken.index.tolist() == [6, 3, 3]
    with pytest.raises(DataError, match="different storages"):
        Pixels.concatenate(a, Pixels(STORAGE.copy(), ROWS))


@pytest.mark.parametrize(
    ("storage", "index", "match"),
    [
        (STORAGE.astype(np.float32), None, "uint8 array of shape"),
        (STORAGE[:, :, :4], None, "uint8 array of shape"),
        (STORAGE[..., :2], None, "uint8 array of shape"),
        (STORAGE, np.array([0, 12]), "out of range for 12"),
        (STORAGE, np.array([-1]), "out of range"),
        (STORAGE, np.array([0.5]), "1-D integers"),
    ],
)
def test_bad_storage_or_rows_are_refused(
    storage: np.ndarray, index: np.ndarray | None, match: str
) -> None:
    with pytest.raises(DataError, match=match):
        Pixels(storage, index)


def test_splits_of_pixels_repeat_and_subset_as_float_splits_do() -> None:
    """Repeats and training subsets of an image folder's splits are the same images as those
    of the float arrays, and stay views of the storage."""
    y = np.arange(12, dtype=np.int64) % 3
    parts = (np.arange(0, 6), np.arange(6, 9), np.arange(9, 12))
    floats = as_floats(STORAGE)
    as_pixels = Splits(*(Split(Pixels(STORAGE, i, "k"), y[i]) for i in parts))
    as_arrays = Splits(*(Split(floats[i], y[i]) for i in parts))
    for make in (lambda s: repeated(s, 2, 0), lambda s: train_subset(s, 0.5, 1)):
        a, b = make(as_pixels), make(as_arrays)
        for part in ("train", "val", "test"):
            pa, pb = getattr(a, part), getattr(b, part)
            assert isinstance(pa.x, Pixels) and np.shares_memory(pa.x.storage, STORAGE)
            assert np.asarray(pa.x).tobytes() == pb.x.tobytes()
            assert np.array_equal(pa.y, pb.y)
