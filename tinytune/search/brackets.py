"""The fidelity ladder's brackets: η trials on one sub-network, scored at a low fidelity, of
which one is promoted to a measured fine-tune.

The low rung is either the additive proxy (``--proxy``) or a short fine-tune (``--halving``:
successive halving on epochs and training images). Optuna's pruners judge a trial by
intermediate values of one objective, which a multi-objective study cannot report
(``Trial.report`` refuses it), so the rungs are kept here rather than in a pruner.

With the proxy: before the search, the contribution analysis of the study's reference sub-network
(:mod:`tinytune.search.contribution`; stored and reused by key) gives MCUNetV3's additive gains.
Each fresh proposal then opens a bracket: η−1 sibling trials on its sub-network are enqueued
(the sampler draws their schemes), all are scored by the proxy (:mod:`tinytune.search.proxy`;
the sub-network's classifier-only accuracy is measured once, stored and reused), stored as
``proxy`` evaluations, and the member chosen by :func:`tinytune.search.ladder.choose_promotion`
is measured; Optuna is told PRUNED for the others, as a rung of successive halving prunes.

With short fine-tunes: each member is fine-tuned for ``screen_epochs`` epochs on a stratified
``screen_fraction`` of the training images (stored as a ``short`` evaluation and reused), and
the member whose short validation accuracy adds most to the measured front is promoted by the
same rule. No contribution analysis and no classifier-only bases are needed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinytune.db import EvaluationRecord
from tinytune.errors import ModelError
from tinytune.evaluators import HardwareCost
from tinytune.search.contribution import (
    ContributionEntry,
    TableIdentity,
    file_sha256,
    run_contributions,
    store_entry,
)
from tinytune.search.contribution_table import ContributionTable, build_table
from tinytune.search.ladder import calibration_offset, choose_promotion, reference
from tinytune.search.proxy import ProxyEstimate, estimate
from tinytune.search.study import Attr
from tinytune.spaces import (
    Candidate,
    LiteResidualConfig,
    SubnetConfig,
    UpdateScheme,
    default_subnet,
)

if TYPE_CHECKING:
    from tinytune.search.driver import Run

__all__ = ["Bracket", "Ladder", "Member"]

log = logging.getLogger(__name__)


@dataclass
class Member:
    """A trial of a bracket waiting for its proxy score."""

    trial: Any
    candidate: Candidate
    cost: HardwareCost
    scheme: str
    reference: bool = False
    screen: float | None = None  # the short fine-tune's validation accuracy
    screen_state: str = "todo"  # todo | running | done | failed


@dataclass
class Bracket:
    """Trials on one sub-network, scored by the proxy, of which one is measured."""

    id: int
    subnet: SubnetConfig
    siblings_left: int
    members: list[Member] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    base: float | None = None
    base_state: str = "unknown"  # known | running | failed | unknown


class Ladder:
    """The brackets of one run, over the driver's study, store and executor."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.brackets: dict[int, Bracket] = {}
        self.base_tasks: dict[int, SubnetConfig] = {}  # executor key -> its sub-network
        self.bases: dict[str, float | None] = {}
        self.table: ContributionTable | None = None
        self.identity: TableIdentity | None = None
        self.contribution_s = 0.0
        self.screening = run.config.halving
        self.screen_tasks: dict[int, Member] = {}  # executor key -> the member it screens

    def busy(self) -> int:
        """Tasks of the ladder in flight (classifier-only bases, short fine-tunes)."""
        return len(self.base_tasks) + len(self.screen_tasks)

    def committed_epochs(self, full: float, short: float) -> float:
        """Epochs of the ladder's tasks in flight and of what its open brackets still need (a
        measured fine-tune each, and the screenings of members and siblings to come)."""
        total = full * len(self.base_tasks) + short * len(self.screen_tasks)
        for bracket in self.brackets.values():
            total += full
            if self.screening:
                todo = sum(1 for m in bracket.members if m.screen_state == "todo")
                total += short * (todo + max(0, bracket.siblings_left))
        return total

    def on_result(self, key: int, result: dict[str, Any]) -> bool:
        """Take a result of the ladder's own tasks; False when ``key`` is not one."""
        if key in self.base_tasks:
            self.on_base(key, result)
        elif key in self.screen_tasks:
            self.on_screen(key, result)
        else:
            return False
        return True

    def prepare(self) -> bool:
        """Measure (or reuse) the contribution table of the study's reference sub-network;
        False when it cannot be had (the ladder is then off for the run). Screening by short
        fine-tunes needs none."""
        run, config = self.run, self.run.config
        if self.screening:
            return True
        try:
            digest = file_sha256(config.checkpoint)
        except OSError as e:
            raise ModelError(
                f"cannot read the supernet weights {config.checkpoint!r} to identify its "
                f"contribution table: {e.strerror or e}"
            ) from e
        self.identity = TableIdentity(
            run.spec.name,
            config.checkpoint,
            digest,
            config.dataset,
            config.data_seed,
            config.finetune,
            default_subnet(run.spec),
        )
        started = time.monotonic()
        self.table = run_contributions(
            run.store,
            run.executor,
            self.identity,
            run.spec,
            config.contribution_plan,
            run.task,
            run.next_key,
            keep_going=run.limits.time_left,
            progress=lambda done, total: run.emit("contributions", done=done, total=total),
        )
        self.contribution_s = time.monotonic() - started
        if self.table is None:
            log.warning(
                "the classifier-only fine-tune of the reference sub-network failed; the proxy "
                "ladder is off for this run"
            )
            return False
        self.bases[self.identity.key] = self.table.base
        run.emit("contributions_ready", done=self.table.tasks, total=self.table.tasks)
        return True

    def known_base(self, subnet: SubnetConfig) -> float | None:
        """The classifier-only validation accuracy of ``subnet`` if it is measured."""
        assert self.identity is not None
        key = self.identity.with_subnet(subnet).key
        if key not in self.bases:
            table = build_table(key, self.run.spec, subnet, self.run.store.contributions(key))
            if table is None:
                return None
            self.bases[key] = table.base
        return self.bases[key]

    def open(self, bracket_id: int, subnet: SubnetConfig, siblings: int) -> Bracket:
        bracket = Bracket(bracket_id, subnet, max(0, siblings))
        base = None if self.screening else self.known_base(subnet)
        if self.screening:
            bracket.base_state = "known"  # short fine-tunes need no classifier-only base
        elif base is not None:
            bracket.base, bracket.base_state = base, "known"
        self.brackets[bracket_id] = bracket
        return bracket

    def open_fresh(self, member: Member) -> None:
        """A fresh proposal opens a bracket on its sub-network and enqueues its siblings."""
        from tinytune.spaces import subnet_params

        number = member.trial.number
        bracket = self.open(number, member.candidate.subnet, self.run.config.proxy_eta - 1)
        params = subnet_params(member.candidate.subnet, self.run.spec)
        for _ in range(bracket.siblings_left):
            self.run.study.enqueue(params, {Attr.BRACKET: number})
        self.join(bracket, member)

    def join(self, bracket: Bracket, member: Member) -> None:
        run = self.run
        if member.candidate.key in bracket.keys:
            run.study.tell_pruned(member.trial, "the same candidate is already in its bracket")
            run.counts.pruned += 1
            run.limits.idle += 1
            return
        if run.reuse(member.trial, member.candidate, member.cost):
            return
        run.study.note(member.trial, **{Attr.BRACKET: bracket.id})
        bracket.keys.add(member.candidate.key)
        bracket.members.append(member)
        run.limits.idle = 0
        if self.screening:
            stored = run.store.find_evaluation(
                run.config.study_name, member.candidate.key, "short"
            )
            if stored is not None and stored.status == "ok" and stored.val_accuracy is not None:
                member.screen, member.screen_state = stored.val_accuracy, "done"

    def ready(self, bracket: Bracket) -> bool:
        filled = bracket.siblings_left <= 0 or not self.run.limits.may_propose()
        if self.screening:
            return filled and all(m.screen_state in ("done", "failed") for m in bracket.members)
        return filled and bracket.base_state in ("known", "failed")

    def step(self) -> bool:
        """Decide a bracket that is ready, or start a low-fidelity task of one (a short
        fine-tune of a member, or the classifier-only base); False when none."""
        for bracket in list(self.brackets.values()):
            if self.ready(bracket):
                self.decide(bracket)
                return True
        if self.screening:
            for bracket in self.brackets.values():
                for member in bracket.members:
                    if member.screen_state == "todo":
                        self.submit_screen(member)
                        return True
            return False
        for bracket in self.brackets.values():
            if bracket.base_state == "unknown":
                self.submit_base(bracket)
                return True
        return False

    def submit_base(self, bracket: Bracket) -> None:
        """Measure the classifier-only accuracy of a bracket's sub-network (stored, reused)."""
        run = self.run
        candidate = Candidate(run.spec.name, bracket.subnet, LiteResidualConfig(), UpdateScheme(0))
        run.store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
        key = run.next_key()
        self.base_tasks[key] = bracket.subnet
        for b in self.brackets.values():
            if b.subnet == bracket.subnet:
                b.base_state = "running"
        run.executor.submit(key, run.task(candidate))
        run.counts.base_tasks += 1

    def on_base(self, key: int, result: dict[str, Any]) -> None:
        assert self.identity is not None
        subnet = self.base_tasks.pop(key)
        identity = self.identity.with_subnet(subnet)
        candidate = Candidate(self.run.spec.name, subnet, LiteResidualConfig(), UpdateScheme(0))
        store_entry(self.run.store, identity, ContributionEntry("base", "base", candidate), result)
        base = self.known_base(subnet)
        for b in self.brackets.values():
            if b.subnet == subnet:
                b.base, b.base_state = base, "known" if base is not None else "failed"
        self.run.emit("base")

    def submit_screen(self, member: Member) -> None:
        """Fine-tune a member briefly on part of the training images (its low fidelity)."""
        run, config = self.run, self.run.config
        task = run.task(member.candidate)
        task["finetune"]["epochs"] = config.screen_epochs
        task["train_fraction"] = config.screen_fraction
        key = run.next_key()
        self.screen_tasks[key] = member
        member.screen_state = "running"
        run.executor.submit(key, task)
        run.counts.screen_tasks += 1

    def on_screen(self, key: int, result: dict[str, Any]) -> None:
        """Store a short fine-tune's result as a ``short`` evaluation and score its member."""
        member = self.screen_tasks.pop(key)
        run = self.run
        ok = result.get("status") == "ok" and isinstance(result.get("val_accuracy"), float)
        run.store.add_evaluation(
            EvaluationRecord(
                study_name=run.config.study_name,
                candidate_key=member.candidate.key,
                trial_number=member.trial.number,
                fidelity="short",
                status="ok" if ok else "failed",
                accuracy=result.get("accuracy") if ok else None,
                val_accuracy=result.get("val_accuracy") if ok else None,
                memory_bytes=member.cost.arena_bytes,
                latency_ms=1000.0 * float(member.cost.latency_s or 0.0),
                wall_time_s=result.get("wall_time_s"),
                error=None if ok else str(result.get("error") or "the short fine-tune failed"),
                details={**(result.get("details") or {}), "scheme": member.scheme},
            )
        )
        if ok:
            member.screen, member.screen_state = float(result["val_accuracy"]), "done"
            run.study.note(member.trial, **{Attr.SCREEN_ACCURACY: member.screen})
        else:
            member.screen_state = "failed"
        run.emit("screened", trial=member.trial.number, accuracy=member.screen)

    def store_proxy(self, member: Member, base: float) -> ProxyEstimate:
        """Estimate, store as a ``proxy`` evaluation, and note it on the trial."""
        assert self.table is not None
        run, started = self.run, time.perf_counter()
        est = estimate(member.candidate, self.table, base)
        run.study.note(member.trial, **{Attr.PROXY_ACCURACY: est.accuracy})
        name = run.config.study_name
        if run.store.find_evaluation(name, member.candidate.key, "proxy") is None:
            run.store.add_evaluation(
                EvaluationRecord(
                    study_name=name,
                    candidate_key=member.candidate.key,
                    trial_number=member.trial.number,
                    fidelity="proxy",
                    status="ok",
                    accuracy=est.accuracy,
                    memory_bytes=member.cost.arena_bytes,
                    latency_ms=1000.0 * float(member.cost.latency_s or 0.0),
                    wall_time_s=time.perf_counter() - started,
                    details={
                        "estimate": est.to_dict(),
                        "estimates": "validation accuracy",
                        "table": self.table.key,
                        "flash_bytes": member.cost.flash_bytes,
                        "scheme": member.scheme,
                    },
                )
            )
        return est

    def score_measured(self, member: Member) -> None:
        """A baseline or re-queued trial is measured directly; score it by the proxy too, for
        τ (not screened: a short fine-tune would cost what the proxy does not)."""
        if self.screening:
            return
        base = self.known_base(member.candidate.subnet)
        if base is not None and self.table is not None:
            self.store_proxy(member, base)

    def scores(self, bracket: Bracket) -> tuple[list[Member], list[float]]:
        """The members that have a low-fidelity score, and their scores."""
        members = bracket.members
        if self.screening:
            scored = [m for m in members if m.screen is not None]
            return scored, [m.screen for m in scored]  # type: ignore[misc]
        assert self.table is not None
        if bracket.base is not None:
            estimates = [self.store_proxy(m, bracket.base) for m in members]
        else:  # the base failed: the members share a sub-network, so the gains still rank them
            estimates = [estimate(m.candidate, self.table, self.table.base) for m in members]
        return list(members), [e.accuracy for e in estimates]

    def decide(self, bracket: Bracket) -> None:
        """Score a complete bracket at the low fidelity and promote one member to measured."""
        run = self.run
        del self.brackets[bracket.id]
        if not bracket.members:
            return
        fidelity = "short" if self.screening else "proxy"
        members, scores = self.scores(bracket)
        for m in bracket.members:
            run.study.note(m.trial, **{Attr.FIDELITY: fidelity})
        run.counts.proxy_scored += len(members)
        if not members:
            self.prune(bracket.members, "every short fine-tune of its bracket failed")
            return
        if not run.limits.time_left():
            self.prune(bracket.members, "the time budget was spent before a promotion")
            return
        front = [(p.val_accuracy, float(p.memory_bytes), p.latency_s or 0.0) for p in run.front()]
        contenders = [
            (score, float(m.cost.arena_bytes), float(m.cost.latency_s or 0.0))
            for score, m in zip(scores, members, strict=True)
        ]
        config = run.config
        ref = reference([*front, *contenders], config.sram_budget_bytes, config.latency_budget_s)
        chosen = members[choose_promotion(contenders, front, ref, self.offset())]
        run.study.note(chosen.trial, **{Attr.PROMOTED: True})
        self.prune(
            [m for m in bracket.members if m is not chosen],
            f"{fidelity}: not promoted; trial {chosen.trial.number} of its bracket was",
        )
        run.counts.promoted += 1
        run.emit("promoted", trial=chosen.trial.number)
        if not run.measure(chosen):
            log.info("trial %d was promoted but not measured", chosen.trial.number)

    def prune(self, members: list[Member], reason: str) -> None:
        for m in members:
            self.run.study.tell_pruned(m.trial, reason)
            self.run.counts.not_promoted += 1

    def close(self) -> bool:
        """Nothing runs and nothing more can be proposed: decide the brackets whose members
        are scored as they stand; False when none could be."""
        progressed = False
        for bracket in list(self.brackets.values()):
            if bracket.base_state in ("known", "failed"):
                self.decide(bracket)
                progressed = True
        return progressed

    def abandon(self) -> None:
        """The run ends: the members still waiting are told PRUNED."""
        for bracket in list(self.brackets.values()):
            self.prune(bracket.members, "the run ended before a promotion")
        self.brackets.clear()

    def offset(self) -> float:
        """Median gap between measured and low-fidelity accuracy in this study."""
        store, name = self.run.store, self.run.config.study_name
        fidelity = "short" if self.screening else "proxy"
        proxy = {
            e.candidate_key: e.val_accuracy if self.screening else e.accuracy
            for e in store.evaluations(name, fidelity=fidelity, status="ok")
        }
        pairs = [
            (proxy[e.candidate_key], e.val_accuracy)
            for e in store.evaluations(name, fidelity="measured", status="ok")
            if proxy.get(e.candidate_key) is not None and e.val_accuracy is not None
        ]
        return calibration_offset(pairs)  # type: ignore[arg-type]
