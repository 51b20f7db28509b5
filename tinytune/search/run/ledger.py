"""The trials of one run and what Optuna is told of each: pruned over a budget, told a stored
measurement, or measured.

A proposed candidate is stored and its cost predicted once (:class:`tinytune.evaluators.
HardwareEvaluator`: the SRAM of its training step, flash, step latency on the device, each
with a keyword model's front-end); one
over a budget is told PRUNED without training. A measured fine-tune is claimed in tinytune's
tables — atomically, so that several drivers sharing a study spend exactly its budget and never
measure a candidate twice — and sent to a worker as a FinetuneTask. Its result is stored with
the cost the driver predicted, Optuna is told (measured accuracy ↑, peak SRAM ↓, step latency ↓;
budgets are constraints), and the Pareto front of measured results is snapshotted with its
normalised hypervolume. The objective and the front use validation accuracy; the test accuracy
is stored and shown beside it, never used to choose. A candidate measured before is told from
its stored result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tinytune.db import TWIN_OF, EvaluationRecord, Store
from tinytune.evaluators import EvaluationResult, FinetuneTask, HardwareCost
from tinytune.search.config.budgets import RunLimits, StudyBudget, over_budget
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.executor import Executor
from tinytune.search.execution.worker_tasks import finetune_task
from tinytune.search.front.recording import FrontPoint, measured_record, snapshot, twin_record
from tinytune.search.ladder.decisions import Member
from tinytune.search.run.dashboard import HypervolumePublisher
from tinytune.search.run.events import Counts, SearchEvent
from tinytune.search.run.lr_grid import StudyRates, family_of
from tinytune.search.run.preflight import Preflight
from tinytune.search.run.study_view import StudyView
from tinytune.search.run.timing import Late
from tinytune.search.study.adapter import StudyAdapter
from tinytune.search.study.attrs import Attr
from tinytune.spaces import JOINT, Candidate, suggest_candidate

__all__ = ["Ledger"]


class Ledger:
    """The trials of one run (see the module docstring), its counters and progress events.

    Attributes:
        pending: this run's measured fine-tunes in flight, by trial number.
        errors: the distinct first lines of their errors, in order.
        lrs: the study's rate per family (None: the configured rate for all).
        grid_results: the learning-rate grid's results at each family's chosen rate, by
            ``(candidate key, lr)``: a trial of that candidate at that rate is told the grid's
            result rather than fine-tuned again.
    """

    def __init__(
        self,
        config: SearchConfig,
        store: Store,
        study: StudyAdapter,
        checked: Preflight,
        executor: Executor,
        budget: StudyBudget,
        limits: RunLimits,
        progress: Callable[[SearchEvent], None] | None,
    ) -> None:
        self.config, self.store, self.study, self.checked = config, store, study, checked
        self.executor, self.budget, self.limits, self.progress = executor, budget, limits, progress
        self.publish = HypervolumePublisher(study.study, store, config.study_name)
        self.counts = Counts()
        self.pending: dict[int, Member] = {}
        self.errors: dict[str, None] = {}
        self.lrs: StudyRates | None = None
        self.grid_results: dict[tuple[str, float], EvaluationResult] = {}
        self.last: tuple[tuple[FrontPoint, ...], float | None] | None = None
        self.view = StudyView(config, store, checked, self.pending)
        self.measured: list[Member] = []  # successes not yet taken (take_measured)
        self.late_fine_tunes: list[Late] = []  # left out for the run's deadline, in order

    def emit(self, kind: str, /, **data: Any) -> None:
        """A progress event: this run's counters, the study's finished fine-tunes and this
        run's in flight, and ``data``."""
        if self.progress is not None:
            finished, _ = self.budget.spent()
            self.progress(
                SearchEvent(
                    kind,
                    dataclasses.replace(self.counts),
                    finished,
                    self.budget.trials,
                    len(self.pending),
                    **data,
                )
            )

    def lr_for(self, candidate: Candidate) -> float:
        """The fine-tuning rate of the candidate's family (the configured one when fixed)."""
        default = self.config.finetune.lr
        if self.lrs is None:
            return default
        return self.lrs.lr(family_of(candidate, self.checked.spec), default)

    def task(self, candidate: Candidate, lr: float | None = None) -> FinetuneTask:
        """The worker's task that fine-tunes ``candidate`` as the study measures it."""
        return finetune_task(
            self.config, self.checked.repeats, candidate, lr or self.lr_for(candidate)
        )

    def front(self) -> tuple[FrontPoint, ...]:
        """The measured front as last snapshotted (empty before the first)."""
        return self.last[0] if self.last is not None else ()

    def snapshot(self) -> tuple[tuple[FrontPoint, ...], float | None]:
        """Store the study's measured front and its hypervolume now, and return them."""
        self.last = snapshot(self.config, self.store, self.checked.flash_budget)
        return self.last

    # -- trials --------------------------------------------------------------------------------

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
            fixed = optuna.trial.FixedTrial(params)
            candidate = suggest_candidate(fixed, self.checked.spec, preset)
        except ValueError:  # not fully fixed: sampled, so not the grid's
            return False
        return (candidate.training.key, self.lr_for(candidate)) in self.grid_results

    def twin_next(self) -> bool:
        """Whether the next enqueued trial is a schedule twin (:meth:`twin`)."""
        waiting = self.study.waiting()
        return bool(waiting) and Attr.TWIN_OF in waiting[0].user_attrs

    def predict(
        self, trial: Any, candidate: Candidate, reference: bool = False
    ) -> HardwareCost | None:
        """Store the candidate and predict its cost; None when it is over a budget (pruned),
        unless it is the study's reference, which is measured over any budget."""
        payload = candidate.to_json()
        self.store.add_candidate(candidate.key, candidate.supernet, payload)
        cost = self.checked.hardware(candidate)
        constraints, reason = over_budget(self.config, self.checked.flash_budget, cost)
        self.study.note(
            trial,
            **{
                Attr.CANDIDATE_KEY: candidate.key,
                Attr.CANDIDATE: payload,
                Attr.MEMORY: cost.sram_bytes,
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
        self.reject(trial, reason)
        self.emit("pruned", trial=trial.number)
        return None

    def reject(self, trial: Any, reason: str) -> None:
        """Tell a trial PRUNED before any training (over a budget, or its candidate measured
        or in flight): a proposal that led nowhere."""
        self.study.tell_pruned(trial, reason)
        self.counts.pruned += 1
        self.limits.idle += 1

    def late(self, member: Member, late: Late) -> None:
        """Tell a trial PRUNED before any training because its fine-tune, predicted to take
        ``late.seconds``, would end after the run's deadline."""
        reason = f"its fine-tune, about {late.seconds:.0f} s, would end after the run's deadline"
        self.study.tell_pruned(member.trial, reason)
        self.counts.late += 1
        self.late_fine_tunes.append(late)
        self.emit("late", trial=member.trial.number, late=late)

    def reuse(self, trial: Any, candidate: Candidate, cost: HardwareCost) -> bool:
        """Tell the stored measurement of a candidate measured before, or store and tell a
        schedule twin of one (:meth:`twin`); False when none."""
        previous = self.store.find_evaluation(self.config.study_name, candidate.key, "measured")
        if previous is not None and previous.val_accuracy is not None:
            self.tell_stored(trial, previous, cost)
            return True
        return self.twin(trial, candidate, cost)

    def twin(self, trial: Any, candidate: Candidate, cost: HardwareCost) -> bool:
        """Store and tell ``candidate`` as the schedule twin of a candidate the study fine-tuned
        under another schedule of its frozen prefix: the same accuracies, its own predicted
        cost, no fine-tune (:func:`tinytune.search.front.recording.twin_record`). False when
        the study has no such measurement; True, the trial told PRUNED, when another trial is
        storing this very candidate."""
        fine_tuned = self.view.fine_tuned(candidate)
        if fine_tuned is None or fine_tuned.candidate_key == candidate.key:
            return False
        claim = self.store.claim_measurement(
            self.config.study_name, candidate.key, trial.number, None
        )
        if claim.outcome == "measured":  # stored by another driver meanwhile
            assert claim.evaluation is not None
            self.tell_stored(trial, claim.evaluation, cost)
            return True
        if claim.outcome != "claimed":
            self.reject(trial, f"trial {claim.holder} is measuring the same candidate")
            return True
        # the scheme that made the fine-tune (a preset's twin is a joint trial of its scheme)
        scheme = str((fine_tuned.details or {}).get("scheme") or trial.params.get("scheme", JOINT))
        record = twin_record(
            self.config,
            trial.number,
            candidate.key,
            cost,
            self.checked.latency_profile,
            scheme,
            fine_tuned,
        )
        self.store.finish_measurement(record)
        _, hv = self.snapshot()
        self.study.note(
            trial,
            **{
                Attr.TWIN_OF: record.details[TWIN_OF] if record.details else None,
                Attr.FIDELITY: "measured",
                Attr.TEST_ACCURACY: record.accuracy,
                **({Attr.HYPERVOLUME: hv} if hv is not None else {}),
            },
        )
        assert record.val_accuracy is not None
        latency = float(cost.latency_s or 0.0)
        self.study.tell_values(trial, (record.val_accuracy, float(cost.sram_bytes), latency))
        self.counts.twins += 1
        self.publish()
        self.emit("twin", trial=trial.number, accuracy=record.val_accuracy)
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
        self.study.tell_values(trial, (previous.val_accuracy, float(cost.sram_bytes), latency))
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
            None if member.reference else self.budget.trials,
            uncounted=self.budget.reference_key,
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
            self.reject(
                trial,
                f"trial {claim.holder} is measuring the same candidate"
                if claim.outcome == "in_flight"
                else "the study's budget of measured fine-tunes is spent",
            )
            return False
        self.limits.idle = 0
        self.pending[trial.number] = member
        # the grid fine-tuned candidates on whole images: the schedule changes no value
        key = member.candidate.training.key
        grid = self.grid_results.pop((key, self.lr_for(member.candidate)), None)
        if grid is not None:  # fine-tuned at this rate by the learning-rate grid
            self.record(trial.number, grid)
            return True
        self.executor.submit(trial.number, self.task(member.candidate))
        self.emit("submitted", trial=trial.number)
        return True

    def record(self, key: int, result: EvaluationResult) -> None:
        """Store a measured fine-tune's result, snapshot the front, and tell Optuna; a success
        waits in :meth:`take_measured`."""
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
            values = (record.val_accuracy, float(cost.sram_bytes), float(cost.latency_s or 0.0))
            self.study.tell_values(trial, values)
            self.counts.measured += 1
            self.count_origin(trial)
            self.measured.append(member)
        else:
            assert record.error is not None
            self.errors[record.error.splitlines()[0]] = None
            self.study.tell_failed(trial, record.error)
            self.counts.failed += 1
        self.publish()
        self.emit("finished", trial=trial.number, accuracy=record.val_accuracy, error=record.error)

    def take_measured(self) -> list[Member]:
        """The fine-tunes measured successfully since the last call, in order."""
        out, self.measured = self.measured, []
        return out

    def opening(self, trial: Any) -> bool:
        """Whether a trial is one of the baseline presets the study's set-up queued."""
        attrs = trial.user_attrs
        if attrs.get(Attr.REFERENCE) or Attr.MUTANT_OF in attrs:
            return False
        return trial.params.get("scheme") != JOINT and self.study.enqueued(trial)

    def count_origin(self, trial: Any) -> None:
        """Count a measured trial by where its candidate came from (:class:`Counts`)."""
        attrs = trial.user_attrs
        if attrs.get(Attr.REFERENCE):
            return
        if Attr.MUTANT_OF in attrs:
            self.counts.mutants += 1
        elif self.opening(trial):
            self.counts.presets += 1  # by the study's set-up
        else:
            self.counts.sampled += 1

    def abandon(self) -> None:
        """The run ends: its fine-tunes in flight are told FAIL and their claims released."""
        for member in self.pending.values():
            self.study.tell_failed(member.trial, "the run ended before its result came back")
        self.store.release_claims(self.config.study_name, list(self.pending))
        self.pending.clear()
