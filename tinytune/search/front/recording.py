"""Recording: a measured evaluation as a stored record, and the Pareto front of a study's
measured, feasible evaluations as a snapshot with its normalised hypervolume.

Candidates are chosen on the validation split: the front and the hypervolume use validation
accuracy; the test accuracy of each point is stored and shown beside it, never used to choose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from tinytune.db import TWIN_OF, EvaluationRecord, ParetoSnapshot, Store
from tinytune.evaluators import EvaluationResult, HardwareCost
from tinytune.search.config.budgets import Budgets
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.front.pareto import normalised_hypervolume, pareto_front, reference

if TYPE_CHECKING:
    from tinytune.spaces import SubnetConfig

__all__ = [
    "FrontPoint",
    "feasible",
    "hypervolume_history",
    "measured_record",
    "recipe_point",
    "reference_point",
    "snapshot",
    "twin_record",
    "within",
]


@dataclass(frozen=True)
class FrontPoint:
    """A measured, feasible, non-dominated candidate.

    Attributes:
        trial: the Optuna trial that measured it.
        candidate_key: the candidate's stable key (``tinytune.load(...).candidate(key)``).
        val_accuracy: measured accuracy on the validation split (what the front is chosen on).
        test_accuracy: measured accuracy on the held-out test split (reported, never used to
            choose).
        memory_bytes: the SRAM the exported bundle needs on the device: its arena, the
            static data beside it (a keyword model's front-end buffers among them) and its
            stack (:attr:`~tinytune.evaluators.HardwareCost.sram_bytes`).
        flash_bytes: predicted flash (parameters and the training engine's code, and a
            front-end's tables).
        latency_s: predicted latency of one training step on the device (with a keyword
            model's front-end making its sample's input).
        scheme: the preset or ``joint``.
        study: the study that measured it (None for a point made outside a study), so that
            ``tinytune.export_bundle(point, ...)`` finds it when several studies measured the
            same candidate.
    """

    trial: int | None
    candidate_key: str
    val_accuracy: float
    test_accuracy: float | None
    memory_bytes: int
    flash_bytes: int | None
    latency_s: float | None
    scheme: str
    study: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrontPoint:
        """A stored snapshot point."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _cost_details(cost: HardwareCost, latency_profile: str, scheme: str) -> dict[str, Any]:
    """The predicted cost a measured record keeps in its ``details``."""
    memory = cost.memory
    return {
        "flash_bytes": cost.flash_bytes,
        "latency_profile": latency_profile,
        "scheme": scheme,
        "memory_breakdown": memory.breakdown,
        "memory_peak_op": memory.peak_op,
        "memory_peak_phase": memory.peak_phase,
        "memory_live_peak_bytes": memory.peak_bytes,
        "mcunetv3_extra_bytes": memory.mcunetv3_extra_bytes,
        "precision": memory.precision,
    }


def measured_record(
    config: SearchConfig,
    trial: int,
    candidate_key: str,
    cost: HardwareCost,
    latency_profile: str,
    scheme: str,
    result: EvaluationResult,
) -> EvaluationRecord:
    """The stored form of a worker's result (``ok`` or ``failed``) for a measured fine-tune,
    with the cost the driver predicted for it."""
    details = {**_cost_details(cost, latency_profile, scheme), **result.details}
    return EvaluationRecord.of(
        config.study_name,
        candidate_key,
        "measured",
        result,
        trial_number=trial,
        memory_bytes=cost.sram_bytes,
        latency_ms=1000.0 * float(cost.latency_s or 0.0),
        details=details if result.ok else None,
    )


def twin_record(
    config: SearchConfig,
    trial: int,
    candidate_key: str,
    cost: HardwareCost,
    latency_profile: str,
    scheme: str,
    fine_tuned: EvaluationRecord,
) -> EvaluationRecord:
    """The stored form of a schedule twin: the candidate of ``fine_tuned``'s measurement under
    another schedule of its frozen prefix, which computes the same values, so its accuracies
    are that fine-tune's; its cost is its own (``cost``), its wall time none, and its
    ``details`` name the trial whose fine-tune it shares (:data:`tinytune.db.TWIN_OF`), which
    the study's budget of measured fine-tunes does not count."""
    assert fine_tuned.status == "ok" and fine_tuned.val_accuracy is not None
    shared = dict(fine_tuned.details or {})
    original = shared.get(TWIN_OF, fine_tuned.trial_number)
    for name in _cost_details(cost, latency_profile, scheme):
        shared.pop(name, None)  # the worker's details stay: how the fine-tune was made
    result = EvaluationResult(
        "ok",
        accuracy=fine_tuned.accuracy,
        val_accuracy=fine_tuned.val_accuracy,
        details={**shared, TWIN_OF: original},
    )
    return measured_record(config, trial, candidate_key, cost, latency_profile, scheme, result)


def _point(e: EvaluationRecord, scheme: str | None = None) -> FrontPoint:
    return FrontPoint(
        trial=e.trial_number,
        candidate_key=e.candidate_key,
        val_accuracy=float(e.val_accuracy),  # type: ignore[arg-type]
        test_accuracy=e.accuracy,
        memory_bytes=int(e.memory_bytes),  # type: ignore[arg-type]
        flash_bytes=(e.details or {}).get("flash_bytes"),
        latency_s=e.latency_ms / 1000.0 if e.latency_ms is not None else None,
        scheme=scheme or (e.details or {}).get("scheme", "?"),
        study=e.study_name,
    )


def reference_point(store: Store, study_name: str, key: str) -> FrontPoint | None:
    """The study's reference (full fine-tuning of the default sub-network), when measured."""
    e = store.find_evaluation(study_name, key, "measured")
    if e is None or e.val_accuracy is None or e.memory_bytes is None:
        return None
    return _point(e, "full (reference)")


def recipe_point(
    store: Store, study_name: str, budgets: Budgets, subnet: SubnetConfig
) -> FrontPoint | None:
    """The most accurate on validation (of equally accurate ones, the least SRAM) of the
    study's hand-written presets within every budget of ``budgets`` (:func:`within`): a
    baseline preset's scheme (classifier only, bias-only, MCUNetV3's, TinyTL's) on the default
    sub-network ``subnet``, on whole images or patch by patch. What a user who ran the papers'
    recipes alone would have; None where the study measured none within the budgets."""
    from tinytune.search.config.search_config import BASELINE_PRESETS
    from tinytune.spaces import Candidate

    best: FrontPoint | None = None
    for e in store.evaluations(study_name, fidelity="measured", status="ok"):
        if (e.details or {}).get("scheme") not in BASELINE_PRESETS:
            continue
        if not within(budgets, e):
            continue
        record = store.get_candidate(e.candidate_key)
        if record is None or Candidate.from_json(record.payload).subnet != subnet:
            continue  # a preset's rule carried to another sub-network: a mutant
        point = _point(e)
        if best is None or (point.val_accuracy, -point.memory_bytes) > (
            best.val_accuracy,
            -best.memory_bytes,
        ):
            best = point
    return best


def within(budgets: Budgets, e: EvaluationRecord) -> bool:
    """Whether a measured evaluation has its validation accuracy and, as priced, meets every
    budget of ``budgets``."""
    if e.val_accuracy is None or e.memory_bytes is None or e.latency_ms is None:
        return False
    flash = (e.details or {}).get("flash_bytes") or 0
    return all(x <= 0 for x in budgets.exceeded(e.memory_bytes, flash, e.latency_ms / 1000.0))


def feasible(config: SearchConfig, flash_budget: int | None, e: EvaluationRecord) -> bool:
    """Whether a measured evaluation has its validation accuracy and, as priced, meets every
    budget of ``config`` (and ``flash_budget``)."""
    return within(Budgets.of(config, flash_budget), e)


def snapshot(
    config: SearchConfig, store: Store, flash_budget: int | None
) -> tuple[tuple[FrontPoint, ...], float | None]:
    """The Pareto front of the study's measured, feasible evaluations, stored as a snapshot.
    The study's reference is among them when it meets every budget: it is then an option
    like any other.

    The hypervolume is normalised by the reference point (accuracy 0 and each budget; without a
    budget, 10 % beyond the worst value measured so far), so it is the share of that box in
    [0, 1]. The snapshot records the budgets (``sram_bytes``, ``flash_bytes``, ``latency_s``);
    one where no measured candidate meets them is stored with an empty front. A snapshot equal
    to the latest (no evaluation since, the same budgets) is not stored again.
    """
    evaluations = store.evaluations(config.study_name, fidelity="measured", status="ok")
    if not evaluations:
        return (), None
    ok = [e for e in evaluations if feasible(config, flash_budget, e)]
    points: tuple[FrontPoint, ...] = ()
    hv = None
    if ok:  # else no measured candidate meets these budgets: an empty front, stored as such
        measured = [
            (e.val_accuracy, float(e.memory_bytes), e.latency_ms / 1000.0)  # type: ignore[operator]
            for e in ok
        ]
        objectives = [(-a, m, t) for a, m, t in measured]  # all minimised
        front_idx = sorted(pareto_front(objectives), key=lambda i: ok[i].memory_bytes or 0)
        points = tuple(_point(ok[i]) for i in front_idx)
        ref = reference(measured, config.sram_budget_bytes, config.latency_budget_s)
        hv = normalised_hypervolume([measured[i] for i in front_idx], ref)
    budgets = Budgets.of(config, flash_budget).to_stored()
    stored, latest = [asdict(p) for p in points], store.latest_pareto(config.study_name)
    new = (len(evaluations), stored, hv, budgets)
    if (
        latest is None
        or (latest.n_trials, latest.points, latest.hypervolume, latest.budgets) != new
    ):
        # a run that measured nothing under the same budgets adds no copy of the latest
        store.add_pareto_snapshot(
            config.study_name, stored, len(evaluations), hypervolume=hv, budgets=budgets
        )
    return points, hv


def hypervolume_history(
    snapshots: Sequence[ParetoSnapshot], evaluations: Sequence[EvaluationRecord]
) -> list[tuple[int, float]]:
    """``(measured evaluations, hypervolume)`` after each snapshot chosen under the latest
    snapshot's budgets, every front measured against the latest snapshot's reference point
    (accuracy 0, each budget, and 10 % beyond the largest value of ``evaluations``, the
    study's successful measured ones, within them where there is none), so that the last
    value is the hypervolume stored with the latest snapshot and the history rises only when
    the front improves.

    A run under other budgets chose its front from other candidates (a smaller SRAM budget
    drops points), so its snapshots are left out; a front that no candidate made under the
    budgets counts as 0."""
    if not snapshots:
        return []
    budgets = snapshots[-1].budgets
    fronts = []
    for snap in snapshots:
        if snap.budgets != budgets:
            continue
        points = [FrontPoint.from_dict(p) for p in snap.points]
        usable = [
            (p.val_accuracy, p.memory_bytes, p.latency_s)
            for p in points
            if p.val_accuracy is not None and p.latency_s is not None
        ]
        if usable or not points:  # an empty front, or one with the objectives to measure
            fronts.append((snap.n_trials, usable))
    if not any(front for _, front in fronts):
        return [(n, 0.0) for n, _ in fronts]
    limits = Budgets.from_stored(budgets)
    measured = [
        (e.val_accuracy, float(e.memory_bytes), e.latency_ms / 1000.0)
        for e in evaluations
        if within(limits, e)
    ]
    ref = reference(
        measured + [p for _, front in fronts for p in front],
        limits.sram_bytes,
        limits.latency_s,
    )
    return [(n, normalised_hypervolume(front, ref) if front else 0.0) for n, front in fronts]
