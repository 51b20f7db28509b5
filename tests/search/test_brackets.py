"""The ladder's decisions for brackets built by hand: what it returns for the driver to carry
out (notes, siblings to enqueue, tasks to start, members pruned and promoted), and what it
stores itself."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tinytune.db import Store, open_store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search.front.recording import FrontPoint
from tinytune.search.ladder.brackets import Ladder, LadderContext
from tinytune.search.ladder.contribution import TableIdentity
from tinytune.search.ladder.contribution_table import build_table
from tinytune.search.ladder.decisions import Member, Note, Submit, Verdict
from tinytune.search.ladder.proxy import estimate
from tinytune.search.study.attrs import Attr
from tinytune.spaces import make_preset, subnet_params

from .fakes import SPEC, SUBNET, made_up_records, search_config


@dataclass(frozen=True)
class Cost:
    """The three numbers of a :class:`~tinytune.evaluators.HardwareCost` the ladder reads (its
    SRAM: an image model's arena)."""

    sram_bytes: int
    flash_bytes: int
    latency_s: float | None


@dataclass
class Limits:
    """The run's limits as the ladder reads them, set by hand."""

    time: bool = True
    propose: bool = True

    def time_left(self) -> bool:
        return self.time

    def may_propose(self) -> bool:
        return self.propose


PRESETS = ("last", "bias-only", "mcunetv3")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as s:
        yield s


def _ladder(store: Store, tmp_path: Path, limits: Limits, **kw: Any) -> Ladder:
    finetune = FinetuneConfig(epochs=4, batch_size=32, lr=0.05)
    config = search_config(tmp_path / "weights.pt", proxy_eta=3, finetune=finetune, **kw)
    keys = itertools.count(-1, -1)
    return Ladder(LadderContext(config, SPEC, store, limits, lambda: next(keys)))


def _member(store: Store, number: int, preset: str, arena: int = 100) -> Member:
    candidate = make_preset(preset, SPEC, SUBNET)
    store.add_candidate(candidate.key, candidate.supernet, candidate.to_json())
    trial = SimpleNamespace(number=number, user_attrs={})
    return Member(trial, candidate, Cost(arena, 1000, 0.1), preset)  # type: ignore[arg-type]


def _attrs(notes: tuple[Note, ...]) -> list[tuple[int, dict[str, Any]]]:
    return [(n.trial.number, dict(n.attrs)) for n in notes]


def test_a_fresh_bracket_enqueues_its_siblings_and_screens_each_member(
    store: Store, tmp_path: Path
) -> None:
    ladder = _ladder(store, tmp_path, Limits(), halving=True, screen_epochs=1)
    first = _member(store, 7, "last")
    bracket, siblings = ladder.open_fresh(first)
    params = subnet_params(SUBNET, SPEC)
    assert [(dict(s.params), dict(s.attrs)) for s in siblings] == [
        (params, {Attr.BRACKET: 7}),
        (params, {Attr.BRACKET: 7}),
    ]
    assert ladder.refusal(bracket, first) is None
    assert _attrs((ladder.join(bracket, first),)) == [(7, {Attr.BRACKET: 7})]
    assert ladder.refusal(bracket, _member(store, 8, "last")) == (
        "the same candidate is already in its bracket"
    )
    # a sibling comes: the bracket is the same, with one sibling fewer to come
    assert ladder.bracket_of(7, SUBNET, []) is bracket and bracket.siblings_left == 1
    # the bracket is not filled yet, so its member is screened: a short fine-tune to start
    submit = ladder.step([])
    assert submit == Submit(-1, first.candidate, "screen", 1, 0.5)
    assert ladder.busy() == 1 and first.screen_state == "running"
    assert ladder.step([]) is None  # nothing else to do until a result comes
    measured = FinetuneTask("{}", None, "digits", 0, FinetuneConfig(epochs=4, lr=0.05))
    task = submit.task(measured)
    assert task == measured.replace(finetune=FinetuneConfig(epochs=1, lr=0.05), train_fraction=0.5)
    # its result: stored as a short evaluation, noted on its trial
    ok = EvaluationResult("ok", accuracy=0.6, val_accuracy=0.55, wall_time_s=2.0)
    outcome = ladder.on_result(-1, ok)
    assert outcome is not None and ladder.busy() == 0
    assert _attrs(outcome.notes) == [(7, {Attr.SCREEN_ACCURACY: 0.55})]
    assert (outcome.event, dict(outcome.data)) == ("screened", {"trial": 7, "accuracy": 0.55})
    short = store.find_evaluation("s", first.candidate.key, "short")
    assert short is not None and short.val_accuracy == 0.55 and short.trial_number == 7
    assert ladder.on_result(5, ok) is None  # a trial's key is not the ladder's


def test_a_screened_bracket_promotes_the_member_that_adds_most_to_the_front(
    store: Store, tmp_path: Path
) -> None:
    ladder = _ladder(store, tmp_path, Limits(), halving=True)
    members = [_member(store, n, p) for n, p in zip((3, 4, 5), PRESETS, strict=True)]
    bracket = ladder.open(3, SUBNET, 0)
    for m, screen in zip(members, (0.5, 0.7, 0.6), strict=True):
        ladder.join(bracket, m)
        m.screen, m.screen_state = screen, "done"
    # same SRAM and latency: the highest short accuracy adds most to an empty front
    verdict = ladder.step([])
    assert isinstance(verdict, Verdict) and verdict.promoted is members[1]
    assert verdict.scored == 3 and 3 not in ladder.brackets
    assert _attrs(verdict.notes) == [
        (3, {Attr.FIDELITY: "short"}),
        (4, {Attr.FIDELITY: "short"}),
        (5, {Attr.FIDELITY: "short"}),
        (4, {Attr.PROMOTED: True}),
    ]
    reason = "short: not promoted; trial 4 of its bracket was"
    assert [(p.trial.number, p.reason) for p in verdict.pruned] == [(3, reason), (5, reason)]


def test_a_member_far_below_the_front_in_sram_is_promoted_over_a_more_accurate_one(
    store: Store, tmp_path: Path
) -> None:
    """Against a measured front of (0.8, 100 B, 0.1 s), in the box up to 110 B and 0.11 s: a
    member at (0.7, 10 B, 0.1 s) adds a box of 0.7 · (1 − 10/110) · (1 − 0.1/0.11), of which
    the front holds 0.7 · (1 − 100/110) · (1 − 0.1/0.11); one at (0.75, 100 B, 0.1 s) is
    dominated and adds nothing, so its higher accuracy does not win."""
    ladder = _ladder(store, tmp_path, Limits(), halving=True)
    small, large = _member(store, 1, "last", arena=10), _member(store, 2, "bias-only")
    bracket = ladder.open(1, SUBNET, 0)
    for m, screen in ((small, 0.7), (large, 0.75)):
        ladder.join(bracket, m)
        m.screen, m.screen_state = screen, "done"
    front = [FrontPoint(0, "k" * 16, 0.8, 0.8, 100, 1000, 0.1, "last")]
    verdict = ladder.close(front)
    assert verdict is not None and verdict.promoted is small


def test_failed_screens_and_a_spent_time_budget_promote_nobody(
    store: Store, tmp_path: Path
) -> None:
    limits = Limits()
    ladder = _ladder(store, tmp_path, limits, halving=True)
    failed = _member(store, 1, "last")
    bracket = ladder.open(1, SUBNET, 0)
    ladder.join(bracket, failed)
    failed.screen_state = "failed"
    verdict = ladder.step([])
    assert verdict == Verdict(
        (Note(failed.trial, {Attr.FIDELITY: "short"}),),
        0,
        ladder.pruned([failed], "every short fine-tune of its bracket failed"),
    )
    limits.time = False
    scored = _member(store, 2, "bias-only")
    bracket = ladder.open(2, SUBNET, 0)
    ladder.join(bracket, scored)
    scored.screen, scored.screen_state = 0.5, "done"
    verdict = ladder.step([])
    assert isinstance(verdict, Verdict) and verdict.promoted is None and verdict.scored == 1
    assert [p.reason for p in verdict.pruned] == ["the time budget was spent before a promotion"]
    assert ladder.step([]) is None and ladder.open(3, SUBNET, 0) is not None
    assert ladder.step([]) == Verdict()  # a bracket without members decides nothing


def test_an_unfinished_bracket_waits_for_its_siblings_until_proposals_stop(
    store: Store, tmp_path: Path
) -> None:
    limits = Limits()
    ladder = _ladder(store, tmp_path, limits, halving=True)
    member = _member(store, 1, "last")
    # reopened by a later run: two siblings still waiting, the one proposed now among them
    waiting = [SimpleNamespace(user_attrs={Attr.BRACKET: 1}) for _ in range(2)]
    bracket = ladder.bracket_of(1, SUBNET, waiting)
    assert bracket.siblings_left == 1
    ladder.join(bracket, member)
    member.screen, member.screen_state = 0.5, "done"
    assert ladder.step([]) is None and ladder.close([]) is not None
    bracket = ladder.open(2, SUBNET, 2)
    ladder.join(bracket, _member(store, 2, "bias-only"))
    bracket.members[0].screen_state = "done"
    limits.propose = False  # no sibling can come any more: decided as it stands
    assert isinstance(ladder.step([]), Verdict)
    bracket = ladder.open(3, SUBNET, 2)
    ladder.join(bracket, _member(store, 3, "mcunetv3"))
    pruned = ladder.abandon()
    assert [(p.trial.number, p.reason) for p in pruned] == [
        (3, "the run ended before a promotion")
    ]
    assert not ladder.brackets


def test_proxy_scores_are_stored_noted_and_rank_the_bracket(store: Store, tmp_path: Path) -> None:
    """The proxy's estimates against the hand-written table of tests/search/fakes.py."""
    ladder = _ladder(store, tmp_path, Limits(), proxy=True)
    table = build_table("t" * 64, SPEC, SUBNET, made_up_records())
    assert table is not None
    ladder.proxy.table = table  # as prepare() would have measured it
    config = ladder.config
    ladder.proxy.identity = TableIdentity(
        SPEC.name, config.checkpoint, "0" * 64, "digits", 0, config.finetune, SUBNET
    )
    members = [_member(store, n, p) for n, p in zip((1, 2, 3), PRESETS, strict=True)]
    bracket = ladder.open(1, SUBNET, 0)
    assert bracket.base_state == "unknown"  # no base stored for it
    bracket.base, bracket.base_state = 0.3, "known"
    for m in members:
        ladder.join(bracket, m)
    verdict = ladder.step([])
    assert isinstance(verdict, Verdict) and verdict.promoted is not None
    expected = [estimate(m.candidate, table, 0.3).accuracy for m in members]
    best = max(range(3), key=lambda i: expected[i])
    assert verdict.promoted is members[best]
    assert _attrs(verdict.notes) == [
        *(
            (m.trial.number, {Attr.PROXY_ACCURACY: e})
            for m, e in zip(members, expected, strict=True)
        ),
        *((m.trial.number, {Attr.FIDELITY: "proxy"}) for m in members),
        (members[best].trial.number, {Attr.PROMOTED: True}),
    ]
    stored = {e.candidate_key: e.accuracy for e in store.evaluations("s", fidelity="proxy")}
    assert stored == {m.candidate.key: e for m, e in zip(members, expected, strict=True)}
    # the classifier-only base of a new sub-network is a task to start
    other = type(SUBNET)(min(SPEC.resolutions), SUBNET.stages)
    ladder.bracket_of(9, other, [SimpleNamespace(user_attrs={Attr.BRACKET: 9})])
    submit = ladder.step([])
    assert isinstance(submit, Submit) and submit.kind == "base"
    assert submit.candidate.subnet == other and submit.task({"x": 1}) == {"x": 1}
