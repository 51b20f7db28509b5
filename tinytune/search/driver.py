"""The search driver: Optuna proposes, workers evaluate, the driver records.

Only the driver talks to the database (Optuna's tables and tinytune's). Each round it asks
Optuna for a trial, samples a candidate define-by-run and predicts its cost on the device: peak
training SRAM with the memory planner (the size of the arena its buffers are laid out in),
flash, and the latency of one training step with the device's latency profile. A candidate over
a budget is told PRUNED without any training; the others go to a worker as plain-dict tasks.
When a result comes back the driver stores the evaluation, tells Optuna (objectives: measured
accuracy ↑, predicted peak SRAM ↓, predicted step latency ↓; going over a budget is a
constraint violation) and snapshots the Pareto front of measured results.

Budgets: ``trials`` counts the study's measured fine-tunes (successful or failed), over all
runs, so a resumed study finishes the budget it started with; ``time_budget_s`` stops new
submissions after that many seconds of this run (running evaluations finish). A candidate
already measured in the study is not trained again: its stored result is told for the new trial.

Resuming: trials that an earlier driver left RUNNING (it crashed or was killed) are marked FAIL
and their parameters enqueued again, so their candidates are evaluated by this run — or, when
the evaluation had been stored before the crash, told from the stored result.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tinytune.db import EvaluationRecord, Store
from tinytune.errors import BudgetError, StorageError
from tinytune.evaluators import FinetuneConfig, HardwareConfig, HardwareCost, HardwareEvaluator
from tinytune.hwmodels.calibration import resolve_device
from tinytune.hwmodels.devices import DeviceProfile
from tinytune.search.executor import Executor
from tinytune.search.pareto import hypervolume, pareto_front
from tinytune.spaces import (
    PRESET_NAMES,
    Candidate,
    SupernetSpec,
    default_subnet,
    get_supernet,
    make_preset,
    subnet_params,
    suggest_candidate,
)

__all__ = [
    "BASELINE_PRESETS",
    "FrontPoint",
    "SearchConfig",
    "SearchResult",
    "check_budgets",
    "check_feasible",
    "run_search",
]

log = logging.getLogger(__name__)

SPACE_ATTR = "tinytune.space"
OBJECTIVES = ("accuracy", "peak_sram_bytes", "latency_s")
DIRECTIONS = ("maximize", "minimize", "minimize")
BASELINE_PRESETS = ("last", "bias-only", "mcunetv3", "tinytl", "full")


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search needs besides its executor."""

    checkpoint: str
    study_name: str = "tinytune"
    supernet: str = "ofa-proxyless-w0.35"
    dataset: str = "digits"
    n_classes: int = 10
    data_seed: int = 0
    preset: str | None = None
    trials: int = 16
    time_budget_s: float | None = None
    device: str = "stm32f746"
    sram_budget_bytes: int | None = 256 * 1024
    flash_budget_bytes: int | None = None
    latency_budget_s: float | None = None
    seed: int = 0
    baselines: bool = True
    max_idle_proposals: int = 200
    resume: bool = False
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise BudgetError(f"--trials must be >= 1, got {self.trials}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise BudgetError(f"--time-budget must be > 0 seconds, got {self.time_budget_s}")
        for what, value in (
            ("SRAM budget", self.sram_budget_bytes),
            ("flash budget", self.flash_budget_bytes),
            ("latency budget", self.latency_budget_s),
        ):
            if value is not None and value <= 0:
                raise BudgetError(f"the {what} must be > 0, got {value}")

    def space(self) -> dict[str, Any]:
        """What makes two runs the same search space (kept with the study)."""
        return {
            "supernet": self.supernet,
            "dataset": self.dataset,
            "data_seed": self.data_seed,
            "preset": self.preset,
            "precision": self.hardware.precision,
            "batch_size": self.hardware.batch_size,
            "device": self.device,
            "objectives": list(OBJECTIVES),
        }


@dataclass(frozen=True)
class FrontPoint:
    """A measured, feasible, non-dominated candidate."""

    trial: int | None
    candidate_key: str
    accuracy: float
    val_accuracy: float | None
    memory_bytes: int
    flash_bytes: int | None
    latency_s: float | None
    scheme: str


@dataclass(frozen=True)
class SearchResult:
    study_name: str
    measured: int
    pruned: int
    failed: int
    reused: int
    wall_time_s: float
    front: tuple[FrontPoint, ...]
    hypervolume: float | None


def _scheme_label(params: dict[str, Any], preset: str | None) -> str:
    return str(preset or params.get("scheme", "joint"))


def _load_study(config: SearchConfig, storage: Any) -> Any:
    import optuna

    sampler = optuna.samplers.TPESampler(
        seed=config.seed,
        constraints_func=lambda ft: ft.user_attrs.get("constraints", [0.0]),
    )
    study = optuna.create_study(
        study_name=config.study_name,
        storage=storage,
        directions=list(DIRECTIONS),
        sampler=sampler,
        load_if_exists=True,
    )
    stored = study.user_attrs.get(SPACE_ATTR)
    if stored is None:
        study.set_user_attr(SPACE_ATTR, config.space())
        study.set_metric_names(list(OBJECTIVES))
        _enqueue_baselines(study, config)
    elif stored != config.space():
        diff = {k: (stored.get(k), v) for k, v in config.space().items() if stored.get(k) != v}
        raise StorageError(
            f"study {config.study_name!r} exists with another search space "
            f"(stored vs requested: {diff}); choose another --study name"
        )
    return study


def _enqueue_baselines(study: Any, config: SearchConfig) -> None:
    if not config.baselines or config.preset is not None:
        return
    spec = get_supernet(config.supernet)
    params = subnet_params(default_subnet(spec))
    for name in BASELINE_PRESETS:
        study.enqueue_trial({"scheme": name, **params})


def _requeue_zombies(study: Any) -> int:
    """Trials left RUNNING by a driver that died are marked FAIL and enqueued again."""
    import optuna

    zombies = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for ft in zombies:
        study.tell(ft.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        if ft.params:
            study.enqueue_trial(ft.params, user_attrs={"requeued_from_trial": ft.number})
    return len(zombies)


def _require_study(config: SearchConfig, storage: str) -> None:
    import optuna

    names = optuna.get_all_study_names(storage)
    if config.study_name not in names:
        raise StorageError(
            f"no study {config.study_name!r} to resume in the database; studies: "
            f"{', '.join(names) or '(none)'}"
        )


def _cheapest(spec: SupernetSpec, hw: HardwareEvaluator) -> HardwareCost:
    """Cost of the cheapest scheme (classifier only) on the smallest sub-network at the
    smallest resolution: if even that exceeds a budget, no candidate meets it."""
    subnet = default_subnet(spec)
    smallest = type(subnet)(min(spec.resolutions), subnet.stages)
    return hw(make_preset("last", spec, smallest))


def check_budgets(config: SearchConfig, device: DeviceProfile) -> None:
    """Raise :class:`BudgetError` when a budget exceeds what the device has."""
    for what, budget, has in (
        ("SRAM", config.sram_budget_bytes, device.sram_bytes),
        ("flash", config.flash_budget_bytes, device.flash_bytes),
    ):
        if budget is not None and budget > has:
            raise BudgetError(
                f"the {what} budget of {budget} bytes exceeds the {has} bytes of {device.name}; "
                f"use at most {has}B or another --device"
            )


def check_feasible(config: SearchConfig, hw: HardwareEvaluator | None = None) -> None:
    """Raise :class:`BudgetError` when no candidate of the space can meet the SRAM budget, or
    the latency budget on the evaluator's device."""
    spec = get_supernet(config.supernet)
    hw = hw or HardwareEvaluator(spec, config.n_classes, config.hardware)
    floor_cost = _cheapest(spec, hw)
    fastest = floor_cost.latency_s
    limit = config.latency_budget_s
    if limit is not None and fastest is not None and fastest > limit and hw.device is not None:
        raise BudgetError(
            f"no candidate of {spec.name} fits a latency budget of {1000 * limit:g} ms on "
            f"{hw.device.name}: the fastest training step takes {1000 * fastest:.3g} ms; raise "
            f"--latency-budget to at least {1000 * fastest:.3g}ms"
        )
    budget = config.sram_budget_bytes
    if budget is None:
        return
    floor = floor_cost.arena_bytes
    if floor > budget:
        raise BudgetError(
            f"no candidate of {spec.name} fits an SRAM budget of {budget} bytes: the smallest "
            f"training step needs {floor} bytes ({config.hardware.precision}, batch "
            f"{config.hardware.batch_size}); raise --sram-budget to at least {floor}B"
        )


def run_search(
    config: SearchConfig,
    store: Store,
    executor: Executor,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> SearchResult:
    """Run (or continue) the study ``config.study_name`` until its budget is spent."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    start = time.monotonic()
    spec = get_supernet(config.supernet)
    if config.preset is not None and config.preset not in PRESET_NAMES:
        raise BudgetError(f"unknown preset {config.preset!r}; allowed: {', '.join(PRESET_NAMES)}")
    device, calibration_id = resolve_device(config.device, store)
    check_budgets(config, device)
    flash_budget = config.flash_budget_bytes or device.flash_bytes
    hw = HardwareEvaluator(spec, config.n_classes, config.hardware, device)
    check_feasible(config, hw)
    if config.resume:
        _require_study(config, store.url)
    study = _load_study(config, store.url)
    done_before = len(store.evaluations(config.study_name, fidelity="measured"))
    profile_label = f"calibration {calibration_id}" if calibration_id is not None else "built-in"
    zombies = _requeue_zombies(study)
    if zombies:
        log.warning("re-queued %d trials left running by an earlier run", zombies)

    counts = {"measured": 0, "pruned": 0, "failed": 0, "reused": 0}
    pending: dict[int, tuple[Any, Candidate]] = {}
    idle = 0
    last: tuple[tuple[FrontPoint, ...], float | None] | None = None

    def emit(event: str, **data: Any) -> None:
        if progress is not None:
            progress(
                {"event": event, **counts, "before": done_before, "in_flight": len(pending)} | data
            )

    def time_left() -> bool:
        return config.time_budget_s is None or time.monotonic() - start < config.time_budget_s

    def can_submit() -> bool:
        spent = done_before + counts["measured"] + counts["failed"] + len(pending)
        return spent < config.trials and time_left()

    emit("start", total=config.trials)
    try:
        while True:
            while (
                len(pending) < executor.slots and can_submit() and idle < config.max_idle_proposals
            ):
                trial = study.ask()
                candidate = suggest_candidate(trial, spec, config.preset)
                store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
                trial.set_user_attr("candidate_key", candidate.key)
                trial.set_user_attr("candidate", candidate.to_json())
                cost = hw(candidate)
                latency = float(cost.latency_s or 0.0)
                trial.set_user_attr("memory_bytes", cost.arena_bytes)
                trial.set_user_attr("flash_bytes", cost.flash_bytes)
                trial.set_user_attr("latency_s", latency)
                trial.set_user_attr("latency_profile", f"{device.name} ({profile_label})")
                trial.set_user_attr("mcunetv3_extra_bytes", cost.memory.mcunetv3_extra_bytes)
                violations = _violations(
                    config, flash_budget, cost.arena_bytes, cost.flash_bytes, latency
                )
                trial.set_user_attr("constraints", violations)
                if config.sram_budget_bytes is not None:
                    trial.set_user_attr("sram_budget_bytes", config.sram_budget_bytes)
                over = [
                    f"predicted {what} exceeds its budget by {amount:g}{unit}"
                    for (what, unit), amount in zip(_CONSTRAINTS, violations, strict=True)
                    if amount > 0
                ]
                if over:
                    trial.set_user_attr("pruned_reason", "; ".join(over))
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    counts["pruned"] += 1
                    idle += 1
                    emit("pruned", trial=trial.number)
                    continue
                previous = store.find_evaluation(config.study_name, candidate.key, "measured")
                if previous is not None and previous.accuracy is not None:
                    trial.set_user_attr("reused_from_trial", previous.trial_number)
                    trial.set_user_attr("fidelity", "measured")
                    study.tell(trial, [previous.accuracy, float(cost.arena_bytes), latency])
                    counts["reused"] += 1
                    idle += 1
                    emit("reused", trial=trial.number)
                    continue
                idle = 0
                task = {
                    "candidate": candidate.to_json(),
                    "checkpoint": config.checkpoint,
                    "dataset": config.dataset,
                    "data_seed": config.data_seed,
                    "finetune": config.finetune.to_dict(),
                    "hardware": asdict(config.hardware),
                    "threads": 1,
                }
                pending[trial.number] = (trial, candidate)
                executor.submit(trial.number, task)
                emit("submitted", trial=trial.number)
            if not pending:
                break
            for number, result in executor.wait(timeout=1.0):
                trial, candidate = pending.pop(number)
                _record(config, store, study, trial, candidate, result, counts)
                last = _snapshot(config, store, flash_budget)
                emit("finished", trial=number, result=result)
    finally:
        for _number, (trial, _c) in list(pending.items()):
            study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        pending.clear()
    if idle >= config.max_idle_proposals:
        log.warning(
            "stopped after %d proposals in a row that were over budget or already measured",
            idle,
        )
    front, hv = last if last is not None else _snapshot(config, store, flash_budget)
    return SearchResult(
        study_name=config.study_name,
        measured=counts["measured"],
        pruned=counts["pruned"],
        failed=counts["failed"],
        reused=counts["reused"],
        wall_time_s=time.monotonic() - start,
        front=front,
        hypervolume=hv,
    )


def _record(
    config: SearchConfig,
    store: Store,
    study: Any,
    trial: Any,
    candidate: Candidate,
    result: dict[str, Any],
    counts: dict[str, int],
) -> None:
    import optuna

    memory = trial.user_attrs["memory_bytes"]
    latency = float(trial.user_attrs["latency_s"])
    ok = result.get("status") == "ok" and isinstance(result.get("accuracy"), float)
    store.add_evaluation(
        EvaluationRecord(
            study_name=config.study_name,
            candidate_key=candidate.key,
            trial_number=trial.number,
            fidelity="measured",
            status="ok" if ok else "failed",
            accuracy=result.get("accuracy") if ok else None,
            val_accuracy=result.get("val_accuracy") if ok else None,
            memory_bytes=int(memory),
            latency_ms=1000.0 * latency,
            wall_time_s=result.get("wall_time_s"),
            error=None if ok else str(result.get("error") or "unknown failure"),
            details={
                "flash_bytes": trial.user_attrs["flash_bytes"],
                "latency_profile": trial.user_attrs["latency_profile"],
                "scheme": _scheme_label(trial.params, config.preset),
                **(result.get("details") or {}),
            }
            if ok
            else None,
        )
    )
    if ok:
        trial.set_user_attr("fidelity", "measured")
        trial.set_user_attr("val_accuracy", result["val_accuracy"])
        trial.set_user_attr("wall_time_s", result["wall_time_s"])
        study.tell(trial, [result["accuracy"], float(memory), latency])
        counts["measured"] += 1
    else:
        trial.set_user_attr("error", str(result.get("error"))[:500])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        counts["failed"] += 1


def _violations(
    config: SearchConfig, flash_budget: int | None, memory: int, flash: int, latency_s: float
) -> list[float]:
    """How far each budget is exceeded (> 0) or met (<= 0): SRAM, flash, latency."""
    return [
        float(memory - config.sram_budget_bytes) if config.sram_budget_bytes else 0.0,
        float(flash - flash_budget) if flash_budget else 0.0,
        latency_s - config.latency_budget_s if config.latency_budget_s else 0.0,
    ]


_CONSTRAINTS = (("peak SRAM", " B"), ("flash", " B"), ("training-step latency", " s"))


def _snapshot(
    config: SearchConfig, store: Store, flash_budget: int | None
) -> tuple[tuple[FrontPoint, ...], float | None]:
    """The Pareto front of the study's measured, feasible evaluations, stored as a snapshot."""
    evaluations = store.evaluations(config.study_name, fidelity="measured", status="ok")

    def feasible(e: EvaluationRecord) -> bool:
        if e.accuracy is None or e.memory_bytes is None or e.latency_ms is None:
            return False
        flash = (e.details or {}).get("flash_bytes") or 0
        v = _violations(config, flash_budget, e.memory_bytes, flash, e.latency_ms / 1000.0)
        return all(x <= 0 for x in v)

    ok = [e for e in evaluations if feasible(e)]
    if not ok:
        return (), None
    objectives = [
        (-e.accuracy, float(e.memory_bytes), e.latency_ms / 1000.0)  # type: ignore[operator]
        for e in ok
    ]
    front_idx = sorted(pareto_front(objectives), key=lambda i: ok[i].memory_bytes or 0)
    points = tuple(
        FrontPoint(
            trial=ok[i].trial_number,
            candidate_key=ok[i].candidate_key,
            accuracy=float(ok[i].accuracy),  # type: ignore[arg-type]
            val_accuracy=ok[i].val_accuracy,
            memory_bytes=int(ok[i].memory_bytes),  # type: ignore[arg-type]
            flash_bytes=(ok[i].details or {}).get("flash_bytes"),
            latency_s=objectives[i][2],
            scheme=(ok[i].details or {}).get("scheme", "?"),
        )
        for i in front_idx
    )
    # Reference point: accuracy 0 and each budget; without a budget, 10 % beyond the worst
    # value measured so far (so hypervolumes of one study compare only while that holds).
    reference = (
        0.0,
        float(config.sram_budget_bytes or 1.1 * max(o[1] for o in objectives)),
        float(config.latency_budget_s or 1.1 * max(o[2] for o in objectives)),
    )
    # normalised by the reference, so the hypervolume is the share of that box, in [0, 1]
    hv = hypervolume(
        [
            tuple(o / r if r else o for o, r in zip(objectives[i], reference, strict=True))
            for i in front_idx
        ],
        (0.0, 1.0, 1.0),
    )
    store.add_pareto_snapshot(
        config.study_name, [asdict(p) for p in points], n_trials=len(evaluations), hypervolume=hv
    )
    return points, hv
