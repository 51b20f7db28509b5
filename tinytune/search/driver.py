"""The search loop: Optuna proposes, workers evaluate, the driver records.

Each round the driver asks the study for a trial, samples a candidate define-by-run and predicts
its cost once (:class:`tinytune.evaluators.HardwareEvaluator`: the arena of its training step,
flash, step latency on the device). A candidate over a budget is told PRUNED without training.
Otherwise the driver claims a measured fine-tune for it in tinytune's tables — atomically, so
that several drivers sharing a study spend exactly its budget and never measure a candidate
twice — and sends it to a worker as a plain-dict task. The result is stored with the cost the
driver predicted, Optuna is told (measured accuracy ↑, peak SRAM ↓, step latency ↓; budgets are
constraints), and the Pareto front of measured results is snapshotted with its normalised
hypervolume. The objective and the front use validation accuracy; the test accuracy is stored
and shown beside it, never used to choose.

``trials`` counts the study's measured fine-tunes (successful or failed) over all runs and
drivers; ``time_budget_s`` stops new submissions after that many seconds of this run, and
``epoch_budget`` before this run's fine-tuning epochs (:attr:`SearchResult.train_epochs`,
those in flight or reserved by open brackets included) would exceed it;
``max_proposals`` caps the trials asked in this run. A candidate measured before is told from
its stored result. While other drivers' fine-tunes are in flight and the budget may still free
up, a driver waits and watches their heartbeats (:mod:`tinytune.search.study`), so the trials
of one that died are retried here. The fidelity ladder (``proxy``) lives in
:mod:`tinytune.search.brackets`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from tinytune.db import EvaluationRecord, Store
from tinytune.evaluators import HardwareCost
from tinytune.search.brackets import Ladder, Member
from tinytune.search.budgets import RunLimits, StudyBudget, epoch_costs, over_budget
from tinytune.search.config import BASELINE_PRESETS, SearchConfig
from tinytune.search.dashboard import HypervolumePublisher
from tinytune.search.events import Counts, SearchEvent, SearchResult
from tinytune.search.executor import Executor, Metered
from tinytune.search.lr import LrCalibration, calibrate, family_of
from tinytune.search.mutation import mutant
from tinytune.search.preflight import Preflight, preflight
from tinytune.search.proxy import rank_correlation
from tinytune.search.recording import FrontPoint, measured_record, reference_point, snapshot
from tinytune.search.study import Attr, StudyAdapter
from tinytune.search.verify import int8_accuracies, verify_int8
from tinytune.spaces import Candidate, default_subnet, make_preset, suggest_candidate

__all__ = ["Run", "SearchResult", "run_search"]

log = logging.getLogger(__name__)


def run_search(
    config: SearchConfig,
    store: Store,
    executor: Executor,
    progress: Callable[[SearchEvent], None] | None = None,
    checked: Preflight | None = None,
) -> SearchResult:
    """Run (or continue) the study ``config.study_name`` until its budget is spent.

    Args:
        checked: the result of :func:`preflight` when the caller ran it already.
    """
    start = time.monotonic()
    checked = checked or preflight(config, store, progress)
    # the study keeps the engine that predicts its latencies, not the request for a default
    config = dataclasses.replace(config, engine=checked.device.engine)
    study = StudyAdapter(config, store)
    try:
        return Run(config, store, executor, study, checked, start, progress).execute()
    finally:
        study.close()


class Run:
    """The state of one run of the driver (see the module docstring)."""

    def __init__(
        self,
        config: SearchConfig,
        store: Store,
        executor: Executor,
        study: StudyAdapter,
        checked: Preflight,
        start: float,
        progress: Callable[[SearchEvent], None] | None,
    ) -> None:
        self.config, self.store, self.study = config, store, study
        self.executor = Metered(executor)  # counts the epochs every task of the run trained
        self.checked, self.spec, self.progress = checked, checked.spec, progress
        self.reference_key = checked.reference.key  # measured beside the budget
        self.budget = StudyBudget(store, config.study_name, config.trials, self.reference_key)
        self.publish = HypervolumePublisher(study.study, store, config.study_name)
        self.limits = RunLimits(
            config.time_budget_s, config.max_proposals, config.max_idle_proposals, start
        )
        self.counts = Counts()
        self.pending: dict[int, Member] = {}
        self.errors: dict[str, None] = {}
        self.task_time = 0.0
        self.last: tuple[tuple[FrontPoint, ...], float | None] | None = None
        self.keys = itertools.count(-1, -1)
        self.ladder: Ladder | None = None
        self.lrs: LrCalibration | None = None
        self.grid_results: dict[tuple[str, float], dict[str, Any]] = {}
        self.lr_cost = (0, 0.0)  # the grid's fine-tunes and task seconds in this run
        self.stopped_by: str | None = None  # the first of this run's limits that held it back
        self.mutation_turn = False  # with config.mutate: whether the last proposal was one
        if config.mutate and config.preset is not None:
            log.warning("--mutate changes update schemes; it is off with a preset")
        if (config.proxy or config.halving) and config.preset is not None:
            log.warning("the fidelity ladder searches update schemes; it is off with a preset")
        elif config.proxy or config.halving:
            self.ladder = Ladder(self)

    # -- bookkeeping ---------------------------------------------------------------------------

    def emit(self, kind: str, **data: Any) -> None:
        if self.progress is not None:
            finished, _ = self.budget.spent()
            self.progress(
                SearchEvent(
                    kind,
                    dataclasses.replace(self.counts),
                    finished,
                    self.config.trials,
                    len(self.pending),
                    **data,
                )
            )

    def next_key(self) -> int:
        """A key for an executor task that is not a trial (negative)."""
        return next(self.keys)

    def lr_for(self, candidate: Candidate) -> float:
        """The fine-tuning rate of the candidate's family (the configured one when fixed)."""
        default = self.config.finetune.lr
        return (
            default if self.lrs is None else self.lrs.lr(family_of(candidate, self.spec), default)
        )

    def task(self, candidate: Candidate, lr: float | None = None) -> dict[str, Any]:
        """The worker's task that fine-tunes ``candidate`` as the study measures it."""
        config = self.config
        finetune = dataclasses.replace(config.finetune, lr=lr or self.lr_for(candidate))
        return {
            "candidate": candidate.to_json(),
            "checkpoint": config.checkpoint,
            "dataset": config.dataset,
            "data_seed": config.data_seed,
            "finetune": finetune.to_dict(),
            "repeats": self.checked.repeats,
            "threads": 1,
            "gpus": config.gpus_per_trial,  # the share of a GPU the task asks Ray for
        }

    def budget_left(self) -> bool:
        """Whether another measured fine-tune may be started (or reserved by a bracket)."""
        brackets = len(self.ladder.brackets) if self.ladder else 0
        return self.budget.left(brackets) and self.limits.time_left() and self.epochs_left()

    def epochs_left(self) -> bool:
        """Whether a fresh proposal (a measured fine-tune, or a bracket with its screenings)
        fits the epoch budget beside what is spent, in flight and reserved."""
        if self.config.epoch_budget is None:
            return True
        full, short = epoch_costs(self.config, self.checked.repeats)
        committed = self.executor.train_epochs + full * len(self.pending)
        fresh = full
        if self.ladder is not None:
            committed += self.ladder.committed_epochs(full, short)
            fresh += self.config.proxy_eta * short if self.ladder.screening else 0.0
        return committed + fresh <= self.config.epoch_budget + 1e-9

    def held_back(self, reason: str | None) -> None:
        """Note the first of this run's limits that held a proposal back (one of
        :data:`~tinytune.search.events.STOP_REASONS`): the run ends on it unless the study's
        budget is spent meanwhile. A limit, once reached, stays so."""
        if self.stopped_by is None:
            self.stopped_by = reason

    def free(self) -> int:
        busy = len(self.pending) + (self.ladder.busy() if self.ladder else 0)
        return self.executor.slots - busy

    def front(self) -> tuple[FrontPoint, ...]:
        return self.last[0] if self.last is not None else ()

    def watch(self, force: bool = False) -> None:
        """Fail and retry the trials of drivers that stopped beating (every heartbeat)."""
        self.study.fail_stale(force)
        self.counts.retried = self.study.retried

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> SearchResult:
        self.emit("start")
        self.watch(force=True)
        if self.config.tune_lr:
            self.lrs, grid = calibrate(self)
            if grid is not None:  # this run's grid: its fine-tunes are this run's compute
                self.lr_cost = (self.lrs.fine_tunes, self.lrs.wall_time_s)
                self.task_time += self.lr_cost[1]
                self.grid_results = grid
        if self.ladder is not None and not self.ladder.prepare():
            self.ladder = None
        try:
            self.loop()
        finally:
            for member in self.pending.values():
                self.study.tell_failed(member.trial, "the run ended before its result came back")
            self.store.release_claims(self.config.study_name, list(self.pending))
            self.pending.clear()
            if self.ladder is not None:
                self.ladder.abandon()
        if self.limits.idle >= self.config.max_idle_proposals:
            log.warning(
                "stopped after %d proposals in a row that were over budget or already measured",
                self.limits.idle,
            )
        finished = self.budget.spent()[0]
        stopped_by = self.stopped_by if finished < self.config.trials else None
        front, hv = self.last if self.last is not None else self.snapshot()
        search_epochs = self.executor.train_epochs
        int8_cost = verify_int8(self, front) if self.config.verify_int8 else (0, 0.0)
        self.publish(force=True)
        tau = rank_correlation(
            self.store, self.config.study_name, "short" if self.config.halving else "proxy"
        )
        table = self.ladder.table if self.ladder is not None else None
        return SearchResult(
            study_name=self.config.study_name,
            counts=self.counts,
            front=front,
            hypervolume=hv,
            finished=finished,
            reference=reference_point(self.store, self.config.study_name, self.reference_key),
            errors=tuple(self.errors),
            wall_time_s=time.monotonic() - self.limits.start,
            proposals=self.limits.proposals,
            contribution_tasks=table.tasks if table is not None else 0,
            contribution_s=self.ladder.contribution_s if self.ladder is not None else 0.0,
            task_time_s=self.task_time + (table.task_time_s if table is not None else 0.0),
            train_epochs=search_epochs,
            proxy_tau=tau.tau,
            proxy_pairs=tau.n,
            lr_calibration=self.lrs,
            lr_fine_tunes=self.lr_cost[0],
            lr_s=self.lr_cost[1],
            val_images=self.checked.val_images,
            repeats=self.checked.repeats,
            copies=self.checked.copies,
            stopped_by=stopped_by,
            int8=int8_accuracies(
                self.store, self.config.study_name, [p.candidate_key for p in front]
            ),
            int8_runs=int8_cost[0],
            int8_epochs=self.executor.train_epochs - search_epochs,
            int8_s=int8_cost[1],
            latency_profile=self.checked.latency_profile,
            devices=dict(self.executor.devices),
        )

    def loop(self) -> None:
        ladder = self.ladder
        while True:
            while self.free() > 0 and self.step():
                pass
            if not self.pending and not (ladder and ladder.busy()):
                if ladder and ladder.brackets and ladder.close():
                    continue
                others = self.budget.others_in_flight(0) or self.study.left_running()
                if not (self.limits.may_propose() and others):
                    break
                self.emit("waiting")
                time.sleep(1.0)
            for key, result in self.executor.wait(timeout=1.0):
                self.task_time += float(result.get("wall_time_s") or 0.0)
                if not (ladder and ladder.on_result(key, result)):
                    self.record(key, result)
            self.watch()

    def step(self) -> bool:
        """Do one thing that needs no result from a worker; False when nothing is left."""
        if self.ladder is not None and self.ladder.step():
            return True
        if self.limits.may_propose():
            return self.propose()
        self.held_back(self.limits.spent())
        # out of time or proposals: what the learning-rate grid measured is still recorded
        return self.grid_measured_next() and self.propose(free=True)

    def grid_measured_next(self) -> bool:
        """Whether the next enqueued trial (a baseline, the reference) is a candidate that the
        learning-rate grid fine-tuned at its rate: recording it costs no compute, so no time or
        epoch budget holds it back, and the grid's work is not lost."""
        import optuna

        if not self.grid_results:
            return False
        waiting = self.study.waiting()
        if not waiting:
            return False
        trial = waiting[0]
        params = trial.system_attrs.get("fixed_params") or trial.params
        preset = None if trial.user_attrs.get(Attr.REFERENCE) else self.config.preset
        try:
            candidate = suggest_candidate(optuna.trial.FixedTrial(params), self.spec, preset)
        except ValueError:  # not fully fixed: sampled, so not the grid's
            return False
        return (candidate.key, self.lr_for(candidate)) in self.grid_results

    def propose(self, free: bool = False) -> bool:
        """Ask for a trial and start measuring it (``free``: one the learning-rate grid has
        measured, within the study's count of measured fine-tunes but beside this run's time
        and epoch budgets)."""
        waiting = self.study.waiting()
        bracket_id = waiting[0].user_attrs.get(Attr.BRACKET) if waiting and self.ladder else None
        ladder = self.ladder
        retried = bool(waiting) and Attr.FAILED_TRIAL in waiting[0].system_attrs
        opened = ladder is not None and bracket_id in ladder.brackets
        free = free or self.grid_measured_next()
        brackets = len(ladder.brackets) if ladder else 0
        left = self.budget.left(brackets) if free else self.budget_left()
        if not (opened or retried) and not left:
            if not free and self.budget.left(brackets):  # this run's limit, not the study's
                self.held_back("time" if not self.limits.time_left() else "epochs")
            return False  # a retried trial is still told (its result may be stored)
        if not waiting and self.config.mutate and self.config.preset is None:
            self.mutation_turn = not self.mutation_turn
            if self.mutation_turn:
                self.enqueue_mutant()
        trial = self.study.ask()
        self.limits.proposals += 1
        reference = bool(trial.user_attrs.get(Attr.REFERENCE))
        candidate = suggest_candidate(trial, self.spec, None if reference else self.config.preset)
        cost = self.predict(trial, candidate, reference)
        if cost is None:
            return True
        scheme = "full (reference)" if reference else self.config.preset or trial.params["scheme"]
        member = Member(trial, candidate, cost, str(scheme), reference)
        if reference:
            self.measure(member)
        elif ladder is not None and bracket_id is not None:
            bracket = ladder.brackets.get(bracket_id)
            if bracket is None:  # siblings of a bracket that an earlier run left unfinished
                left = sum(1 for t in waiting if t.user_attrs.get(Attr.BRACKET) == bracket_id)
                bracket = ladder.open(bracket_id, candidate.subnet, left - 1)
            else:
                bracket.siblings_left -= 1
            ladder.join(bracket, member)
        elif self.reuse(trial, candidate, cost):
            pass
        elif ladder is not None and not waiting:
            ladder.open_fresh(member)
        else:  # a baseline, a retried trial, or no ladder: measured directly
            if ladder is not None:
                ladder.score_measured(member)
            self.measure(member)
        return True

    def enqueue_mutant(self) -> None:
        """Enqueue a mutant of a front point, or a baseline over a budget repaired into it
        (:mod:`tinytune.search.mutation`), as the next trial: one the joint space expresses,
        not measured or in flight, within the budgets. Nothing when the front is empty or no
        such mutant is found."""
        parents = []
        for point in self.front():
            record = self.store.get_candidate(point.candidate_key)
            if record is not None:
                parents.append(Candidate.from_json(record.payload))
        if not parents:
            return
        in_flight = {member.candidate.key for member in self.pending.values()}
        priced: dict[str, bool] = {}  # a candidate's cost is predicted once per proposal

        def fits(candidate: Candidate) -> bool:
            if candidate.key not in priced:
                cost = self.checked.hardware(candidate)
                verdict = over_budget(self.config, self.checked.flash_budget, cost)[1] is None
                priced[candidate.key] = verdict
            return priced[candidate.key]

        def accept(child: Candidate) -> bool:
            if child.key in in_flight or self.store.find_evaluation(
                self.config.study_name, child.key, "measured"
            ):
                return False
            return fits(child)

        if self.config.baselines:  # those over a budget are repaired into it
            subnet = default_subnet(self.spec)
            presets = (make_preset(name, self.spec, subnet) for name in BASELINE_PRESETS)
            parents += [p for p in presets if p not in parents and not fits(p)]
        rng = random.Random(f"{self.config.seed}:{self.limits.proposals}")
        found = mutant(parents, self.spec, rng, accept, fits=fits)
        if found is not None:
            _, params, parent = found
            self.study.enqueue(params, {Attr.MUTANT_OF: parent.key})

    def predict(
        self, trial: Any, candidate: Candidate, reference: bool = False
    ) -> HardwareCost | None:
        """Store the candidate and predict its cost; None when it is over a budget (pruned),
        unless it is the study's reference, which is measured over any budget."""
        self.store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
        cost = self.checked.hardware(candidate)
        constraints, reason = over_budget(self.config, self.checked.flash_budget, cost)
        self.study.note(
            trial,
            **{
                Attr.CANDIDATE_KEY: candidate.key,
                Attr.CANDIDATE: candidate.to_json(),
                Attr.MEMORY: cost.arena_bytes,
                Attr.FLASH: cost.flash_bytes,
                Attr.LATENCY: float(cost.latency_s or 0.0),
                Attr.LATENCY_PROFILE: self.checked.latency_profile,
                Attr.MCUNETV3_EXTRA: cost.memory.mcunetv3_extra_bytes,
            },
        )
        self.study.constrain(trial, constraints)
        if self.config.sram_budget_bytes is not None:
            self.study.note(trial, **{Attr.SRAM_BUDGET: self.config.sram_budget_bytes})
        if reason is None or reference:
            return cost
        self.study.tell_pruned(trial, reason)
        self.counts.pruned += 1
        self.limits.idle += 1
        self.emit("pruned", trial=trial.number)
        return None

    def reuse(self, trial: Any, candidate: Candidate, cost: HardwareCost) -> bool:
        """Tell the stored measurement of a candidate measured before; False when none."""
        previous = self.store.find_evaluation(self.config.study_name, candidate.key, "measured")
        if previous is None or previous.val_accuracy is None:
            return False
        self.tell_stored(trial, previous, cost)
        return True

    def tell_stored(self, trial: Any, previous: EvaluationRecord, cost: HardwareCost) -> None:
        assert previous.val_accuracy is not None
        self.study.note(
            trial,
            **{
                Attr.REUSED_FROM: previous.trial_number,
                Attr.FIDELITY: "measured",
                Attr.TEST_ACCURACY: previous.accuracy,
            },
        )
        latency = float(cost.latency_s or 0.0)
        self.study.tell_values(trial, (previous.val_accuracy, float(cost.arena_bytes), latency))
        self.counts.reused += 1
        self.limits.idle += 1
        self.emit("reused", trial=trial.number)

    def measure(self, member: Member) -> bool:
        """Claim a measured fine-tune for a trial and send it to a worker; False when the claim
        is refused (measured, in flight elsewhere, or the budget is spent)."""
        trial, config = member.trial, self.config
        claim = self.store.claim_measurement(
            config.study_name,
            member.candidate.key,
            trial.number,
            None if member.reference else config.trials,
            uncounted=self.reference_key,
        )
        if claim.outcome == "measured":
            assert claim.evaluation is not None
            self.tell_stored(trial, claim.evaluation, member.cost)
            return False
        if claim.outcome == "in_flight" and claim.holder == trial.number:
            # Another driver took this very trial: on SQLite, which has no SELECT ... FOR
            # UPDATE, two drivers can pop one enqueued trial. That driver measures and tells
            # it; this one lets it go (and stops beating for it).
            self.study.let_go(trial)
            self.limits.idle += 1
            return False
        if claim.outcome != "claimed":
            reason = (
                f"trial {claim.holder} is measuring the same candidate"
                if claim.outcome == "in_flight"
                else "the study's budget of measured fine-tunes is spent"
            )
            self.study.tell_pruned(trial, reason)
            self.counts.pruned += 1
            self.limits.idle += 1
            return False
        self.limits.idle = 0
        self.pending[trial.number] = member
        grid = self.grid_results.pop((member.candidate.key, self.lr_for(member.candidate)), None)
        if grid is not None:  # fine-tuned at this rate by the learning-rate grid
            self.record(trial.number, grid)
            return True
        self.executor.submit(trial.number, self.task(member.candidate))
        self.emit("submitted", trial=trial.number)
        return True

    # -- results -------------------------------------------------------------------------------

    def record(self, key: int, result: dict[str, Any]) -> None:
        member = self.pending.pop(key)
        trial, cost = member.trial, member.cost
        record = measured_record(
            self.config,
            trial.number,
            member.candidate.key,
            cost,
            self.checked.latency_profile,
            member.scheme,
            result,
        )
        self.store.finish_measurement(record)
        _, hv = self.snapshot()
        if hv is not None:
            self.study.note(trial, **{Attr.HYPERVOLUME: hv})
        if record.status == "ok":
            assert record.val_accuracy is not None
            self.study.note(
                trial,
                **{
                    Attr.FIDELITY: "measured",
                    Attr.TEST_ACCURACY: record.accuracy,
                    Attr.WALL_TIME: record.wall_time_s,
                },
            )
            values = (record.val_accuracy, float(cost.arena_bytes), float(cost.latency_s or 0.0))
            self.study.tell_values(trial, values)
            self.counts.measured += 1
        else:
            assert record.error is not None
            self.errors[record.error.splitlines()[0]] = None
            self.study.tell_failed(trial, record.error)
            self.counts.failed += 1
        self.publish()
        self.emit("finished", trial=trial.number, accuracy=record.val_accuracy, error=record.error)

    def snapshot(self) -> tuple[tuple[FrontPoint, ...], float | None]:
        self.last = snapshot(self.config, self.store, self.checked.flash_budget)
        return self.last
