"""The fine-tuning learning rate of each scheme family, chosen on the validation split.

How large a step suits a fine-tune depends on what it trains: a classifier alone on frozen
features wants a rate several times that of a network trained in full (MCUNetV3 tunes its rate
per setting, §4 "Training details"). Candidates are therefore grouped into families by what they
train (:func:`family_of`), and before a study measures any candidate it fine-tunes each
family's representative preset at each rate of the family's grid (:data:`FAMILIES`, rates a
factor of two apart), with the study's epochs, batch size and seed. The rate with the best
validation accuracy (the smaller one on a tie) is the family's rate for the whole study; the
test accuracy of the grid is stored beside it and never used to choose. The choice is stored
with the study (its user attribute ``lr_calibration``), so that later runs and other drivers
reuse it, and the grid's fine-tunes are counted and shown as the study's calibration cost; the
representative's fine-tune at the chosen rate is the measurement of that preset when the study
measures it.

A data set of more than :data:`GRID_TRAIN_IMAGES` training images has its grid trained on a
stratified subset of :data:`GRID_SUBSET_IMAGES` of them (:func:`grid_fraction`; validated on
the whole validation split): twelve fine-tunes of a 12,000-image training split would cost as
much as twelve measured candidates. Its fine-tunes are then not measurements of the presets,
which the study measures in full; they time the run's workers
(:mod:`~tinytune.search.run.timing`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinytune.evaluators import EvaluationResult
from tinytune.spaces import Candidate, SupernetSpec, conv_kinds, default_subnet, make_preset

if TYPE_CHECKING:
    from tinytune.evaluators import HardwareCost
    from tinytune.search.config.search_config import SearchConfig
    from tinytune.search.execution.worker_tasks import Tasks

__all__ = [
    "FAMILIES",
    "GRID_SUBSET_IMAGES",
    "GRID_TRAIN_IMAGES",
    "PREFIXED",
    "Family",
    "FamilyRate",
    "StudyRates",
    "choose",
    "families_needed",
    "family_of",
    "grid_fraction",
    "grid_order",
    "longest_first",
    "rates_for_study",
]


@dataclass(frozen=True)
class Family:
    """A group of candidates that train the same kind of parameters.

    Attributes:
        name: ``classifier``, ``bias``, ``sparse`` or ``full``.
        preset: the preset whose fine-tunes choose the family's rate.
        grid: the learning rates tried, a factor of two apart.
    """

    name: str
    preset: str
    grid: tuple[float, ...]


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("classifier", "last", (0.8, 1.6, 3.2)),
        Family("bias", "bias-only", (0.8, 1.6, 3.2)),
        Family("sparse", "mcunetv3", (0.8, 1.6, 3.2)),
        Family("full", "full", (0.4, 0.8, 1.6)),
    )
}
"""The families and their grids for batches of 32, centred on the rates that did best on
``digits``' validation split with the shipped supernet over a wider grid at batch 16, doubled
with the batch (linear scaling; docs/bench/pretraining.md)."""


PREFIXED = ("classifier", "sparse")
"""The families whose preset trains on a frozen prefix, computed once for every image of a
folder and read by the family's other fine-tunes (:func:`grid_order`)."""

GRID_TRAIN_IMAGES = 2_000
"""The largest training split the grid trains on whole: within it the grid's fine-tunes are
measurements of the presets."""

GRID_SUBSET_IMAGES = 500
"""Beyond :data:`GRID_TRAIN_IMAGES`, the stratified subset of the training images that chooses
the rates: twelve fine-tunes of it cost a little more than one of 6,000 images."""


def grid_fraction(train_images: int) -> float:
    """The share of ``train_images`` training images a fine-tune of the grid trains on: all
    of them up to :data:`GRID_TRAIN_IMAGES`, else :data:`GRID_SUBSET_IMAGES` of them (0
    images: all)."""
    if train_images <= GRID_TRAIN_IMAGES:
        return 1.0
    return GRID_SUBSET_IMAGES / train_images


def family_of(candidate: Candidate, spec: SupernetSpec) -> str:
    """The family of a candidate: ``full`` when every convolution's weight is trained whole,
    ``sparse`` when some weights are trained (in part) or lite residual branches are added,
    ``bias`` when biases or scales are trained besides the classifier, else ``classifier``."""
    update = candidate.update
    n_convs = len(conv_kinds(spec, candidate.subnet))
    if len(update.weights) == n_convs and all(ratio == 1.0 for _, ratio in update.weights):
        return "full"
    if update.weights or candidate.lite_residual.branches:
        return "sparse"
    if update.bias_last_k or update.norm:
        return "bias"
    return "classifier"


@dataclass(frozen=True)
class FamilyRate:
    """The rate chosen for one family, and every rate tried.

    Attributes:
        family: the family's name.
        lr: the chosen rate (best validation accuracy; the smaller rate on a tie).
        tried: ``(lr, val_accuracy, test_accuracy, wall_time_s)`` of each fine-tune of the
            grid; a failed one has ``None`` accuracies.
        prefix: ``(seconds, computed)`` of each fine-tune's frozen prefix, in the order of
            ``tried``: the seconds spent getting its outputs, and whether it computed them
            (:class:`~tinytune.evaluators.FinetuneResult`; empty in a study stored before
            they were recorded).
    """

    family: str
    lr: float
    tried: tuple[tuple[float, float | None, float | None, float], ...]
    prefix: tuple[tuple[float, bool], ...] = ()

    @property
    def val_accuracy(self) -> float | None:
        return next((val for lr, val, _, _ in self.tried if lr == self.lr), None)

    @property
    def test_accuracy(self) -> float | None:
        return next((test for lr, _, test, _ in self.tried if lr == self.lr), None)


@dataclass(frozen=True)
class StudyRates:
    """The study's rate per family (what :func:`choose` made of a grid's results), and the
    share of the training images the grid trained on (:func:`grid_fraction`)."""

    rates: tuple[FamilyRate, ...]
    train_fraction: float = 1.0

    def lr(self, family: str, default: float) -> float:
        return next((r.lr for r in self.rates if r.family == family), default)

    @property
    def fine_tunes(self) -> int:
        return sum(len(r.tried) for r in self.rates)

    @property
    def wall_time_s(self) -> float:
        return sum(s for r in self.rates for *_, s in r.tried)

    def to_json(self) -> dict[str, Any]:
        subset = {"train_fraction": self.train_fraction} if self.train_fraction < 1.0 else {}
        return {
            r.family: {
                "lr": r.lr,
                "tried": [list(t) for t in r.tried],
                **({"prefix": [list(p) for p in r.prefix]} if r.prefix else {}),
                **subset,
            }
            for r in self.rates
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudyRates:
        fractions = [float(entry.get("train_fraction", 1.0)) for entry in data.values()]
        return cls(
            tuple(
                FamilyRate(
                    family,
                    float(entry["lr"]),
                    tuple((float(a), b, c, float(d)) for a, b, c, d in entry["tried"]),
                    tuple((float(t), bool(c)) for t, c in entry.get("prefix", ())),
                )
                for family, entry in data.items()
            ),
            min(fractions, default=1.0),
        )


def choose(family: str, results: Mapping[float, EvaluationResult], default: float) -> FamilyRate:
    """The family's rate from its grid's worker results (``lr -> result``): the best
    validation accuracy, the smaller rate on a tie; ``default`` when every fine-tune failed."""
    tried, prefix = [], []
    for lr in sorted(results):
        result = results[lr]
        ok = result.status == "ok"
        tried.append(
            (
                lr,
                result.val_accuracy if ok else None,
                result.accuracy if ok else None,
                result.wall_time_s,
            )
        )
        details = result.details
        prefix.append((float(details.get("prefix_s", 0.0)), bool(details.get("prefix_computed"))))
    scored = [(val, -lr) for lr, val, _, _ in tried if val is not None]
    lr = -max(scored)[1] if scored else default
    return FamilyRate(family, lr, tuple(tried), tuple(prefix))


def families_needed(config: SearchConfig, spec: SupernetSpec) -> list[str]:
    """The families a study's candidates can fall in: every family, or, with a preset, the
    preset's family and (for the reference) ``full``."""
    if config.preset is None:
        return list(FAMILIES)
    needed = [family_of(make_preset(config.preset, spec), spec)]
    if config.reference and "full" not in needed:
        needed.append("full")
    return needed


def longest_first(step_s: Mapping[int, float]) -> list[int]:
    """The grid's jobs in the order they are submitted: the longest predicted training step
    first (LPT scheduling). The grid ends when its last fine-tune does; started first, the
    slow fine-tunes (full, then bias-only, whose backward pass crosses every layer) overlap
    each other and the short ones fill the workers' gaps at the end. A fine-tune's time on the
    host follows the device's predicted step latency (docs/bench/workers.md); ties keep the
    families' order."""
    return sorted(step_s, key=lambda key: -step_s[key])


def grid_order(
    family: Mapping[int, str], step_s: Mapping[int, float], prefixed: Collection[str] = ()
) -> list[int]:
    """The grid's jobs (``family``: each one's family, in the families' order) in the order
    they are submitted: longest predicted training step first (:func:`longest_first`), except
    that the fine-tunes of the ``prefixed`` families (whose preset trains on a frozen prefix)
    come after the others, one of each such family at a time. A family's first fine-tune
    computes the frozen prefix of every image of a folder, which its other two then read: the
    prefixes of two families are computed side by side, not one family's by one worker while
    another waits for it."""
    plain = {k: s for k, s in step_s.items() if family[k] not in prefixed}
    rounds: dict[int, dict[int, float]] = {}
    seen: dict[str, int] = {}
    for key in family:
        if family[key] in prefixed:
            n = seen[family[key]] = seen.get(family[key], -1) + 1
            rounds.setdefault(n, {})[key] = step_s[key]
    return longest_first(plain) + [k for n in sorted(rounds) for k in longest_first(rounds[n])]


def rates_for_study(
    tasks: Tasks,
    config: SearchConfig,
    spec: SupernetSpec,
    hardware: Callable[[Candidate], HardwareCost],
    watch: Callable[[], None],
    stored: Mapping[str, Any] | None,
    train_images: int = 0,
) -> tuple[StudyRates, dict[tuple[str, float], EvaluationResult] | None]:
    """The study's rate per family: ``stored`` by an earlier run (the study's attribute
    ``lr_calibration``), else measured now on the run's executor (every fine-tune of the grids
    at once, as slots free up, in :func:`grid_order`);
    the caller stores what was measured.

    Args:
        tasks: runs the grid's fine-tunes on the run's executor.
        hardware: predicts a candidate's cost (its step latency orders the grid).
        watch: called between waits (the run fails the trials of drivers that died).
        train_images: the data set's training images (:func:`grid_fraction`; 0: all).

    Returns:
        The rates, and this run's grid results at each family's chosen rate by ``(candidate
        key, lr)``, so that a preset measured later at its family's rate is told the grid's
        result, not fine-tuned again (empty when the grid trained on a subset; None when an
        earlier run chose the rates).
    """
    if stored:
        return StudyRates.from_json(stored), None
    fraction = grid_fraction(train_images)
    jobs: dict[int, tuple[str, float, Candidate]] = {}
    step_s: dict[int, float] = {}
    for name in families_needed(config, spec):
        candidate = make_preset(FAMILIES[name].preset, spec, default_subnet(spec))
        predicted = float(hardware(candidate).latency_s or 0.0)
        for lr in FAMILIES[name].grid:
            key = tasks.next_key()
            jobs[key], step_s[key] = (name, lr, candidate), predicted
    family = {key: name for key, (name, _, _) in jobs.items()}
    queue, running = grid_order(family, step_s, PREFIXED), 0
    results: dict[int, EvaluationResult] = {}
    executor = tasks.executor
    tasks.emit("calibrating", done=0, total=len(jobs))
    while queue or running:
        while queue and running < executor.slots:
            key = queue.pop(0)
            _, lr, candidate = jobs[key]
            task = tasks.task(candidate, lr)
            if fraction < 1.0:
                task = task.replace(train_fraction=fraction)
            executor.submit(key, task)
            running += 1
        for key, result in executor.wait(timeout=1.0):
            results[key] = result
            running -= 1
            tasks.emit("calibrating", done=len(results), total=len(jobs))
        watch()
    rates = []
    for name in dict.fromkeys(name for name, _, _ in jobs.values()):
        grid = {lr: results[key] for key, (n, lr, _) in jobs.items() if n == name}
        rates.append(choose(name, grid, config.finetune.lr))
    chosen = {r.family: r.lr for r in rates}
    cache = {(c.key, lr): results[key] for key, (n, lr, c) in jobs.items() if lr == chosen[n]}
    return StudyRates(tuple(rates), fraction), cache if fraction == 1.0 else {}
