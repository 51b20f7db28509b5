"""Stroke glyphs and the mixed pre-training source task."""

from __future__ import annotations

import numpy as np
import pytest

from tinytune.data import GlyphTask, SourceTask
from tinytune.errors import DataError


def test_glyph_batches_are_seeded_and_in_range() -> None:
    task = GlyphTask(20, seed=3)
    x1, y1 = task.batch(32, 24, np.random.default_rng(7))
    x2, y2 = task.batch(32, 24, np.random.default_rng(7))
    assert x1.shape == (32, 3, 24, 24) and x1.dtype == np.float32
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert x1.min() >= -1.0 and x1.max() <= 1.0
    assert y1.dtype == np.int64 and y1.min() >= 0 and y1.max() < 20


def test_glyph_classes_are_distinct_and_learnable() -> None:
    task = GlyphTask(10, seed=0)
    rng = np.random.default_rng(0)
    x, y = task.render(np.repeat(np.arange(10), 30), 24, rng)
    xt, yt = task.render(np.repeat(np.arange(10), 10), 24, rng)
    ink = x.mean(axis=1).reshape(len(x), -1)  # grey level, (n, R·R)
    means = np.stack([ink[y == c].mean(0) for c in range(10)])
    test = xt.mean(axis=1).reshape(len(xt), -1)
    pred = ((test[:, None] - means[None]) ** 2).sum(-1).argmin(1)
    assert (pred == yt).mean() > 0.3  # chance is 0.1


def test_glyph_labels_are_checked() -> None:
    with pytest.raises(DataError):
        GlyphTask(5).render([5], 16, np.random.default_rng(0))
    with pytest.raises(DataError):
        GlyphTask(1)


def test_source_task_mixes_both_kinds() -> None:
    task = SourceTask(80, seed=0)
    x, y = task.batch(200, 16, np.random.default_rng(1))
    assert x.shape == (200, 3, 16, 16)
    assert (y < 40).any() and (y >= 40).any() and y.max() < 80
    x2, y2 = task.batch(200, 16, np.random.default_rng(1))
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
