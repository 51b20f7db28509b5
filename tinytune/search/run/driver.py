"""The search loop: Optuna proposes, workers evaluate, the driver records.

Each round the driver asks the study for a trial and samples a candidate define-by-run. The
run's ledger (:mod:`tinytune.search.run.ledger`) predicts its cost once, prunes it over a budget,
tells it the stored result of a candidate measured before, or claims its measured fine-tune and
sends it to a worker, and records the result with the Pareto front and its hypervolume.

``trials`` counts the study's measured fine-tunes (successful or failed) over all runs and
drivers; ``time_budget_s`` stops new submissions after that many seconds of this run, and
``epoch_budget`` before this run's fine-tuning epochs (:attr:`SearchResult.train_epochs`,
those in flight or reserved by open brackets included) would exceed it;
``max_proposals`` caps the trials asked in this run. While other drivers' fine-tunes are in
flight and the budget may still free up, a driver waits and watches their heartbeats
(:mod:`tinytune.search.study.heartbeats`), so the trials of one that died are retried here. The
fidelity ladder (``proxy``, ``halving``) lives in :mod:`tinytune.search.ladder.brackets`: it
returns decisions (:mod:`tinytune.search.ladder.decisions`) that the driver carries out. The
learning-rate grid, the contribution analysis and the int8 verification of the front run on the
run's executor with :class:`tinytune.search.execution.worker_tasks.Tasks`, not with the run.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tinytune.db import Store
from tinytune.errors import ConfigError, flag
from tinytune.evaluators import HardwareCost
from tinytune.search.config.budgets import (
    DEFAULT_TRIALS,
    RunLimits,
    Sizing,
    StudyBudget,
    budgets_of,
    epoch_costs,
    over_budget,
    size_trials,
)
from tinytune.search.config.search_config import BASELINE_PRESETS, SearchConfig
from tinytune.search.execution.executor import Executor, InOrder, Metered
from tinytune.search.execution.worker_tasks import Tasks
from tinytune.search.front.pareto import contributions, hypervolume_gain, reference
from tinytune.search.front.recording import feasible, recipe_point, reference_point
from tinytune.search.ladder.brackets import Ladder, LadderContext
from tinytune.search.ladder.decisions import Bracket, Member, Submit
from tinytune.search.ladder.proxy import rank_correlation
from tinytune.search.run.events import SearchEvent, SearchResult, at_chance
from tinytune.search.run.ledger import Ledger
from tinytune.search.run.lr_grid import families_needed, rates_for_study
from tinytune.search.run.mutation import (
    climbing_mutant,
    joint_params,
    propose_mutant,
    screened_mutant,
)
from tinytune.search.run.preflight import Preflight, preflight
from tinytune.search.run.verify_int8 import int8_accuracies, verify_int8
from tinytune.search.study.adapter import StudyAdapter
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, Schedule, default_subnet, make_preset, suggest_candidate

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


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SearchConfig)}
DEFAULT_MUTATE, DEFAULT_CLIMB = _DEFAULTS["mutate"], _DEFAULTS["climb"]
"""The shares of mutants and of climbing mutants a search makes unless told: where a run makes
no mutants (a preset), only another share is worth a warning."""


def mutant_turn(fresh: int, share: float) -> bool:
    """Whether fresh proposal number ``fresh`` (from 0) is a mutant when a ``share`` of them are,
    spread evenly from the first on: 0.5 is every other one, 0.75 three of every four."""
    tolerance = 1e-9  # 4 × 0.75 is 3, not a hair above it
    return math.ceil((fresh + 1) * share - tolerance) > math.ceil(fresh * share - tolerance)


def climbing_turn(turn: int, share: float) -> bool:
    """Whether mutant turn number ``turn`` (from 0) climbs when a ``share`` of them do, spread
    evenly from the second on: 0.5 is turns 1, 3, 5, ...; below 1 the first turn draws by the
    front's hypervolume, for there is no climb to build on yet."""
    return not mutant_turn(turn, 1.0 - share)


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
        # counts the epochs every task of the run trained (in order: those handed back)
        self.executor = Metered(InOrder(executor) if config.reproducible else executor)
        self.checked, self.spec = checked, checked.spec
        # where the sampler may cut a fixed network: as the study first sampled it, else the
        # cuts whose cheapest candidate fits the budgets
        stored = study.choices("stages")
        self.cuts = tuple(int(c) for c in stored) if stored else checked.cuts
        # the reference is measured beside the budget; where the study's trials are not
        # given, the most of them until the grid's fine-tunes size them (Run.size)
        trials = config.trials if config.trials is not None else DEFAULT_TRIALS
        self.budget = StudyBudget(store, config.study_name, trials, checked.reference.key)
        self.sizing: Sizing | None = None
        self.limits = RunLimits(
            config.time_budget_s, config.max_proposals, config.max_idle_proposals, start
        )
        self.ledger = Ledger(
            config, store, study, checked, self.executor, self.budget, self.limits, progress
        )
        self.ledger.on_measured = self.enqueue_twins
        self.keys = itertools.count(-1, -1)
        self.tasks = Tasks(self.executor, self.ledger.task, self.next_key, self.ledger.emit)
        self.task_time = 0.0
        self.driver_s = 0.0  # the loop's own seconds, not its waits on workers (Run.loop)
        self.lr_cost = (0, 0.0)  # the grid's fine-tunes and task seconds in this run
        self.stopped_by: str | None = None  # the first of this run's limits that held it back
        self.screen_error: str | None = None  # the last short fine-tune's error, if one failed
        self.fresh = 0  # fresh proposals of this run (none waiting in the queue)
        self.mutants = 0  # mutant turns of this run (a share config.climb of them climb)
        self.works: dict[str, float | None] = {}  # Run.work by the whole candidate's key
        # the run's start by this machine's clock (Optuna's trial times are local, naive)
        self.started = datetime.datetime.now()
        self.shared = False  # another driver was seen running trials of the study
        self.ladder: Ladder | None = None
        if config.mutate and config.mutate != DEFAULT_MUTATE and config.preset is not None:
            # a share asked for, not the default, and not 0 (off, as the preset makes it);
            # Words: each front end's log handler names the option as it does
            log.warning(
                flag("mutate", config.mutate) + " changes update schemes; it is off with a preset"
            )
        if config.climb != DEFAULT_CLIMB and (config.preset is not None or not config.mutate):
            log.warning(
                flag("climb", config.climb) + " shares out the mutants; this run makes none"
            )
        if config.reproducible and config.time_budget_s is not None:
            log.warning(
                flag("reproducible", True)
                + " with "
                + flag("time_budget")
                + ": where the clock stops the run depends on the machine's speed, so another "
                "run may measure more or fewer fine-tunes"
            )
        if (config.proxy or config.halving) and config.preset is not None:
            log.warning("the fidelity ladder searches update schemes; it is off with a preset")
        elif config.proxy or config.halving:
            context = LadderContext(config, self.spec, store, self.limits, self.next_key)
            self.ladder = Ladder(context)

    # -- bookkeeping ---------------------------------------------------------------------------

    def emit(self, kind: str, /, **data: Any) -> None:
        """A progress event of the run (:meth:`Ledger.emit`)."""
        self.ledger.emit(kind, **data)

    def next_key(self) -> int:
        """A key for an executor task that is not a trial (negative)."""
        return next(self.keys)

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
        committed = self.executor.train_epochs + full * len(self.ledger.pending)
        fresh = full
        if self.ladder is not None:
            committed += self.ladder.committed_epochs(full, short)
            fresh += self.config.proxy_eta * short if self.ladder.screening else 0.0
        return committed + fresh <= self.config.epoch_budget + 1e-9

    def held_back(self, reason: str | None) -> None:
        """Note the first of this run's limits that held a proposal back (one of
        :data:`~tinytune.search.run.events.STOP_REASONS`): the run ends on it unless the study's
        budget is spent meanwhile. A limit, once reached, stays so."""
        if self.stopped_by is None:
            self.stopped_by = reason

    def free(self) -> int:
        busy = len(self.ledger.pending) + (self.ladder.busy() if self.ladder else 0)
        return self.executor.slots - busy

    def watch(self, force: bool = False) -> None:
        """Fail and retry the trials of drivers that stopped beating (every heartbeat); with
        ``--reproducible``, warn once when another driver runs trials of the study meanwhile
        (looked for as often: not on every turn of the loop)."""
        checked = self.study.fail_stale(force)
        self.ledger.counts.retried = self.study.retried
        if checked and self.config.reproducible and not self.shared:
            others = self.study.others_started(self.started)
            if others:
                self.shared = True
                log.warning(
                    flag("reproducible", True)
                    + f": another driver runs trials of this study (trial {others[0]}); which "
                    "trials each driver measures depends on their timing, so another run may "
                    "measure other candidates"
                )

    # -- the run -------------------------------------------------------------------------------

    def execute(self) -> SearchResult:
        ledger, config = self.ledger, self.config
        self.emit("start")
        self.watch(force=True)
        if config.tune_lr:
            self.choose_rates()
        self.size()
        if self.ladder is not None and not self.ladder.prepare(self.tasks):
            self.ladder = None
        try:
            self.loop()
        finally:
            ledger.abandon()
            if self.ladder is not None:
                ledger.prune(self.ladder.abandon())
        if self.limits.idle >= config.max_idle_proposals:
            log.warning(
                "stopped after %d proposals in a row that were over budget or already measured",
                self.limits.idle,
            )
        if self.limits.failed_screens >= config.max_idle_proposals:
            log.warning(
                "stopped after %d short fine-tunes in a row failed; the last: %s",
                self.limits.failed_screens,
                str(self.screen_error).splitlines()[0],
            )
        finished = self.budget.spent()[0]
        stopped_by = self.stopped_by if finished < self.budget.trials else None
        front, hv = ledger.last if ledger.last is not None else ledger.snapshot()
        search_epochs = self.executor.train_epochs
        int8_cost = (0, 0.0)
        if config.verify_int8:
            int8_cost = verify_int8(self.tasks, self.store, config.study_name, front)
        ledger.publish(force=True)
        tau = rank_correlation(
            self.store, config.study_name, "short" if config.halving else "proxy"
        )
        proxy = self.ladder.proxy if self.ladder is not None else None
        table = proxy.table if proxy is not None else None
        return SearchResult(
            study_name=config.study_name,
            counts=ledger.counts,
            front=front,
            hypervolume=hv,
            finished=finished,
            reference=reference_point(self.store, config.study_name, self.budget.reference_key),
            errors=tuple(ledger.errors),
            wall_time_s=time.monotonic() - self.limits.start,
            proposals=self.limits.proposals,
            contribution_tasks=table.tasks if table is not None else 0,
            contribution_s=proxy.contribution_s if proxy is not None else 0.0,
            task_time_s=self.task_time + (table.task_time_s if table is not None else 0.0),
            driver_s=self.driver_s,
            train_epochs=search_epochs,
            proxy_tau=tau.tau,
            proxy_pairs=tau.n,
            lr_calibration=ledger.lrs,
            lr_fine_tunes=self.lr_cost[0],
            lr_s=self.lr_cost[1],
            val_images=self.checked.val_images,
            repeats=self.checked.repeats,
            copies=self.checked.copies,
            stopped_by=stopped_by,
            int8=int8_accuracies(self.store, config.study_name, [p.candidate_key for p in front]),
            int8_runs=int8_cost[0],
            int8_epochs=self.executor.train_epochs - search_epochs,
            int8_s=int8_cost[1],
            latency_profile=self.checked.latency_profile,
            devices=dict(self.executor.devices),
            chance=self.chance(front),
            recipe=recipe_point(
                self.store,
                config.study_name,
                budgets_of(config, self.checked.flash_budget),
                default_subnet(self.spec),
            ),
            trials=self.budget.trials,
            sizing=self.sizing,
        )

    def chance(self, front: Sequence[Any]) -> float | None:
        """One over the classes when the study's most accurate candidate is at chance
        (:func:`~tinytune.search.run.events.at_chance`), else None."""
        reference = reference_point(self.store, self.config.study_name, self.budget.reference_key)
        accuracies = [p.val_accuracy for p in front if p.val_accuracy is not None]
        if reference is not None and reference.val_accuracy is not None:
            accuracies.append(reference.val_accuracy)
        n_classes, val_images = self.config.n_classes, self.checked.val_images
        return 1.0 / n_classes if at_chance(accuracies, n_classes, val_images) else None

    def choose_rates(self) -> None:
        """The study's rate per family (:func:`~tinytune.search.run.lr_grid.rates_for_study`):
        stored by an earlier run, or measured by this run's grid and stored with the study."""
        ledger = self.ledger
        stored = self.study.study_attr(Attr.LR_CALIBRATION)
        ledger.lrs, grid = rates_for_study(
            self.tasks,
            self.config,
            self.spec,
            self.checked.hardware,
            self.watch,
            stored,
            self.checked.train_images,
        )
        if grid is not None:  # this run's grid: its fine-tunes are this run's compute
            self.study.set_study_attr(Attr.LR_CALIBRATION, ledger.lrs.to_json())
            self.lr_cost = (ledger.lrs.fine_tunes, ledger.lrs.wall_time_s)
            self.task_time += self.lr_cost[1]
            ledger.grid_results = grid

    def size(self) -> None:
        """The study's budget of measured fine-tunes where its ``trials`` are not given: as
        many of :data:`~tinytune.search.config.budgets.DEFAULT_TRIALS` as fit in
        :data:`~tinytune.search.config.budgets.DEFAULT_SEARCH_S` on the run's workers, sized
        from the learning-rate grid's fine-tunes (:func:`~tinytune.search.config.budgets.
        size_trials`; never fewer than the baseline presets the study measures first). Sized
        once per study: stored with it, later runs keep it. Without a grid, the most."""
        config = self.config
        if config.trials is not None:
            return
        stored = self.study.study_attr(Attr.TRIALS_SIZED)
        if stored:
            self.sizing = Sizing.from_json(stored)
        elif self.ledger.lrs is not None and config.tune_lr:
            self.sizing = size_trials(
                self.ledger.lrs.seconds(),
                families_needed(config, self.spec),
                self.executor.slots,
                reference=config.reference,
                least=len(BASELINE_PRESETS) if config.baselines and config.preset is None else 1,
            )
            if self.sizing is not None:
                self.study.set_study_attr(Attr.TRIALS_SIZED, self.sizing.to_json())
                if config.reproducible and self.sizing.trials < DEFAULT_TRIALS:
                    log.warning(
                        flag("reproducible", True)
                        + f": the study's budget, {self.sizing.trials} measured fine-tunes, was "
                        "sized from this machine's fine-tunes, so another machine may size "
                        "another; " + flag("trials") + " fixes it"
                    )
        if self.sizing is not None:
            self.budget = dataclasses.replace(self.budget, trials=self.sizing.trials)
            self.ledger.budget = self.budget
            self.emit("sized")

    def loop(self) -> None:
        """Propose while workers are free, then record what they hand back, until nothing is
        left to propose or wait for. Adds the loop's own seconds to :attr:`driver_s`: all but
        those spent waiting on workers (or on other drivers) and the heartbeat's polls while
        it waits (:meth:`watch`), which hold up no worker."""
        ladder, ledger = self.ladder, self.ledger
        began, waited = time.monotonic(), 0.0
        try:
            while True:
                while self.free() > 0 and self.step():
                    pass
                if not ledger.pending and not (ladder and ladder.busy()):
                    if ladder and ladder.brackets and self.close_brackets():
                        continue
                    others = self.budget.others_in_flight(0) or self.study.left_running()
                    if not (self.limits.may_propose() and others):
                        break
                    self.emit("waiting")
                    paused = time.monotonic()
                    time.sleep(1.0)
                    waited += time.monotonic() - paused
                paused = time.monotonic()
                results = self.executor.wait(timeout=1.0)
                waited += time.monotonic() - paused
                self.record(results)
                paused = time.monotonic()
                self.watch()
                waited += time.monotonic() - paused
        finally:
            self.driver_s += time.monotonic() - began - waited

    def record(self, results: list[tuple[int, dict[str, Any]]]) -> None:
        """Record the results workers handed back."""
        ladder, ledger = self.ladder, self.ledger
        for key, result in results:
            self.task_time += float(result.get("wall_time_s") or 0.0)
            outcome = ladder.on_result(key, result) if ladder else None
            if outcome is None:
                ledger.record(key, result)
            else:  # a result of the ladder's own task
                ledger.note(outcome.notes)
                if outcome.event == "screened":
                    self.limits.screened(outcome.screen_error is not None)
                    self.screen_error = outcome.screen_error or self.screen_error
                self.emit(outcome.event, **outcome.data)

    def step(self) -> bool:
        """Do one thing that needs no result from a worker; False when nothing is left."""
        if self.ledger.twin_next():  # no fine-tune: beside every budget and limit
            return self.propose_twin()
        if self.ladder is not None:
            decision = self.ladder.step(self.ledger.front())
            if isinstance(decision, Submit):
                self.ledger.start(decision)
                return True
            if decision is not None:
                self.ledger.settle(decision)
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
        ledger, ladder = self.ledger, self.ladder
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
        if not waiting and self.config.mutate and self.config.preset is None:
            # a trial of a driver that died is retried before a mutant is queued ahead of it
            # (the sampler's ask takes the queue first)
            self.watch(force=True)
            if not self.study.waiting():
                if mutant_turn(self.fresh, self.config.mutate):
                    self.enqueue_mutant()
                self.fresh += 1
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
            self.emit("pruned", trial=trial.number)
            return True
        cost = ledger.predict(trial, candidate, reference)
        if cost is None:
            return True
        scheme = "full (reference)" if reference else self.config.preset or trial.params["scheme"]
        member = Member(trial, candidate, cost, str(scheme), reference)
        if reference:
            ledger.measure(member)
        elif ladder is not None and bracket_id is not None:
            self.join(ladder.bracket_of(bracket_id, candidate.subnet, waiting), member)
        elif ledger.reuse(trial, candidate, cost):
            pass
        elif ladder is not None and not waiting:
            bracket, siblings = ladder.open_fresh(member)
            for sibling in siblings:
                self.study.enqueue(dict(sibling.params), dict(sibling.attrs))
            self.join(bracket, member)
        else:  # a baseline, a retried trial, or no ladder: measured directly
            if ladder is not None:
                ledger.note(ladder.score_measured(member))
            ledger.measure(member)
        return True

    def enqueue_mutant(self) -> None:
        """Enqueue a mutant of a front point, or a baseline over a budget repaired into it
        (:func:`tinytune.search.run.mutation.propose_mutant`), as the next trial: one the joint
        space expresses, not measured or in flight, within the budgets. Nothing when the front
        is empty or no such mutant is found.

        A share ``config.climb`` of the mutant turns (every other one by default) climbs: its
        parent is the study's most accurate fine-tune within the budgets (of equally accurate
        ones, the one of most work, so that a climb level with its parent carries the next one
        on), and of up to
        :data:`~tinytune.search.run.mutation.CLIMB_DRAWS` mutants that do more work than it (a
        longer predicted forward pass on whole images: a larger input, a later cut, a deeper
        stage, a wider block; :meth:`work`) it proposes the one that does the most, a hill climb on
        accuracy that spends the budgets' headroom, so that a share of the fine-tunes goes where
        the most accurate point may be improved. Where no new mutant of that fine-tune does more
        work within the budgets (it sits at a budget's edge), the climb starts from the next most
        accurate fine-tune that can climb; where none can, the turn takes any mutant of the most
        accurate one, and the hypervolume's draw where it has no new mutant at all or where that
        fine-tune is at 100 % on validation (:meth:`climb_from`); the other turns draw the
        parent by its share of the front's hypervolume (:meth:`parents`)."""
        ledger, config = self.ledger, self.config
        climbs = climbing_turn(self.mutants, config.climb)
        self.mutants += 1
        parents, weights = self.parents()
        if not parents:
            return
        baselines = []
        if config.baselines:  # those over a budget are repaired into it
            subnet = default_subnet(self.spec)
            baselines = [make_preset(name, self.spec, subnet) for name in BASELINE_PRESETS]
        rng = random.Random(f"{config.seed}:{self.limits.proposals}")
        # a front point a preset made keeps its rule in half of its mutants
        rules = {p.candidate_key: p.scheme for p in ledger.front() if p.scheme in BASELINE_PRESETS}
        patches = self.checked.hardware.patch_choices
        mutate = functools.partial(
            propose_mutant,
            spec=self.spec,
            rng=rng,
            fits=ledger.fits,
            taken=ledger.taken(),
            cuts=self.cuts or None,
            rules=rules,
            patches=patches,
        )
        found, climbed, first = None, False, None
        for top in self.climb_from() if climbs else ():  # the most accurate that can climb
            first = first or top
            found = climbing_mutant(top, self.work, mutate)
            if found is not None:
                climbed = True
                break
        if first is not None and found is None:
            found = mutate([first], [])
        if found is None:
            drawn = functools.partial(mutate, parents, baselines, weights=weights)
            found = screened_mutant(self.hypervolume_gain, drawn)
        if found is not None:
            params, parent, _ = found
            attrs: dict[str, Any] = {Attr.MUTANT_OF: parent.key}
            if climbed:
                attrs[Attr.CLIMB] = True
            self.study.enqueue(params, attrs)

    def hypervolume_gain(self, child: Candidate, parent: Candidate) -> float:
        """The share of the hypervolume box that ``child`` would add to the front, under each
        schedule of its frozen prefix that it would be priced at (:meth:`schedules`), were it
        as accurate on validation as ``parent`` (a baseline repaired into the budgets, never
        fine-tuned, as the front's median point). Its cost is the hardware model's, exact; its
        accuracy a guess that favours the mutants of less cost, which the climbing turns
        balance. The reference is the front's (:func:`tinytune.search.front.pareto.reference`)."""
        front = self.ledger.front()
        points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in front]
        if not points:
            return 0.0
        accuracy = {p.candidate_key: p.val_accuracy for p in front}.get(parent.key)
        if accuracy is None:
            accuracy = sorted(p[0] for p in points)[len(points) // 2]
        ref = reference(points, self.config.sram_budget_bytes, self.config.latency_budget_s)
        new = [(accuracy, float(c.arena_bytes), c.latency_s or 0.0) for c in self.costs(child)]
        return hypervolume_gain(new, points, ref)

    def costs(self, candidate: Candidate) -> list[HardwareCost]:
        """The predicted costs of ``candidate`` under each schedule a fine-tune of it is priced
        at (its own and its schedule twins', :meth:`enqueue_twins`) within the budgets."""
        out: list[HardwareCost] = []
        for _, scheduled in self.schedules(candidate):
            cost = self.checked.hardware(scheduled)
            if over_budget(self.config, self.checked.flash_budget, cost)[1] is None:
                out.append(cost)
        return out

    def work(self, candidate: Candidate) -> float | None:
        """The predicted seconds of ``candidate``'s forward pass on whole images (None without a
        latency model): how much network its features come from, grown by a larger input, a
        later cut, a deeper stage or a wider block, not by more of it updated. A climb that
        took the longest training step instead lengthened the bias-updated tail before it
        reached a larger input or a later cut, and found less accurate points (measured in
        ``docs/bench/archive/search.md``). Priced once a run: a climb ranks the most accurate
        fine-tunes by it on every climbing turn."""
        whole = dataclasses.replace(candidate, schedule=Schedule())
        if whole.key not in self.works:
            latency = self.checked.hardware.latency(whole)
            self.works[whole.key] = None if latency is None else latency.inference_s
        return self.works[whole.key]

    def climb_from(self) -> Iterator[Candidate]:
        """The study's fine-tunes within the budgets a climb may start from, read as they are
        asked for: the most accurate on validation first and, of equally accurate ones, the
        one whose forward pass does the most work (:meth:`work`) first, so that a climb level
        with its parent carries the next climb on from where it got to, a hill climb's move
        along a plateau (such a point is not on the front: its parent, as accurate at less
        cost, dominates it). One candidate per fine-tune: of its schedule twins, the least SRAM.
        None when the most accurate is right on every validation image, where no climb can be
        more accurate."""
        stored = self.store.evaluations(self.config.study_name, fidelity="measured", status="ok")
        ok = [e for e in stored if feasible(self.config, self.checked.flash_budget, e)]
        ok.sort(key=lambda e: (-(e.val_accuracy or 0.0), e.memory_bytes or 0))
        if not ok or (ok[0].val_accuracy or 0.0) >= 1.0:
            return
        seen: set[str] = set()
        for _, level in itertools.groupby(ok, key=lambda e: e.val_accuracy):
            tied: list[Candidate] = []
            for e in level:
                record = self.store.get_candidate(e.candidate_key)
                candidate = None if record is None else Candidate.from_json(record.payload)
                if candidate is not None and candidate.training.key not in seen:
                    seen.add(candidate.training.key)
                    tied.append(candidate)
            yield from sorted(tied, key=lambda c: -(self.work(c) or 0.0))

    def parents(self) -> tuple[list[Candidate], list[float]]:
        """The front's fine-tuned candidates a mutant may come from, one per fine-tune (the
        schedule twin of least SRAM standing for the others), and each one's chance: its
        exclusive share of the front's hypervolume (:func:`tinytune.search.front.pareto.
        contributions`), as SMS-EMOA selects, plus a tenth of the mean share so that no point
        of the front is never drawn."""
        front, candidates = [], []
        for p in self.ledger.front():
            record = self.store.get_candidate(p.candidate_key)
            if record is not None:
                front.append(p)
                candidates.append(Candidate.from_json(record.payload))
        if not candidates:
            return [], []
        groups = [c.training.key for c in candidates]
        points = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in front]
        ref = reference(points, self.config.sram_budget_bytes, self.config.latency_budget_s)
        share = contributions(groups, points, ref)
        chosen: dict[str, Candidate] = {}
        by_memory = sorted(range(len(front)), key=lambda i: front[i].memory_bytes)
        for i in by_memory:
            chosen.setdefault(groups[i], candidates[i])
        floor = 0.1 * sum(share.values()) / len(share) or 1.0
        return list(chosen.values()), [share[g] + floor for g in chosen]

    def enqueue_twins(self, member: Member) -> None:
        """Enqueue the schedule twins of a candidate just measured: the same candidate asking
        for every other patch count the search proposes (:attr:`tinytune.evaluators.
        HardwareEvaluator.patch_choices`), scheduled as any proposal is, where that is another
        candidate within the budgets that the joint space expresses and the study has not
        stored. The frozen prefix computes the same values patch by patch, so a twin is told
        the measured accuracies at its own cost (:meth:`~tinytune.search.run.ledger.Ledger.
        twin`): a front point of less SRAM for more time, or the converse, at no fine-tune.
        None with a preset (its schedule is the one that fits) or the reference."""
        patches = self.checked.hardware.patch_choices
        if member.reference or not patches or self.config.preset is not None:
            return
        for asked, scheduled in self.schedules(member.candidate):
            if scheduled.key == member.candidate.key:
                continue
            stored = self.store.find_evaluation(self.config.study_name, scheduled.key, "measured")
            if stored is not None:
                continue
            params = joint_params(asked, self.spec, patches)
            if params is not None and self.ledger.fits(asked):
                self.study.enqueue(params, {Attr.TWIN_OF: member.trial.number})

    def schedules(self, candidate: Candidate) -> list[tuple[Candidate, Candidate]]:
        """``candidate`` asking for each patch count the search proposes, and as the hardware
        model schedules that (one pair per schedule it makes; none for a count its network
        cannot run): the candidate a fine-tune of it is priced as, under each schedule of its
        frozen prefix."""
        hardware = self.checked.hardware
        out: dict[str, tuple[Candidate, Candidate]] = {}
        for n in hardware.patch_choices or (None,):
            asked = candidate
            if n is not None:
                asked = dataclasses.replace(
                    candidate, schedule=Schedule(n, 0) if n > 1 else Schedule()
                )
            try:
                scheduled = hardware.schedule(asked)
            except ConfigError:  # a count this network cannot run
                continue
            out.setdefault(scheduled.key, (asked, scheduled))
        return list(out.values())

    def drawn(self, trial: Any, preset: str | None) -> Candidate | None:
        """The candidate a trial just asked for selects (``preset``'s scheme where given), on
        the study's cuts and patch counts; None where another driver finished the trial
        meanwhile (:meth:`StudyAdapter.suggest`)."""
        patches, cuts = self.checked.hardware.patch_choices, self.cuts or None
        return self.study.suggest(
            trial, lambda t: suggest_candidate(t, self.spec, preset, cuts, patches)
        )

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

    # -- carrying out the ladder's decisions ---------------------------------------------------

    def join(self, bracket: Bracket, member: Member) -> None:
        """A member joins its bracket, unless its candidate is in it already (told PRUNED) or
        was measured before (told the stored result)."""
        assert self.ladder is not None
        reason = self.ladder.refusal(bracket, member)
        if reason is not None:
            self.ledger.reject(member.trial, reason)
        elif not self.ledger.reuse(member.trial, member.candidate, member.cost):
            self.ledger.note([self.ladder.join(bracket, member)])
            self.limits.idle = 0

    def close_brackets(self) -> bool:
        """Nothing runs and nothing more can be proposed: decide the brackets whose members
        are scored as they stand; False when none could be."""
        assert self.ladder is not None
        closed = False
        while (verdict := self.ladder.close(self.ledger.front())) is not None:
            self.ledger.settle(verdict)
            closed = True
        return closed
