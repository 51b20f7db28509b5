"""The formula-driven source task: IFS sampling and rendering, contours, the batch contract."""

from __future__ import annotations

import numpy as np
import pytest

from tinytune.data.formula import (
    MAX_MAPS,
    FormulaTask,
    render_contours,
    render_ifs,
    sample_contour_params,
    sample_ifs,
)
from tinytune.data.sources import get_source_task
from tinytune.errors import DataError


@pytest.fixture(scope="module")
def task() -> FormulaTask:
    return FormulaTask(num_classes=24, seed=3, per_class=2, max_resolution=32)


@pytest.mark.parametrize("n_maps", range(2, MAX_MAPS + 1))
def test_sampled_ifs_maps_are_contractive_with_the_sigma_factor_in_range(n_maps: int) -> None:
    rng = np.random.default_rng(n_maps)
    for _ in range(20):
        linear, shift = sample_ifs(rng, n_maps)
        assert linear.shape == (n_maps, 2, 2) and shift.shape == (n_maps, 2)
        sigma = np.linalg.svd(linear, compute_uv=False)  # (N, 2), descending
        assert (sigma < 1.0).all() and (sigma > 0.0).all()
        alpha = (sigma[:, 0] + 2.0 * sigma[:, 1]).sum()
        assert (5 + n_maps) / 2 - 1e-9 <= alpha <= (6 + n_maps) / 2 + 1e-9
        assert (np.abs(shift) <= 1.0).all()


def test_sample_ifs_rejects_a_bad_number_of_maps() -> None:
    with pytest.raises(DataError, match="n_maps"):
        sample_ifs(np.random.default_rng(0), 1)


def test_the_sierpinski_ifs_renders_the_sierpinski_triangle() -> None:
    # f_k(x) = x/2 + v_k/2 for v in (0,0), (1,0), (0,1): the attractor fills the unit square's
    # lower-left triangle, and on a 16×16 grid the cell (i, j) holds attractor points exactly
    # when i & j == 0 (binary digits of x and y are never both 1).
    linear = np.tile(0.5 * np.eye(2), (1, 3, 1, 1))  # (1, 3, 2, 2)
    shift = np.array([[[0.0, 0.0], [0.5, 0.0], [0.0, 0.5]]])
    image = render_ifs(linear, shift, resolution=18, points=20_000, seed=0, burn_in=24)[0]
    cells = image[1:17, 1:17]  # rows: y (j), columns: x (i); a one-pixel margin around
    i, j = np.meshgrid(np.arange(16), np.arange(16))
    sierpinski = (i & j) == 0
    assert cells[sierpinski].all()
    assert not cells[i + j >= 17].any()  # beyond the hypotenuse, more than a cell away
    assert not image[0].any() and not image[-1].any()
    assert not image[:, 0].any() and not image[:, -1].any()


def test_render_ifs_is_deterministic_per_seed() -> None:
    rng = np.random.default_rng(0)
    linear, shift = sample_ifs(rng, 3)
    a = render_ifs(linear[None], shift[None], 32, 4000, seed=5)
    b = render_ifs(linear[None], shift[None], 32, 4000, seed=5)
    assert a.shape == (1, 32, 32) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 1.0}


def test_contours_are_masks_in_range() -> None:
    rng = np.random.default_rng(1)
    masks = render_contours(sample_contour_params(rng), 3, 32, rng)
    assert masks.shape == (3, 32, 32) and masks.dtype == np.float32
    assert masks.min() >= 0.0 and masks.max() == 1.0


def test_batch_contract(task: FormulaTask) -> None:
    for resolution in (16, 24, 32):
        x, y = task.batch(10, resolution, np.random.default_rng(0))
        assert x.shape == (10, 3, resolution, resolution) and x.dtype == np.float32
        assert y.shape == (10,) and y.dtype == np.int64
        assert x.min() >= -1.0 and x.max() <= 1.0
        assert ((y >= 0) & (y < task.num_classes)).all()
    x, y = task.batch(0, 16, np.random.default_rng(0))
    assert x.shape == (0, 3, 16, 16) and y.shape == (0,)


def test_batch_rejects_bad_arguments(task: FormulaTask) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(DataError, match="n must be"):
        task.batch(-1, 16, rng)
    with pytest.raises(DataError, match="exceeds"):
        task.batch(2, 40, rng)
    with pytest.raises(DataError, match="rng must be"):
        task.batch(2, 16, 0)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="resolution"):
        task.batch(2, 4, rng)


def test_classes_are_balanced(task: FormulaTask) -> None:
    rng = np.random.default_rng(1)
    counts = np.bincount(task.labels(2 * task.num_classes, rng), minlength=task.num_classes)
    assert (counts == 2).all()
    counts = np.bincount(task.labels(task.num_classes + 5, rng), minlength=task.num_classes)
    assert set(counts) == {1, 2} and counts.sum() == task.num_classes + 5


def test_every_kind_of_class_is_present(task: FormulaTask) -> None:
    assert sum(task.counts.values()) == task.num_classes
    assert all(n > 0 for n in task.counts.values())
    assert task.base.shape == (task.num_classes, 2, 32, 32) and task.base.dtype == np.uint8
    # every base image draws something, and not everything
    fill = (task.base > 127).mean((2, 3))
    assert (fill > 0.01).all() and (fill < 0.95).all()


def test_same_seed_same_task_other_seed_other_task(task: FormulaTask) -> None:
    again = FormulaTask(num_classes=24, seed=3, per_class=2, max_resolution=32)
    np.testing.assert_array_equal(task.base, again.base)
    a = task.batch(8, 24, np.random.default_rng(7))
    b = again.batch(8, 24, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = task.batch(8, 24, np.random.default_rng(8))
    assert not np.array_equal(a[0], c[0])
    other = FormulaTask(num_classes=24, seed=4, per_class=2, max_resolution=32)
    assert not np.array_equal(task.base, other.base)


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(DataError, match="num_classes"):
        FormulaTask(num_classes=2)
    with pytest.raises(DataError, match="per_class"):
        FormulaTask(num_classes=8, per_class=0)
    with pytest.raises(DataError, match="mix"):
        FormulaTask(num_classes=8, mix=(0.5, 0.5, 0.5, 0.0))


def test_source_tasks_by_name() -> None:
    x, y = get_source_task("formula", 12, 0, 24)(4, 24, np.random.default_rng(0))
    assert x.shape == (4, 3, 24, 24) and y.max() < 12
    x, y = get_source_task("shapes-glyphs", 8, 0, 24)(4, 24, np.random.default_rng(0))
    assert x.shape == (4, 3, 24, 24) and y.max() < 8
    with pytest.raises(DataError, match="allowed: shapes-glyphs, formula"):
        get_source_task("imagenet", 8, 0, 24)
