"""What a fine-tune will take, predicted from the learning-rate grid's fine-tunes: its work in
multiply-accumulates per image, the workers' speed at its frozen share, its prefix once."""

from __future__ import annotations

import pytest

from tinytune.evaluators import EvaluationResult, HardwareConfig, HardwareEvaluator
from tinytune.search.run.lr_grid import FamilyRate, StudyRates, choose
from tinytune.search.run.timing import GridTime, Sizes, Work, fit_timing, work
from tinytune.spaces import default_subnet, get_supernet, make_preset

SPEC = get_supernet("ofa-proxyless-w0.35")
HW = HardwareEvaluator(SPEC, 10, HardwareConfig())


def _graph(preset: str):
    return HW.cost_with_graph(make_preset(preset, SPEC, default_subnet(SPEC)))[1]


def test_work_splits_the_forward_pass_where_the_prefix_ends() -> None:
    for preset in ("last", "mcunetv3", "bias-only", "full"):
        graph = _graph(preset)
        w = work(graph)
        # every op's forward pass is either the prefix's or measured after it
        assert w.prefix + w.measure == pytest.approx(graph.total_macs())
        assert w.train >= w.measure
    full = work(_graph("full"))
    assert full.prefix == 0.0 and full.frozen_share == 0.0
    # the classifier alone: its forward pass and its weight gradient, C_in x classes each
    last = work(_graph("last"))
    linear = _graph("last").ops[-1]
    assert linear.kind == "linear" and last.measure == linear.macs
    assert last.train == 2 * linear.macs
    assert last.frozen_share == pytest.approx(1 - linear.macs / _graph("last").total_macs())
    sparse = work(_graph("mcunetv3"))
    assert 0.0 < sparse.frozen_share < last.frozen_share


# two grid fine-tunes of 2 epochs on 100 images, 200 validation and test images:
# at share 0, 2 x 100 x 3e6 + 200 x 1e6 = 8e8 MACs in 0.8 s: 1e9 MAC/s;
# at share 0.5, 2 x 100 x 2e6 + 200 x 1e6 = 6e8 MACs in 1.2 - 1.0 s: 3e9 MAC/s, and its prefix
# computed for 400 + 200 images in 1.0 s: 600 x 1e6 / 1.0 = 6e8 MAC/s
SIZES = Sizes(train=400, measure=200, epochs=2)
GRID = [
    GridTime(Work(0.0, 1e6, 3e6), 100, 0.8),
    GridTime(Work(1e6, 1e6, 2e6), 100, 1.2, prefix_s=1.0, prefix_computed=True),
]


def test_a_fine_tune_is_timed_at_the_speed_of_its_frozen_share_and_its_prefix_once() -> None:
    timing = fit_timing(GRID, SIZES)
    assert timing is not None
    assert timing.shares == (0.0, 0.5)
    assert timing.speeds == pytest.approx((1e9, 3e9))
    assert timing.prefix_speed == pytest.approx(6e8)
    # share 1e6 / 4e6 = 0.25: 2e9 MAC/s halfway; 2 x 400 x 6e6 + 200 x 3e6 = 5.4e9 MACs
    candidate = Work(1e6, 3e6, 6e6)
    assert candidate.frozen_share == 0.25
    assert timing.seconds(candidate, new_prefix=False) == pytest.approx(2.7)
    # and its prefix computed for the 600 images: 600 x 1e6 / 6e8 = 1 s
    assert timing.seconds(candidate) == pytest.approx(3.7)
    # beyond the grid's shares, the nearest one's speed
    assert timing.speed(0.9) == pytest.approx(3e9)


def test_a_grid_on_a_subset_counts_the_prefix_once_not_once_per_share_of_the_images() -> None:
    """A classifier's grid fine-tune on a quarter of the training images that spent 45 of its
    46 s computing the prefix of every image: a fine-tune of all of them is its 1 s of
    training and measuring, scaled, not 46 s over a quarter."""
    sizes = Sizes(train=400, measure=200, epochs=8)
    classifier = Work(1e7, 1e4, 2e4)
    grid = [GridTime(classifier, 100, 46.0, prefix_s=45.0, prefix_computed=True)]
    timing = fit_timing(grid, sizes)
    assert timing is not None
    # 8 x 100 x 2e4 + 200 x 1e4 = 1.8e7 MACs in 1 s; all: 8 x 400 x 2e4 + 2e6 = 6.6e7
    assert timing.seconds(classifier, new_prefix=False) == pytest.approx(6.6e7 / 1.8e7)
    assert timing.seconds(classifier) == pytest.approx(6.6e7 / 1.8e7 + 45.0)
    assert timing.seconds(classifier) < 46.0 / 0.25 / 3  # not 184 s


def test_a_prefix_read_from_an_earlier_runs_cache_times_nothing() -> None:
    """Read or waited for, a prefix's seconds are not the time to compute one: where none was
    computed, a new prefix is priced at the speed of the grid's smallest share."""
    read = [GRID[0], GridTime(Work(1e6, 1e6, 2e6), 100, 0.21, prefix_s=0.01)]
    timing = fit_timing(read, SIZES)
    assert timing is not None and timing.prefix_speed == timing.speeds[0] == pytest.approx(1e9)
    assert fit_timing([GridTime(Work(0.0, 1e6, 3e6), 100, 0.0)], SIZES) is None


def test_the_grid_keeps_each_fine_tunes_prefix_with_the_study() -> None:
    results = {
        0.8: EvaluationResult(
            "ok", 0.5, 0.6, 56.0, details={"prefix_s": 45.0, "prefix_computed": True}
        ),
        1.6: EvaluationResult("ok", 0.5, 0.7, 0.2, details={"prefix_s": 0.01}),
        3.2: EvaluationResult.failed("boom", 3.0),
    }
    rate = choose("classifier", results, 0.1)
    assert rate.lr == 1.6
    assert rate.prefix == ((45.0, True), (0.01, False), (0.0, False))
    rates = StudyRates((rate,), train_fraction=0.25)
    assert StudyRates.from_json(rates.to_json()) == rates
    # a study stored before the prefixes were recorded reads without them
    old = {"classifier": {"lr": 1.6, "tried": [[1.6, 0.7, 0.5, 2.0]]}}
    assert StudyRates.from_json(old) == StudyRates(
        (FamilyRate("classifier", 1.6, ((1.6, 0.7, 0.5, 2.0),)),)
    )
