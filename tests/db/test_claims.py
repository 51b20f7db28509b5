"""Claims on measured fine-tunes: the budget and the one-measurement-per-candidate rule hold
for drivers that share a study, on SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp

from tinytune.db import TWIN_OF, EvaluationRecord, Store, open_store

KEYS = [f"{i:016x}" for i in range(12)]


def _add(store: Store, key: str) -> None:
    store.add_candidate(key, "ofa-proxyless-w0.35", f'{{"k": "{key}"}}')


def _record(key: str, trial: int, status: str = "ok") -> EvaluationRecord:
    return EvaluationRecord(
        study_name="s",
        candidate_key=key,
        trial_number=trial,
        fidelity="measured",
        status=status,
        accuracy=0.5 if status == "ok" else None,
        error=None if status == "ok" else "diverged",
    )


def test_claim_budget_duplicates_and_release(store: Store) -> None:
    for key in KEYS[:4]:
        _add(store, key)
    assert store.claim_measurement("s", KEYS[0], 0, budget=3).outcome == "claimed"
    held = store.claim_measurement("s", KEYS[0], 1, budget=3)
    assert (held.outcome, held.holder) == ("in_flight", 0)
    assert store.claim_measurement("s", KEYS[1], 2, budget=3).outcome == "claimed"
    store.finish_measurement(_record(KEYS[0], 0))
    again = store.claim_measurement("s", KEYS[0], 3, budget=3)
    assert again.outcome == "measured" and again.evaluation is not None
    assert again.evaluation.trial_number == 0
    assert store.measured_budget_spent("s") == (1, 1)
    assert store.claim_measurement("s", KEYS[2], 4, budget=3).outcome == "claimed"
    assert store.claim_measurement("s", KEYS[3], 5, budget=3).outcome == "spent"
    assert store.release_claims("s", [4, 99]) == 1  # its driver stopped: the slot is free
    assert store.claim_measurement("s", KEYS[3], 6, budget=3).outcome == "claimed"
    store.finish_measurement(_record(KEYS[3], 6, status="failed"))  # a failure spends budget
    assert store.measured_budget_spent("s") == (2, 1)
    assert store.claim_measurement("s", KEYS[3], 7, budget=4).outcome == "claimed"  # retried


def _claim_all(url: str, worker: int, out: mp.Queue) -> None:
    with open_store(url) as store:
        got = [
            key
            for n, key in enumerate(KEYS)
            if store.claim_measurement("s", key, 100 * worker + n, budget=7).outcome == "claimed"
        ]
    out.put(got)


def test_concurrent_drivers_claim_exactly_the_budget_once_each(db_url: str) -> None:
    with open_store(db_url) as store:
        for key in KEYS:
            _add(store, key)
    out: mp.Queue = mp.get_context("spawn").Queue()
    procs = [
        mp.get_context("spawn").Process(target=_claim_all, args=(db_url, w, out)) for w in range(3)
    ]
    for p in procs:
        p.start()
    claimed = [key for _ in procs for key in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
    assert len(claimed) == 7
    assert len(set(claimed)) == 7


def _claim_setup(url: str, worker: int, out: mp.Queue) -> None:
    with open_store(url) as store:
        out.put((worker, store.claim_study_setup("s#1", f"driver-{worker}")))


def test_one_of_the_drivers_starting_a_study_at_once_sets_it_up(db_url: str) -> None:
    with open_store(db_url) as store:
        pass  # the schema exists before they start
    out: mp.Queue = mp.get_context("spawn").Queue()
    procs = [
        mp.get_context("spawn").Process(target=_claim_setup, args=(db_url, w, out))
        for w in range(3)
    ]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    winners = [w for w, won in got.items() if won]
    assert len(winners) == 1
    with open_store(db_url) as store:
        # the winner again (a retry whose commit went through): still its; another: not
        assert store.claim_study_setup("s#1", f"driver-{winners[0]}") is True
        assert store.claim_study_setup("s#1", "a later driver") is False
        assert store.claim_study_setup("s#2", "a later driver") is True  # the study made anew


def test_a_schedule_twin_is_stored_as_measured_but_spends_no_budget(store: Store) -> None:
    for key in KEYS[:3]:
        _add(store, key)
    assert store.claim_measurement("s", KEYS[0], 0, budget=2).outcome == "claimed"
    store.finish_measurement(_record(KEYS[0], 0))
    for n, key in ((1, KEYS[1]), (2, KEYS[2])):  # two twins of trial 0's fine-tune
        assert store.claim_measurement("s", key, n, budget=None).outcome == "claimed"
        twin = dataclasses.replace(_record(key, n), details={TWIN_OF: 0, "scheme": "joint"})
        store.finish_measurement(twin)
    assert store.measured_budget_spent("s") == (1, 0)
    stored = store.evaluations("s", fidelity="measured", status="ok")
    assert [e.candidate_key for e in stored] == KEYS[:3]
    assert [(e.details or {}).get(TWIN_OF) for e in stored] == [None, 0, 0]
    # a failed fine-tune (no details) and one whose details hold other keys still count
    _add(store, KEYS[3])
    failed = _record(KEYS[3], 3, status="failed")
    store.finish_measurement(failed)
    _add(store, KEYS[4])
    store.finish_measurement(dataclasses.replace(_record(KEYS[4], 4), details={"k": 1}))
    assert store.measured_budget_spent("s") == (3, 0)
    assert store.claim_measurement("s", KEYS[5], 5, budget=3).outcome == "spent"
