"""The search driver: Optuna proposes, workers evaluate, the driver records.

Only the driver talks to the database (Optuna's tables and tinytune's). Each round it asks
Optuna for a trial, samples a candidate define-by-run and predicts its cost on the device: peak
training SRAM with the memory planner (the size of the arena its buffers are laid out in),
flash, and the latency of one training step with the device's latency profile. A candidate over
a budget is told PRUNED without any training; the others go to a worker as plain-dict tasks.
When a result comes back the driver stores the evaluation, tells Optuna (objectives: measured
accuracy ↑, predicted peak SRAM ↓, predicted step latency ↓; going over a budget is a
constraint violation) and snapshots the Pareto front of measured results, with its normalised
hypervolume (also set on the trial as the user attribute ``hypervolume`` and drawn, over the
study's history, as a figure that optuna-dashboard shows on the study page).

Fidelity ladder (``proxy``, off by default): before the search, a contribution analysis of the
study's reference sub-network (:mod:`tinytune.search.contribution`; stored and reused by key)
gives the additive accuracy gains of MCUNetV3 Eq. 5. Then the search works in brackets
(:mod:`tinytune.search.ladder`): each fresh proposal brings η−1 siblings on its sub-network with
schemes the sampler draws; all are scored by the proxy (:mod:`tinytune.search.proxy`; the
sub-network's classifier-only accuracy is measured once, then stored and reused), stored as
``proxy`` evaluations, and one is promoted to a measured fine-tune. Optuna is told measured
values only: the members not promoted are told PRUNED, with the user attributes
``fidelity=proxy``, ``proxy_accuracy`` and a ``pruned_reason``, exactly as a rung of successive
halving prunes. The Pareto front, the snapshots and the hypervolume come from measured results
only. Baselines and re-queued trials are measured directly.

Budgets: ``trials`` counts the study's measured fine-tunes (successful or failed), over all
runs, so a resumed study finishes the budget it started with; ``time_budget_s`` stops new
submissions after that many seconds of this run (running evaluations finish);
``max_proposals`` caps the trials asked in this run (proxy-scored, pruned and measured alike).
The fine-tunes of the contribution analysis and of the classifier-only bases are the proxy's
cost, counted apart (:class:`SearchResult`). A candidate already measured in the study is not
trained again: its stored result is told for the new trial.

Resuming: trials that an earlier driver left RUNNING (it crashed or was killed) are marked FAIL
and their parameters enqueued again, so their candidates are evaluated by this run — or, when
the evaluation had been stored before the crash, told from the stored result.
"""

from __future__ import annotations

import itertools
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tinytune.db import EvaluationRecord, Store
from tinytune.errors import BudgetError, ConfigError, ModelError, StorageError
from tinytune.evaluators import FinetuneConfig, HardwareConfig, HardwareCost, HardwareEvaluator
from tinytune.hwmodels.calibration import resolve_device
from tinytune.hwmodels.devices import DeviceProfile
from tinytune.search.contribution import (
    ContributionEntry,
    ContributionPlan,
    ContributionTable,
    TableIdentity,
    build_table,
    file_sha256,
    run_contributions,
    store_entry,
)
from tinytune.search.executor import Executor
from tinytune.search.ladder import calibration_offset, choose_promotion, reference
from tinytune.search.pareto import hypervolume, pareto_front
from tinytune.search.proxy import ProxyEstimate, estimate, rank_correlation
from tinytune.spaces import (
    PRESET_NAMES,
    Candidate,
    LiteResidualConfig,
    SubnetConfig,
    SupernetSpec,
    UpdateScheme,
    default_subnet,
    get_supernet,
    make_preset,
    subnet_params,
    suggest_candidate,
)

__all__ = [
    "BASELINE_PRESETS",
    "SAMPLERS",
    "FrontPoint",
    "SearchConfig",
    "SearchResult",
    "check_budgets",
    "check_feasible",
    "run_search",
]

log = logging.getLogger(__name__)

SPACE_ATTR = "tinytune.space"
CHECKPOINT_ATTR = "tinytune.checkpoint"
BRACKET_ATTR = "ladder_bracket"
HYPERVOLUME_GRAPH = "tinytune-hypervolume"
OBJECTIVES = ("accuracy", "peak_sram_bytes", "latency_s")
DIRECTIONS = ("maximize", "minimize", "minimize")
BASELINE_PRESETS = ("last", "bias-only", "mcunetv3", "tinytl", "full")
SAMPLERS = ("tpe", "random", "nsga2")
_PUBLISH_EVERY_S = 10.0


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
    max_proposals: int | None = None
    device: str = "stm32f746"
    sram_budget_bytes: int | None = 256 * 1024
    flash_budget_bytes: int | None = None
    latency_budget_s: float | None = None
    seed: int = 0
    sampler: str = "tpe"
    baselines: bool = True
    max_idle_proposals: int = 200
    resume: bool = False
    proxy: bool = False
    proxy_eta: int = 4
    contribution_plan: ContributionPlan = field(default_factory=ContributionPlan)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise BudgetError(f"--trials must be >= 1, got {self.trials}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise BudgetError(f"--time-budget must be > 0 seconds, got {self.time_budget_s}")
        if self.max_proposals is not None and self.max_proposals < 1:
            raise BudgetError(f"--proposals must be >= 1, got {self.max_proposals}")
        for what, value in (
            ("SRAM budget", self.sram_budget_bytes),
            ("flash budget", self.flash_budget_bytes),
            ("latency budget", self.latency_budget_s),
        ):
            if value is not None and value <= 0:
                raise BudgetError(f"the {what} must be > 0, got {value}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"unknown sampler {self.sampler!r}; allowed: {', '.join(SAMPLERS)}")
        if self.proxy_eta < 2:
            raise ConfigError(
                f"--proxy-eta must be >= 2 (proxy-scored candidates per measured one), got "
                f"{self.proxy_eta}"
            )

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
    """What a run did and found.

    Attributes:
        measured, pruned, failed, reused: trials of this run by outcome; ``pruned`` counts those
            over a budget (the proxy-scored trials not promoted are ``proxy_scored −
            promoted``, also told PRUNED).
        wall_time_s: the run's wall time, contribution analysis included.
        front, hypervolume: the measured Pareto front and its normalised hypervolume.
        proposals: trials asked in this run.
        proxy_scored, promoted: trials scored by the proxy, and those promoted to measured.
        contribution_tasks, base_tasks: fine-tunes spent on the proxy (the contribution table
            and the classifier-only bases of sub-networks) in this run.
        contribution_s: wall time of the contribution analysis in this run.
        task_time_s: seconds spent inside evaluations (all fine-tunes), summed over workers.
        proxy_tau, proxy_pairs: Kendall's τ between proxy and measured accuracy over the
            study's candidates that have both, and their number.
    """

    study_name: str
    measured: int
    pruned: int
    failed: int
    reused: int
    wall_time_s: float
    front: tuple[FrontPoint, ...]
    hypervolume: float | None
    proposals: int = 0
    proxy_scored: int = 0
    promoted: int = 0
    contribution_tasks: int = 0
    base_tasks: int = 0
    contribution_s: float = 0.0
    task_time_s: float = 0.0
    proxy_tau: float | None = None
    proxy_pairs: int = 0


def _scheme_label(params: dict[str, Any], preset: str | None) -> str:
    return str(preset or params.get("scheme", "joint"))


def _make_sampler(config: SearchConfig) -> Any:
    import optuna

    def constraints(ft: Any) -> list[float]:
        return ft.user_attrs.get("constraints", [0.0])

    if config.sampler == "random":
        return optuna.samplers.RandomSampler(seed=config.seed)
    if config.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=config.seed, constraints_func=constraints)
    return optuna.samplers.TPESampler(seed=config.seed, constraints_func=constraints)


def _load_study(config: SearchConfig, storage: Any) -> Any:
    import optuna

    study = optuna.create_study(
        study_name=config.study_name,
        storage=storage,
        directions=list(DIRECTIONS),
        sampler=_make_sampler(config),
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
    if config.checkpoint:  # the weights this run searches with, for export
        study.set_user_attr(CHECKPOINT_ATTR, str(config.checkpoint))
    return study


def _enqueue_baselines(study: Any, config: SearchConfig) -> None:
    if not config.baselines or config.preset is not None:
        return
    spec = get_supernet(config.supernet)
    params = subnet_params(default_subnet(spec))
    for name in BASELINE_PRESETS:
        study.enqueue_trial({"scheme": name, **params})


def _requeue_zombies(study: Any) -> int:
    """Trials left RUNNING by a driver that died are marked FAIL and enqueued again (a member
    of a ladder bracket rejoins a bracket with its siblings)."""
    import optuna

    zombies = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for ft in zombies:
        study.tell(ft.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        if ft.params:
            attrs: dict[str, Any] = {"requeued_from_trial": ft.number}
            if ft.user_attrs.get(BRACKET_ATTR) is not None and "promoted" not in ft.user_attrs:
                attrs[BRACKET_ATTR] = ft.user_attrs[BRACKET_ATTR]
            study.enqueue_trial(ft.params, user_attrs=attrs)
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
    hw = HardwareEvaluator(spec, config.n_classes, config.hardware, device)
    check_feasible(config, hw)
    if config.resume:
        _require_study(config, store.url)
    study = _load_study(config, store.url)
    zombies = _requeue_zombies(study)
    if zombies:
        log.warning("re-queued %d trials left running by an earlier run", zombies)
    profile_label = f"calibration {calibration_id}" if calibration_id is not None else "built-in"
    run = _Run(config, store, executor, study, spec, hw, device, profile_label, start, progress)
    return run.execute()


@dataclass
class _Member:
    """A trial of a ladder bracket waiting for its proxy score."""

    trial: Any
    candidate: Candidate
    memory: int
    latency: float


@dataclass
class _Bracket:
    """Trials on one sub-network, scored by the proxy, of which one is measured."""

    id: int
    subnet: SubnetConfig
    siblings_left: int
    members: list[_Member] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    base: float | None = None
    base_state: str = "unknown"  # known | running | failed | unknown


class _Run:
    """The state of one run of the driver (see the module docstring)."""

    def __init__(
        self,
        config: SearchConfig,
        store: Store,
        executor: Executor,
        study: Any,
        spec: SupernetSpec,
        hw: HardwareEvaluator,
        device: DeviceProfile,
        profile_label: str,
        start: float,
        progress: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        self.config, self.store, self.executor, self.study = config, store, executor, study
        self.spec, self.hw, self.device, self.profile_label = spec, hw, device, profile_label
        self.start, self.progress = start, progress
        self.flash_budget = config.flash_budget_bytes or device.flash_bytes
        self.done_before = len(store.evaluations(config.study_name, fidelity="measured"))
        self.counts = dict.fromkeys(
            (
                "measured",
                "pruned",
                "failed",
                "reused",
                "proxy",
                "promoted",
                "not_promoted",
                "base_tasks",
            ),
            0,
        )
        self.pending: dict[int, tuple[Any, Candidate]] = {}
        self.aux: dict[int, SubnetConfig] = {}  # base task key -> its sub-network
        self.brackets: dict[int, _Bracket] = {}
        self.proposals = 0
        self.idle = 0
        self.task_time = 0.0
        self.last: tuple[tuple[FrontPoint, ...], float | None] | None = None
        self.published = 0.0
        self.keys = itertools.count(-1, -1)
        self.ladder = config.proxy
        if config.proxy and config.preset is not None:
            log.warning("the proxy ladder searches update schemes; it is off with a preset")
            self.ladder = False
        self.table: ContributionTable | None = None
        self.identity: TableIdentity | None = None
        self.bases: dict[str, float | None] = {}
        self.contribution_s = 0.0

    # -- bookkeeping ---------------------------------------------------------------------------

    def emit(self, event: str, **data: Any) -> None:
        if self.progress is not None:
            self.progress(
                {
                    "event": event,
                    **self.counts,
                    "before": self.done_before,
                    "in_flight": len(self.pending),
                }
                | data
            )

    def time_left(self) -> bool:
        budget = self.config.time_budget_s
        return budget is None or time.monotonic() - self.start < budget

    def budget_left(self) -> bool:
        """Whether another measured fine-tune may be started (or reserved by a bracket)."""
        c = self.counts
        spent = self.done_before + c["measured"] + c["failed"] + len(self.pending)
        return spent + len(self.brackets) < self.config.trials and self.time_left()

    def may_propose(self) -> bool:
        limit = self.config.max_proposals
        return (
            self.time_left()
            and (limit is None or self.proposals < limit)
            and self.idle < self.config.max_idle_proposals
        )

    def free(self) -> int:
        return self.executor.slots - len(self.pending) - len(self.aux)

    def task(self, candidate: Candidate) -> dict[str, Any]:
        return {
            "candidate": candidate.to_json(),
            "checkpoint": self.config.checkpoint,
            "dataset": self.config.dataset,
            "data_seed": self.config.data_seed,
            "finetune": self.config.finetune.to_dict(),
            "hardware": asdict(self.config.hardware),
            "threads": 1,
        }

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> SearchResult:
        import optuna

        self.emit("start", total=self.config.trials)
        try:
            if self.ladder:
                self.prepare_proxy()
            while True:
                while self.free() > 0 and self.step():
                    pass
                if not self.pending and not self.aux:
                    if self.brackets and self.close_brackets():
                        continue
                    break
                for key, result in self.executor.wait(timeout=1.0):
                    self.task_time += float(result.get("wall_time_s") or 0.0)
                    if key in self.aux:
                        self.on_base(key, result)
                    else:
                        trial, candidate = self.pending.pop(key)
                        self.record(trial, candidate, result)
                        self.emit("finished", trial=key, result=result)
        finally:
            for trial, _c in self.pending.values():
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            self.pending.clear()
            for bracket in list(self.brackets.values()):
                self.prune_members(bracket.members, "the run ended before a promotion")
            self.brackets.clear()
        if self.idle >= self.config.max_idle_proposals:
            log.warning(
                "stopped after %d proposals in a row that were over budget or already measured",
                self.idle,
            )
        front, hv = self.last if self.last is not None else self.snapshot()
        self.publish(force=True)
        tau = rank_correlation(self.store, self.config.study_name)
        table = self.table
        return SearchResult(
            study_name=self.config.study_name,
            measured=self.counts["measured"],
            pruned=self.counts["pruned"],
            failed=self.counts["failed"],
            reused=self.counts["reused"],
            wall_time_s=time.monotonic() - self.start,
            front=front,
            hypervolume=hv,
            proposals=self.proposals,
            proxy_scored=self.counts["proxy"],
            promoted=self.counts["promoted"],
            contribution_tasks=table.tasks if table is not None else 0,
            base_tasks=self.counts["base_tasks"],
            contribution_s=self.contribution_s,
            task_time_s=self.task_time + (table.task_time_s if table is not None else 0.0),
            proxy_tau=tau.tau,
            proxy_pairs=tau.n,
        )

    def step(self) -> bool:
        """Do one thing that needs no result from a worker; False when nothing is left."""
        for bracket in list(self.brackets.values()):
            if self.ready(bracket):
                self.decide(bracket)
                return True
        for bracket in self.brackets.values():
            if bracket.base_state == "unknown":
                self.submit_base(bracket)
                return True
        if not self.may_propose():
            return False
        return self.propose()

    def propose(self) -> bool:
        import optuna

        waiting = self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        nxt = min(waiting, key=lambda t: t.number) if waiting else None
        bracket_id = nxt.user_attrs.get(BRACKET_ATTR) if nxt is not None else None
        if not self.ladder:
            bracket_id = None
        if bracket_id not in self.brackets and not self.budget_left():
            return False
        trial = self.study.ask()
        self.proposals += 1
        candidate = suggest_candidate(trial, self.spec, self.config.preset)
        bracket = None
        if bracket_id is not None:
            bracket = self.brackets.get(bracket_id)
            if bracket is None:  # siblings of a bracket that an earlier run left unfinished
                left = sum(1 for t in waiting if t.user_attrs.get(BRACKET_ATTR) == bracket_id)
                bracket = self.open_bracket(bracket_id, candidate.subnet, left - 1)
            else:
                bracket.siblings_left -= 1
        memory, latency = self.describe(trial, candidate)
        if memory is None:
            return True
        if bracket is not None:
            self.join(bracket, trial, candidate, memory, latency)
            return True
        if self.reuse(trial, candidate, latency):
            return True
        if self.ladder and nxt is None:  # a fresh proposal opens a bracket on its sub-network
            bracket = self.open_bracket(trial.number, candidate.subnet, self.config.proxy_eta - 1)
            params = subnet_params(candidate.subnet)
            for _ in range(bracket.siblings_left):
                self.study.enqueue_trial(params, user_attrs={BRACKET_ATTR: trial.number})
            self.join(bracket, trial, candidate, memory, latency)
            return True
        if self.ladder:  # a baseline or a re-queued trial: measured, and proxy-scored for τ
            base = self.known_base(candidate.subnet)
            if base is not None and self.table is not None:
                self.store_proxy(trial, candidate, memory, latency, base)
        self.submit_measured(trial, candidate)
        return True

    def describe(self, trial: Any, candidate: Candidate) -> tuple[int | None, float]:
        """Store the candidate, predict its cost, and prune it when it is over a budget.

        Returns:
            Its peak SRAM and latency, or ``(None, latency)`` when it was pruned.
        """
        import optuna

        store, config = self.store, self.config
        store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
        trial.set_user_attr("candidate_key", candidate.key)
        trial.set_user_attr("candidate", candidate.to_json())
        cost = self.hw(candidate)
        latency = float(cost.latency_s or 0.0)
        trial.set_user_attr("memory_bytes", cost.arena_bytes)
        trial.set_user_attr("flash_bytes", cost.flash_bytes)
        trial.set_user_attr("latency_s", latency)
        trial.set_user_attr("latency_profile", f"{self.device.name} ({self.profile_label})")
        trial.set_user_attr("mcunetv3_extra_bytes", cost.memory.mcunetv3_extra_bytes)
        violations = _violations(
            config, self.flash_budget, cost.arena_bytes, cost.flash_bytes, latency
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
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.counts["pruned"] += 1
            self.idle += 1
            self.emit("pruned", trial=trial.number)
            return None, latency
        return cost.arena_bytes, latency

    def reuse(self, trial: Any, candidate: Candidate, latency: float) -> bool:
        """Tell the stored measurement of a candidate measured before; False when there is
        none."""
        previous = self.store.find_evaluation(self.config.study_name, candidate.key, "measured")
        if previous is None or previous.accuracy is None:
            return False
        trial.set_user_attr("reused_from_trial", previous.trial_number)
        trial.set_user_attr("fidelity", "measured")
        memory = float(trial.user_attrs["memory_bytes"])
        self.study.tell(trial, [previous.accuracy, memory, latency])
        self.counts["reused"] += 1
        self.idle += 1
        self.emit("reused", trial=trial.number)
        return True

    def submit_measured(self, trial: Any, candidate: Candidate) -> None:
        self.idle = 0
        self.pending[trial.number] = (trial, candidate)
        self.executor.submit(trial.number, self.task(candidate))
        self.emit("submitted", trial=trial.number)

    # -- the fidelity ladder -------------------------------------------------------------------

    def prepare_proxy(self) -> None:
        """Measure (or reuse) the contribution table of the study's reference sub-network."""
        config = self.config
        try:
            digest = file_sha256(config.checkpoint)
        except OSError as e:
            raise ModelError(
                f"cannot read the supernet weights {config.checkpoint!r} to identify its "
                f"contribution table: {e.strerror or e}"
            ) from e
        self.identity = TableIdentity(
            self.spec.name,
            config.checkpoint,
            digest,
            config.dataset,
            config.data_seed,
            config.finetune,
            default_subnet(self.spec),
        )
        started = time.monotonic()
        self.table = run_contributions(
            self.store,
            self.executor,
            self.identity,
            self.spec,
            config.contribution_plan,
            self.task,
            lambda: next(self.keys),
            keep_going=self.time_left,
            progress=lambda done, total: self.emit("contributions", done=done, total=total),
        )
        self.contribution_s = time.monotonic() - started
        if self.table is None:
            log.warning(
                "the classifier-only fine-tune of the reference sub-network failed; the proxy "
                "ladder is off for this run"
            )
            self.ladder = False
            return
        self.bases[self.identity.key] = self.table.base
        self.emit("contributions_ready", table=self.table.to_dict(), tasks=self.table.tasks)

    def known_base(self, subnet: SubnetConfig) -> float | None:
        """The classifier-only validation accuracy of ``subnet`` if it is measured."""
        assert self.identity is not None
        key = self.identity.with_subnet(subnet).key
        if key not in self.bases:
            table = build_table(key, self.spec, subnet, self.store.contributions(key))
            if table is None:
                return None
            self.bases[key] = table.base
        return self.bases[key]

    def open_bracket(self, bracket_id: int, subnet: SubnetConfig, siblings: int) -> _Bracket:
        bracket = _Bracket(bracket_id, subnet, max(0, siblings))
        base = self.known_base(subnet)
        if base is not None:
            bracket.base, bracket.base_state = base, "known"
        self.brackets[bracket_id] = bracket
        return bracket

    def join(
        self, bracket: _Bracket, trial: Any, candidate: Candidate, memory: int, latency: float
    ) -> None:
        import optuna

        if candidate.key in bracket.keys:
            trial.set_user_attr("pruned_reason", "the same candidate is already in its bracket")
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.counts["pruned"] += 1
            self.idle += 1
            return
        if self.reuse(trial, candidate, latency):
            return
        trial.set_user_attr(BRACKET_ATTR, bracket.id)
        bracket.keys.add(candidate.key)
        bracket.members.append(_Member(trial, candidate, memory, latency))
        self.idle = 0

    def ready(self, bracket: _Bracket) -> bool:
        filled = bracket.siblings_left <= 0 or not self.may_propose()
        return filled and bracket.base_state in ("known", "failed")

    def submit_base(self, bracket: _Bracket) -> None:
        """Measure the classifier-only accuracy of a bracket's sub-network (stored, reused)."""
        assert self.identity is not None
        candidate = Candidate(
            self.spec.name, bracket.subnet, LiteResidualConfig(), UpdateScheme(0)
        )
        self.store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
        key = next(self.keys)
        self.aux[key] = bracket.subnet
        for b in self.brackets.values():
            if b.subnet == bracket.subnet:
                b.base_state = "running"
        self.executor.submit(key, self.task(candidate))
        self.counts["base_tasks"] += 1

    def on_base(self, key: int, result: dict[str, Any]) -> None:
        assert self.identity is not None
        subnet = self.aux.pop(key)
        identity = self.identity.with_subnet(subnet)
        candidate = Candidate(self.spec.name, subnet, LiteResidualConfig(), UpdateScheme(0))
        store_entry(self.store, identity, ContributionEntry("base", "base", candidate), result)
        base = self.known_base(subnet)
        for b in self.brackets.values():
            if b.subnet == subnet:
                b.base, b.base_state = base, "known" if base is not None else "failed"
        self.emit("base", ok=base is not None)

    def store_proxy(
        self, trial: Any, candidate: Candidate, memory: int, latency: float, base: float
    ) -> ProxyEstimate:
        """Estimate, store as a ``proxy`` evaluation, and note it on the trial."""
        assert self.table is not None
        started = time.perf_counter()
        est = estimate(candidate, self.table, base)
        trial.set_user_attr("proxy_accuracy", est.accuracy)
        if self.store.find_evaluation(self.config.study_name, candidate.key, "proxy") is None:
            self.store.add_evaluation(
                EvaluationRecord(
                    study_name=self.config.study_name,
                    candidate_key=candidate.key,
                    trial_number=trial.number,
                    fidelity="proxy",
                    status="ok",
                    accuracy=est.accuracy,
                    memory_bytes=memory,
                    latency_ms=1000.0 * latency,
                    wall_time_s=time.perf_counter() - started,
                    details={
                        "estimate": est.to_dict(),
                        "estimates": "validation accuracy",
                        "table": self.table.key,
                        "flash_bytes": trial.user_attrs["flash_bytes"],
                        "scheme": _scheme_label(trial.params, self.config.preset),
                    },
                )
            )
        return est

    def decide(self, bracket: _Bracket) -> None:
        """Score a complete bracket by the proxy and promote one member to measured."""
        del self.brackets[bracket.id]
        members = bracket.members
        if not members:
            return
        assert self.table is not None
        if bracket.base is not None:
            scores = [
                self.store_proxy(m.trial, m.candidate, m.memory, m.latency, bracket.base)
                for m in members
            ]
        else:  # the base failed: the members share a sub-network, so the gains still rank them
            scores = [estimate(m.candidate, self.table, self.table.base) for m in members]
        for m in members:
            m.trial.set_user_attr("fidelity", "proxy")
        self.counts["proxy"] += len(members)
        if not self.time_left():
            self.prune_members(members, "the time budget was spent before a promotion")
            return
        front = [(p.accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in self.front()]
        contenders = [
            (s.accuracy, float(m.memory), m.latency) for s, m in zip(scores, members, strict=True)
        ]
        ref = reference(
            [*front, *contenders], self.config.sram_budget_bytes, self.config.latency_budget_s
        )
        best = choose_promotion(contenders, front, ref, self.offset())
        chosen = members[best]
        chosen.trial.set_user_attr("promoted", True)
        self.prune_members(
            [m for m in members if m is not chosen],
            f"proxy: not promoted; trial {chosen.trial.number} of its bracket was",
        )
        self.counts["promoted"] += 1
        self.emit("promoted", trial=chosen.trial.number, bracket=len(members))
        self.submit_measured(chosen.trial, chosen.candidate)

    def prune_members(self, members: list[_Member], reason: str) -> None:
        import optuna

        for m in members:
            m.trial.set_user_attr("pruned_reason", reason)
            self.study.tell(m.trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            self.counts["not_promoted"] += 1

    def close_brackets(self) -> bool:
        """Nothing runs and nothing more can be proposed: decide the brackets whose members
        are scored as they stand; False when none could be."""
        progressed = False
        for bracket in list(self.brackets.values()):
            if bracket.base_state in ("known", "failed"):
                self.decide(bracket)
                progressed = True
        return progressed

    def front(self) -> tuple[FrontPoint, ...]:
        return self.last[0] if self.last is not None else ()

    def offset(self) -> float:
        """Median gap between measured and proxy accuracy in this study."""
        name = self.config.study_name
        proxy = {
            e.candidate_key: e.accuracy
            for e in self.store.evaluations(name, fidelity="proxy", status="ok")
        }
        pairs = [
            (proxy[e.candidate_key], e.accuracy)
            for e in self.store.evaluations(name, fidelity="measured", status="ok")
            if e.candidate_key in proxy and e.accuracy is not None
        ]
        return calibration_offset(pairs)  # type: ignore[arg-type]

    # -- results -------------------------------------------------------------------------------

    def record(self, trial: Any, candidate: Candidate, result: dict[str, Any]) -> None:
        import optuna

        config, store = self.config, self.store
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
        self.last = self.snapshot()
        if self.last[1] is not None:
            trial.set_user_attr("hypervolume", self.last[1])
        if ok:
            trial.set_user_attr("fidelity", "measured")
            trial.set_user_attr("val_accuracy", result["val_accuracy"])
            trial.set_user_attr("wall_time_s", result["wall_time_s"])
            self.study.tell(trial, [result["accuracy"], float(memory), latency])
            self.counts["measured"] += 1
        else:
            trial.set_user_attr("error", str(result.get("error"))[:500])
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.counts["failed"] += 1
        self.publish()

    def snapshot(self) -> tuple[tuple[FrontPoint, ...], float | None]:
        return _snapshot(self.config, self.store, self.flash_budget)

    def publish(self, force: bool = False) -> None:
        """Show the hypervolume history on the study's optuna-dashboard page (at most every
        few seconds during a run)."""
        now = time.monotonic()
        if not force and now - self.published < _PUBLISH_EVERY_S:
            return
        self.published = now
        snapshots = self.store.pareto_snapshots(self.config.study_name)
        if not snapshots:
            return
        try:
            from optuna_dashboard import save_plotly_graph_object

            from tinytune.viz.pareto import hypervolume_history_figure

            figure = hypervolume_history_figure(snapshots, title=self.config.study_name)
            save_plotly_graph_object(self.study, figure, graph_object_id=HYPERVOLUME_GRAPH)
        except (ImportError, ValueError) as e:  # the search does not depend on the figure
            log.warning("cannot show the hypervolume history in optuna-dashboard: %s", e)


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
    ref = reference(
        [(-o[0], o[1], o[2]) for o in objectives],
        config.sram_budget_bytes,
        config.latency_budget_s,
    )
    # normalised by the reference, so the hypervolume is the share of that box, in [0, 1]
    hv = hypervolume(
        [
            tuple(o / r if r else o for o, r in zip(objectives[i], ref, strict=True))
            for i in front_idx
        ],
        (0.0, 1.0, 1.0),
    )
    store.add_pareto_snapshot(
        config.study_name, [asdict(p) for p in points], n_trials=len(evaluations), hypervolume=hv
    )
    return points, hv
