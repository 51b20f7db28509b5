"""The search loop: ask, measure, record, stop.

Each round the driver asks the study for a trial and samples its candidate define-by-run; the
run's ledger (:mod:`tinytune.search.run.ledger`) predicts its cost once, prunes it over a budget,
tells it the stored result of a candidate measured before, or claims its measured fine-tune and
sends it to a worker, and records the result with the Pareto front and its hypervolume. What the
study's queue holds before a fresh ask is the proposal policy's (:mod:`tinytune.search.
proposals`); the fidelity ladder's decisions are the ladder's (:mod:`tinytune.search.ladder`),
carried out by :mod:`~tinytune.search.run.ladder_steps`.

``trials`` counts the study's measured fine-tunes over all runs and drivers; ``time_budget_s``,
``epoch_budget`` and ``max_proposals`` hold back this run's new submissions. While other drivers'
fine-tunes are in flight and the budget may still free up, a driver waits and watches their
heartbeats (:mod:`tinytune.search.study.heartbeats`), so the trials of one that died are retried
here.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from tinytune.db import Store
from tinytune.errors import ConfigError
from tinytune.evaluators import EvaluationResult
from tinytune.search.config.budgets import (
    DEFAULT_SEARCH_S,
    DEFAULT_TRIALS,
    RunLimits,
    StudyBudget,
    epoch_costs,
)
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.executor import Executor, InOrder, Metered
from tinytune.search.execution.worker_tasks import Tasks
from tinytune.search.ladder.brackets import Ladder, LadderContext
from tinytune.search.ladder.decisions import Member, Submit
from tinytune.search.proposals import Context, Policy, opening
from tinytune.search.run.events import SearchEvent, SearchResult
from tinytune.search.run.ladder_steps import LadderSteps
from tinytune.search.run.ledger import Ledger
from tinytune.search.run.outcome import Ending, Tally, search_result, warn_stops
from tinytune.search.run.preflight import Preflight, preflight, warn_idle_options
from tinytune.search.run.study_setup import study_rates, study_trials
from tinytune.search.run.timing import Deadline, Late, Sizes, Timing, grid_timing, kept_prefixes
from tinytune.search.run.verify_int8 import verify_int8
from tinytune.search.study.adapter import StudyAdapter
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, suggest_candidate

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
    study = StudyAdapter(config, store, opening(config))
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
        warn_idle_options(config)
        self.config, self.store, self.study = config, store, study
        # counts the epochs every task of the run trained (in order: those handed back)
        self.executor = Metered(InOrder(executor) if config.reproducible else executor)
        self.checked, self.spec = checked, checked.spec
        # where the sampler may cut a fixed network: as the study first sampled it, else the
        # cuts whose cheapest candidate fits the budgets
        stored = study.choices("stages")
        self.cuts = tuple(int(c) for c in stored) if stored else checked.cuts
        # the reference is measured beside the budget; where the study's trials are not
        # given, the most of them until the grid's fine-tunes size them
        trials = config.trials if config.trials is not None else DEFAULT_TRIALS
        self.budget = StudyBudget(store, config.study_name, trials, checked.reference.key)
        self.limits = RunLimits(
            config.time_budget_s, config.max_proposals, config.max_idle_proposals, start
        )
        ledger = Ledger(
            config, store, study, checked, self.executor, self.budget, self.limits, progress
        )
        self.ledger = ledger
        view = ledger.view
        self.policy = Policy(
            Context(
                config,
                self.spec,
                store,
                checked.hardware,
                checked.flash_budget,
                self.cuts,
                front=ledger.front,
                fits=view.fits,
                taken=view.taken,
            )
        )
        self.keys = itertools.count(-1, -1)
        self.tasks = Tasks(self.executor, ledger.task, self.next_key, ledger.emit)
        self.tally = Tally()
        self.rungs: LadderSteps | None = None  # the fidelity ladder, where one runs
        self.deadline: Deadline | None = None  # the default run's (:meth:`default_deadline`)
        if (config.proxy or config.halving) and config.preset is None:
            context = LadderContext(config, self.spec, store, self.limits, self.next_key)
            self.rungs = LadderSteps(Ladder(context), ledger, self.limits)

    def next_key(self) -> int:
        """A key for an executor task that is not a trial (negative)."""
        return next(self.keys)

    def budget_left(self) -> bool:
        """Whether another measured fine-tune may be started (or reserved by a bracket): the
        study's count, this run's clock, and the epoch budget, beside what is spent, in flight
        and reserved, where a fresh proposal (a measured fine-tune, or a bracket with its
        screenings) still fits."""
        ladder = self.rungs.ladder if self.rungs else None
        if not (
            self.budget.left(len(ladder.brackets) if ladder else 0) and self.limits.time_left()
        ):
            return False
        if self.config.epoch_budget is None:
            return True
        full, short = epoch_costs(self.config, self.checked.repeats)
        committed = self.executor.train_epochs + full * len(self.ledger.pending)
        fresh = full
        if ladder is not None:
            committed += ladder.committed_epochs(full, short)
            fresh += self.config.proxy_eta * short if ladder.screening else 0.0
        return committed + fresh <= self.config.epoch_budget + 1e-9

    def held_back(self, reason: str | None) -> None:
        """Note the first of this run's limits that held a proposal back (one of
        :data:`~tinytune.search.run.events.STOP_REASONS`): the run ends on it unless the study's
        budget is spent meanwhile. A limit, once reached, stays so."""
        if self.tally.stopped_by is None:
            self.tally.stopped_by = reason

    def free(self) -> int:
        """The executor's slots that no fine-tune or ladder task of this run holds."""
        busy = len(self.ledger.pending) + (self.rungs.ladder.busy() if self.rungs else 0)
        return self.executor.slots - busy

    def watch(self, force: bool = False) -> None:
        """Fail and retry the trials of drivers that stopped beating
        (:meth:`~tinytune.search.study.StudyAdapter.watch`)."""
        self.study.watch(force)
        self.ledger.counts.retried = self.study.retried

    # -- the run ---

    def execute(self) -> SearchResult:
        ledger, config = self.ledger, self.config
        ledger.emit("start")
        self.watch(force=True)
        if config.tune_lr:
            ledger.lrs, grid = study_rates(
                self.study, self.tasks, config, self.checked, self.watch
            )
            if grid is not None:  # this run's grid: its fine-tunes are this run's compute
                self.tally.lr_cost = (ledger.lrs.fine_tunes, ledger.lrs.wall_time_s)
                self.tally.task_time += ledger.lrs.wall_time_s
                ledger.grid_results = grid
        timing = self.timing()
        self.deadline = self.default_deadline(timing)
        # with a deadline the clock holds the run to its minutes: no number is sized for it
        self.tally.sizing = sizing = study_trials(
            self.study, config, self.checked, timing, self.executor.slots, self.deadline is None
        )
        if sizing is not None:
            self.budget = dataclasses.replace(self.budget, trials=sizing.trials)
            ledger.budget = self.budget
            ledger.emit("sized")
        if self.rungs is not None and not self.rungs.ladder.prepare(self.tasks):
            self.rungs = None
        try:
            self.loop()
        finally:
            ledger.abandon()
            if self.rungs is not None:
                self.rungs.prune(self.rungs.ladder.abandon())
        warn_stops(config, self.limits, self.tally)
        finished = self.budget.spent()[0]
        front, hv = ledger.last if ledger.last is not None else ledger.snapshot()
        search_epochs = self.executor.train_epochs
        int8_cost = (0, 0.0)
        if config.verify_int8:
            int8_cost = verify_int8(self.tasks, self.store, config.study_name, front)
        ledger.publish(force=True)
        ending = Ending(finished, front, hv, search_epochs, int8_cost)
        ladder = self.rungs.ladder if self.rungs else None
        return search_result(
            config,
            self.store,
            self.checked,
            ledger,
            ladder,
            self.budget,
            self.limits,
            self.executor,
            self.tally,
            ending,
        )

    def timing(self) -> Timing | None:
        """The workers' speeds, from the learning-rate grid's fine-tunes (None without a
        grid)."""
        if self.ledger.lrs is None:
            return None
        c = self.checked
        sizes = Sizes(
            c.train_images, c.val_images + c.test_images, self.config.finetune.epochs, c.repeats
        )
        return grid_timing(self.ledger.lrs, c.hardware, sizes)

    def default_deadline(self, timing: Timing | None) -> Deadline | None:
        """A default run's deadline, :data:`DEFAULT_SEARCH_S` from its start, where neither its
        trials nor a time budget are given and it need not be reproducible: a measured
        fine-tune starts only where it is predicted to end by then. None otherwise."""
        config = self.config
        if (
            timing is None
            or self.ledger.lrs is None
            or config.trials is not None
            or config.time_budget_s is not None
            or config.reproducible
        ):
            return None
        kept = kept_prefixes(self.ledger.lrs, self.checked.hardware)
        return Deadline(timing, self.checked.hardware, self.limits.start + DEFAULT_SEARCH_S, kept)

    def loop(self) -> None:
        """Propose while workers are free, then record what they hand back, until nothing is
        left to propose or wait for. Adds the loop's own seconds to :attr:`Tally.driver_s`: all but
        those spent waiting on workers (or on other drivers) and the heartbeat's polls while
        it waits (:meth:`watch`), which hold up no worker."""
        ledger = self.ledger
        began, waited = time.monotonic(), 0.0
        try:
            while True:
                while self.free() > 0 and self.step():
                    self.follow()
                ladder = self.rungs.ladder if self.rungs else None
                if not ledger.pending and not (ladder and ladder.busy()):
                    if self.rungs and ladder and ladder.brackets and self.rungs.close():
                        self.follow()
                        continue
                    others = self.budget.others_in_flight(0) or self.study.left_running()
                    if not (self.limits.may_propose() and others):
                        break
                    ledger.emit("waiting")
                    paused = time.monotonic()
                    time.sleep(1.0)
                    waited += time.monotonic() - paused
                paused = time.monotonic()
                results = self.executor.wait(timeout=1.0)
                waited += time.monotonic() - paused
                self.record(results)
                self.follow()
                paused = time.monotonic()
                self.watch()
                waited += time.monotonic() - paused
        finally:
            self.tally.driver_s += time.monotonic() - began - waited

    def record(self, results: list[tuple[int, EvaluationResult]]) -> None:
        """Record the results workers handed back."""
        ledger = self.ledger
        for key, result in results:
            self.tally.task_time += result.wall_time_s
            outcome = self.rungs.ladder.on_result(key, result) if self.rungs else None
            if outcome is None:
                ledger.record(key, result)
            else:  # a result of the ladder's own task
                assert self.rungs is not None
                self.rungs.note(outcome.notes)
                if outcome.event == "screened":
                    self.limits.screened(outcome.screen_error is not None)
                    self.tally.screen_error = outcome.screen_error or self.tally.screen_error
                ledger.emit(outcome.event, **outcome.data)

    def follow(self) -> None:
        """Enqueue what the policy answers to each fine-tune measured since the last call."""
        for member in self.ledger.take_measured():
            if member.reference:
                continue
            for params, attrs in self.policy.measured(member.candidate, member.trial.number):
                self.study.enqueue(params, attrs)

    def step(self) -> bool:
        """Do one thing that needs no result from a worker; False when nothing is left."""
        if self.ledger.twin_next():  # no fine-tune: beside every budget and limit
            return self.propose_twin()
        if self.rungs is not None:
            decision = self.rungs.ladder.step(self.ledger.front())
            if isinstance(decision, Submit):
                self.rungs.start(decision)
                return True
            if decision is not None:
                self.rungs.settle(decision)
                return True
        if self.limits.may_propose():
            return self.propose()
        self.held_back(self.limits.spent())
        # out of time or proposals: what the learning-rate grid measured is still recorded
        return self.ledger.grid_measured_next() and self.propose(free=True)

    def propose(self, free: bool = False) -> bool:
        """Ask for a trial and start measuring it (``free``: one the learning-rate grid has
        measured, within the study's count of measured fine-tunes but beside this run's time
        and epoch budgets)."""
        ledger, rungs = self.ledger, self.rungs
        ladder = rungs.ladder if rungs else None
        waiting = self.study.waiting()
        bracket_id = waiting[0].user_attrs.get(Attr.BRACKET) if waiting and ladder else None
        retried = bool(waiting) and Attr.FAILED_TRIAL in waiting[0].system_attrs
        opened = ladder is not None and bracket_id in ladder.brackets
        free = free or ledger.grid_measured_next()
        brackets = len(ladder.brackets) if ladder else 0
        left = self.budget.left(brackets) if free else self.budget_left()
        if not (opened or retried) and not left:
            if not free and self.budget.left(brackets):  # this run's limit, not the study's
                self.held_back("time" if not self.limits.time_left() else "epochs")
            return False  # a retried trial is still told (its result may be stored)
        if not waiting and self.policy.active:
            # a trial of a driver that died is retried before a mutant is queued ahead of it
            # (the sampler's ask takes the queue first)
            self.watch(force=True)
            if not self.study.waiting():
                found = self.policy.fresh_turn(self.limits.proposals)
                if found is not None:
                    self.study.enqueue(*found)
        trial = self.study.ask()
        self.limits.proposals += 1
        reference = bool(trial.user_attrs.get(Attr.REFERENCE))
        preset = None if reference else self.config.preset
        drawn = self.drawn(trial, preset)
        if drawn is None:  # another driver finished it meanwhile
            return True
        candidate = drawn
        try:  # its frozen prefix patch by patch where whole images exceed the SRAM budget
            candidate = self.checked.hardware.schedule(candidate)
        except ConfigError as e:  # a fixed schedule this proposal's network cannot run
            ledger.reject(trial, str(e))
            ledger.emit("pruned", trial=trial.number)
            return True
        cost = ledger.predict(trial, candidate, reference)
        if cost is None:
            return True
        scheme = "full (reference)" if reference else self.config.preset or trial.params["scheme"]
        member = Member(trial, candidate, cost, str(scheme), reference)
        if reference:
            self.measure(member, free)
        elif rungs is not None and bracket_id is not None:
            rungs.join(rungs.ladder.bracket_of(bracket_id, candidate.subnet, waiting), member)
        elif ledger.reuse(trial, candidate, cost):
            pass
        elif rungs is not None and not waiting:
            bracket, siblings = rungs.ladder.open_fresh(member)
            for sibling in siblings:
                self.study.enqueue(dict(sibling.params), dict(sibling.attrs))
            rungs.join(bracket, member)
        else:  # a baseline, a retried trial, or no ladder: measured directly
            if rungs is not None:
                rungs.note(rungs.ladder.score_measured(member))
            self.measure(member, free)
        return True

    def measure(self, member: Member, free: bool) -> None:
        """Measure ``member`` (:meth:`Ledger.measure`), unless the run has a deadline that its
        fine-tune, predicted, would end after (``free``: the grid measured it): then it is
        told PRUNED and said so, and where it is a proposal of the search's own (not the
        reference or a baseline preset) the run proposes no more."""
        deadline = self.deadline
        if deadline is None or free:
            self.ledger.measure(member)
            return
        seconds = deadline.seconds(member.candidate)
        if deadline.fits(seconds):
            deadline.started(member.candidate)
            self.ledger.measure(member)
            return
        opening = member.reference or self.ledger.opening(member.trial)
        self.ledger.late(member, Late(member.scheme, seconds, opening))
        if not opening:
            self.limits.late = True

    def propose_twin(self) -> bool:
        """Ask for the schedule twin waiting first in the queue and tell it from the fine-tune
        it shares (pruned when over a budget, or when that fine-tune is gone)."""
        trial = self.study.ask()
        drawn = self.drawn(trial, None)
        if drawn is None:  # another driver finished it meanwhile
            return True
        candidate = drawn
        try:
            candidate = self.checked.hardware.schedule(candidate)
        except ConfigError as e:
            self.ledger.reject(trial, str(e))
            return True
        cost = self.ledger.predict(trial, candidate)
        if cost is not None and not self.ledger.reuse(trial, candidate, cost):
            self.ledger.reject(trial, "the fine-tune this schedule twin shares is not stored")
        return True

    def drawn(self, trial: Any, preset: str | None) -> Candidate | None:
        """The candidate a trial just asked for selects (``preset``'s scheme where given), on
        the study's cuts and patch counts; None where another driver finished the trial
        meanwhile (:meth:`StudyAdapter.suggest`)."""
        patches, cuts = self.checked.hardware.patch_choices, self.cuts or None
        return self.study.suggest(
            trial, lambda t: suggest_candidate(t, self.spec, preset, cuts, patches)
        )
