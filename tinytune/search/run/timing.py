"""What a fine-tune will take on the run's workers, predicted before it starts.

A candidate's fine-tune is counted in multiply-accumulates per image, read off its traced
training graph (:class:`Work`): the frozen prefix's forward pass, which a worker computes once
for every image of a folder and keeps (:mod:`tinytune.evaluators.prefixes`), so that it is paid
once per prefix, not once per fine-tune; the rest's forward pass, which every validation and
test image takes once; and the rest's training step (forward pass and gradients), which every
training image takes once an epoch.

The learning-rate grid's fine-tunes time the workers (:func:`fit_timing`): each gives a speed,
its work over its seconds less those spent on its prefix (a worker records them), and a grid
fine-tune that computed a prefix gives the prefix's speed. PyTorch on a CPU is several times
slower where the work lies in a network's first layers (large thin tensors, depthwise
convolutions) than in its last blocks, so a candidate's speed is read at its share of the
forward pass that is frozen, interpolated between the grid's (``numpy.interp``): a classifier
alone at 1, a sparse update in between, biases or every weight at 0.

A grid on a subset of a large folder's training images therefore times a fine-tune of all of
them with its prefix counted once. On 20,000 generated images the grid's first classifier-only
fine-tune spent 57.2 of its 57.2 s computing the prefix; scaling the grid's whole time to every
training image had put a classifier-only fine-tune at 271 s (its grid's median, 45 s, over a
sixth of the images), where the one measured took 0.6 s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytune.evaluators.hardware import HardwareEvaluator, frozen_ops
from tinytune.hwmodels.latency import phase_features
from tinytune.ir import Graph
from tinytune.search.run.lr_grid import FAMILIES, StudyRates
from tinytune.spaces import Candidate, default_subnet, make_preset

__all__ = [
    "Deadline",
    "GridTime",
    "Late",
    "Sizes",
    "Timing",
    "Work",
    "family_seconds",
    "fit_timing",
    "grid_timing",
    "kept_prefixes",
    "work",
]


@dataclass(frozen=True)
class Work:
    """Multiply-accumulates per image of a candidate's fine-tune.

    Attributes:
        prefix: the frozen prefix's forward pass (computed once per prefix and image).
        measure: the forward pass after it (each validation and test image).
        train: a training step after it: the forward pass and the gradients (each training
            image, each epoch).
    """

    prefix: float
    measure: float
    train: float

    @property
    def frozen_share(self) -> float:
        """The frozen prefix's share of the forward pass (0: nothing frozen, 1: all but the
        classifier, nearly)."""
        whole = self.prefix + self.measure
        return self.prefix / whole if whole > 0 else 0.0


def work(graph: Graph) -> Work:
    """A candidate's :class:`Work`, from its traced training graph: the ops before the first
    that trains or needs a gradient are its frozen prefix."""
    frozen = frozen_ops(graph)
    batch = max(1, graph.tensors[graph.input].shape[0])
    prefix = measure = train = 0.0
    for op in graph.ops:
        phases = phase_features(op, graph)
        forward = float(phases["forward"][0])
        if op.index < frozen:
            prefix += forward
        else:
            measure += forward
            train += sum(float(features[0]) for features in phases.values())
    return Work(prefix / batch, measure / batch, train / batch)


@dataclass(frozen=True)
class Sizes:
    """What a measured fine-tune trains and measures: the training images, the validation and
    test images, the epochs and the train/validation partitions (each trains and measures)."""

    train: int
    measure: int
    epochs: int
    repeats: int = 1

    @property
    def images(self) -> int:
        """Every image a frozen prefix is computed for."""
        return self.train + self.measure


@dataclass(frozen=True)
class GridTime:
    """One timed fine-tune of the grid: its candidate's work, the training images it trained
    on, its seconds in the worker and those spent on its frozen prefix, and whether it
    computed the prefix (else it read it, or waited for the worker that computed it)."""

    work: Work
    train_images: int
    seconds: float
    prefix_s: float = 0.0
    prefix_computed: bool = False


@dataclass(frozen=True)
class Timing:
    """The run's workers' speeds (multiply-accumulates per second), at the frozen shares the
    grid's fine-tunes had, and of computing a frozen prefix; and what a measured fine-tune
    trains and measures."""

    shares: tuple[float, ...]
    speeds: tuple[float, ...]
    prefix_speed: float
    sizes: Sizes

    def speed(self, share: float) -> float:
        """The speed of a fine-tune whose frozen share is ``share``."""
        return float(np.interp(share, self.shares, self.speeds))

    def seconds(self, w: Work, new_prefix: bool = True) -> float:
        """A measured fine-tune's predicted seconds: training and measuring, and with
        ``new_prefix`` computing its frozen prefix for every image."""
        s = self.sizes
        macs = s.repeats * (s.epochs * s.train * w.train + s.measure * w.measure)
        seconds = macs / self.speed(w.frozen_share)
        if new_prefix and w.prefix > 0:
            seconds += s.images * w.prefix / self.prefix_speed
        return seconds


def fit_timing(times: Sequence[GridTime], sizes: Sizes) -> Timing | None:
    """The speeds the grid's fine-tunes (``times``, of the epochs and partitions of
    ``sizes``) show: at each frozen share the median of theirs; a prefix's the
    slowest of those that computed one, else (every prefix read from an earlier run's cache)
    the speed at the smallest share. None where no fine-tune was timed."""
    by_share: dict[float, list[float]] = {}
    prefix_speeds = []
    for t in times:
        w = t.work
        trained = sizes.epochs * t.train_images * w.train
        macs = sizes.repeats * (trained + sizes.measure * w.measure)
        busy = t.seconds - t.prefix_s
        if busy <= 0 or macs <= 0:
            continue
        by_share.setdefault(round(w.frozen_share, 6), []).append(macs / busy)
        if w.prefix > 0 and t.prefix_computed and t.prefix_s > 0:
            prefix_speeds.append(sizes.images * w.prefix / t.prefix_s)
    if not by_share:
        return None
    shares = tuple(sorted(by_share))
    speeds = tuple(statistics.median(by_share[share]) for share in shares)
    prefix_speed = min(prefix_speeds) if prefix_speeds else speeds[0]
    return Timing(shares, speeds, prefix_speed, sizes)


def _representative(family: str, hardware: HardwareEvaluator) -> Work:
    spec = hardware.spec
    candidate = make_preset(FAMILIES[family].preset, spec, default_subnet(spec))
    return work(hardware.cost_with_graph(candidate)[1])


def grid_timing(rates: StudyRates, hardware: HardwareEvaluator, sizes: Sizes) -> Timing | None:
    """The workers' speeds the learning-rate grid's fine-tunes show (each family's
    representative preset on the default sub-network, on the grid's share of the training
    images), for measured fine-tunes of ``sizes``; None where none was timed."""
    times = []
    train_images = round(sizes.train * rates.train_fraction)
    for rate in rates.rates:
        w = _representative(rate.family, hardware)
        prefixes = rate.prefix or ((0.0, False),) * len(rate.tried)
        for (*_, seconds), (prefix_s, computed) in zip(rate.tried, prefixes, strict=True):
            times.append(GridTime(w, train_images, seconds, prefix_s, computed))
    return fit_timing(times, sizes)


def family_seconds(
    timing: Timing, families: Sequence[str], hardware: HardwareEvaluator
) -> dict[str, float]:
    """A measured fine-tune's predicted seconds by family: its representative preset on the
    default sub-network, with a frozen prefix of its own to compute (as a new sub-network's
    fine-tune has)."""
    return {family: timing.seconds(_representative(family, hardware)) for family in families}


def kept_prefixes(rates: StudyRates, hardware: HardwareEvaluator) -> set[tuple[Any, float]]:
    """The frozen prefixes the grid's fine-tunes computed (:class:`Deadline`'s ``kept``)."""
    subnet = default_subnet(hardware.spec)
    return {(subnet, _representative(r.family, hardware).prefix) for r in rates.rates}


@dataclass(frozen=True)
class Late:
    """A fine-tune a run left out because it was predicted to end after the run's deadline:
    the scheme it was proposed with (``full (reference)`` for the reference), its predicted
    seconds, and whether it was one the study measures first (the reference or a baseline
    preset) rather than a proposal of the search."""

    scheme: str
    seconds: float
    opening: bool


class Deadline:
    """The time by which a run's measured fine-tunes are to end, and what each will take.

    Args:
        timing: the workers' speeds (:func:`fit_timing`).
        hardware: traces a candidate's training graph (its :class:`Work`).
        ends: the deadline, on :func:`time.monotonic`'s clock.
        kept: the frozen prefixes already computed, as ``(sub-network, prefix MACs)``: the
            grid's; each fine-tune started adds its own.
    """

    def __init__(
        self,
        timing: Timing,
        hardware: HardwareEvaluator,
        ends: float,
        kept: set[tuple[Any, float]],
    ) -> None:
        self.timing, self.hardware, self.ends, self.kept = timing, hardware, ends, kept

    def _work(self, candidate: Candidate) -> Work:
        return work(self.hardware.cost_with_graph(candidate)[1])

    def seconds(self, candidate: Candidate) -> float:
        """The candidate's measured fine-tune's predicted seconds, its prefix counted where
        no fine-tune before it computed the same."""
        w = self._work(candidate)
        return self.timing.seconds(w, new_prefix=(candidate.subnet, w.prefix) not in self.kept)

    def fits(self, seconds: float) -> bool:
        """Whether a fine-tune of ``seconds`` started now ends by the deadline."""
        return time.monotonic() + seconds <= self.ends

    def started(self, candidate: Candidate) -> None:
        """Note the candidate's fine-tune started: later ones read its prefix."""
        self.kept.add((candidate.subnet, self._work(candidate).prefix))
