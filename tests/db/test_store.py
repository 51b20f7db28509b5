"""The Store on SQLite and PostgreSQL: round trips, idempotence, filtering and error handling."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
from fractions import Fraction

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinytune.db import (
    FIDELITIES,
    CandidateRecord,
    EvaluationRecord,
    ParetoSnapshot,
    Store,
    open_store,
)
from tinytune.db.engine import create_engine
from tinytune.errors import StorageError

KEY_A = "a" * 16
KEY_B = "b" * 40
PAYLOAD_A = '{"depth":[2,3],"kernel":[3,5]}'
PAYLOAD_B = '{"depth":[4,4],"kernel":[7,7]}'


def evaluation(**overrides) -> EvaluationRecord:
    fields = {
        "study_name": "study",
        "candidate_key": KEY_A,
        "fidelity": "measured",
        "status": "ok",
    }
    return EvaluationRecord(**(fields | overrides))


def is_utc(timestamp: dt.datetime) -> bool:
    return timestamp.tzinfo is not None and timestamp.utcoffset() == dt.timedelta(0)


# -- candidates -------------------------------------------------------------------------------


def test_candidate_round_trip(store: Store) -> None:
    before = dt.datetime.now(dt.UTC)
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)

    got = store.get_candidate(KEY_A)

    assert isinstance(got, CandidateRecord)
    assert (got.key, got.supernet, got.payload) == (KEY_A, "ofa_mbv3", PAYLOAD_A)
    assert is_utc(got.created_at)
    assert before - dt.timedelta(seconds=5) <= got.created_at <= before + dt.timedelta(minutes=1)
    assert store.get_candidate(KEY_B) is None


def test_add_candidate_is_idempotent(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    first = store.get_candidate(KEY_A)

    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)

    assert store.get_candidate(KEY_A) == first


@pytest.mark.parametrize(
    ("supernet", "payload"), [("ofa_mbv3", PAYLOAD_B), ("proxyless", PAYLOAD_A)]
)
def test_add_candidate_conflict_raises(store: Store, supernet: str, payload: str) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)

    with pytest.raises(StorageError, match="already stored"):
        store.add_candidate(KEY_A, supernet, payload)

    assert store.get_candidate(KEY_A).payload == PAYLOAD_A


@pytest.mark.parametrize(
    ("key", "payload"),
    [("short", PAYLOAD_A), ("x" * 65, PAYLOAD_A), (KEY_A, "{not json"), (KEY_A, 3)],
)
def test_add_candidate_rejects_bad_input(sqlite_store: Store, key, payload) -> None:
    with pytest.raises(StorageError):
        sqlite_store.add_candidate(key, "ofa_mbv3", payload)


# -- evaluations ------------------------------------------------------------------------------


def test_evaluation_round_trip(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    rec = evaluation(
        trial_number=7,
        accuracy=0.8125,
        val_accuracy=0.75,
        memory_bytes=3 * 2**31,  # beyond 32 bits
        latency_ms=12.5,
        wall_time_s=301.25,
        details={"epochs": 3, "lr": 0.01, "layers": [1, 2], "note": "ünïcode", "ok": True},
    )

    new_id = store.add_evaluation(rec)
    (got,) = store.evaluations("study")

    assert got.id == new_id
    assert is_utc(got.created_at)
    assert got == dataclasses.replace(rec, id=new_id, created_at=got.created_at)


def test_evaluation_keeps_given_timestamp_in_utc(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    plus_two = dt.timezone(dt.timedelta(hours=2))
    when = dt.datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=plus_two)

    store.add_evaluation(evaluation(created_at=when))
    (got,) = store.evaluations("study")

    assert got.created_at == when
    assert got.created_at.tzinfo == dt.UTC
    assert got.created_at.hour == 3


def test_failed_evaluation_is_stored_with_its_error(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    store.add_evaluation(evaluation(status="failed", error="CUDA out of memory\nat step 3"))

    (got,) = store.evaluations("study", status="failed")

    assert got.status == "failed"
    assert got.error == "CUDA out of memory\nat step 3"
    assert got.accuracy is None
    assert store.find_evaluation("study", KEY_A, "measured") is None


def test_evaluation_requires_a_stored_candidate(store: Store) -> None:
    with pytest.raises(StorageError, match="no such candidate"):
        store.add_evaluation(evaluation())
    assert store.evaluations("study") == []


def test_evaluation_with_an_id_is_refused(sqlite_store: Store) -> None:
    sqlite_store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    with pytest.raises(StorageError, match="already has id"):
        sqlite_store.add_evaluation(evaluation(id=3))


def test_evaluations_filter_by_fidelity_status_and_study(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    store.add_candidate(KEY_B, "ofa_mbv3", PAYLOAD_B)
    added = [
        evaluation(fidelity="proxy", accuracy=0.5),
        evaluation(fidelity="measured", accuracy=0.6),
        evaluation(fidelity="measured", status="failed", error="diverged"),
        evaluation(candidate_key=KEY_B, fidelity="proxy", status="failed", error="x"),
        evaluation(study_name="other", accuracy=0.9),
    ]
    ids = [store.add_evaluation(rec) for rec in added]

    def got_ids(**filters) -> list[int]:
        return [rec.id for rec in store.evaluations("study", **filters)]

    assert got_ids() == ids[:4]
    assert got_ids(fidelity="proxy") == [ids[0], ids[3]]
    assert got_ids(status="failed") == [ids[2], ids[3]]
    assert got_ids(fidelity="measured", status="ok") == [ids[1]]
    assert [rec.id for rec in store.evaluations("other")] == [ids[4]]
    assert store.evaluations("missing") == []


@pytest.mark.parametrize("filters", [{"fidelity": "guessed"}, {"status": "maybe"}])
def test_evaluations_reject_unknown_filter_values(sqlite_store: Store, filters) -> None:
    with pytest.raises(StorageError, match="not one of"):
        sqlite_store.evaluations("study", **filters)


def test_find_evaluation_returns_the_latest_ok_one(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    store.add_evaluation(evaluation(accuracy=0.6, created_at=t0))
    latest = store.add_evaluation(evaluation(accuracy=0.7, created_at=t0 + dt.timedelta(1)))
    store.add_evaluation(evaluation(accuracy=0.5, created_at=t0 - dt.timedelta(1)))
    store.add_evaluation(
        evaluation(status="failed", error="boom", created_at=t0 + dt.timedelta(2))
    )
    store.add_evaluation(evaluation(fidelity="proxy", accuracy=0.9))

    found = store.find_evaluation("study", KEY_A, "measured")

    assert found is not None and (found.id, found.accuracy) == (latest, 0.7)
    assert store.find_evaluation("study", KEY_A, "proxy").accuracy == 0.9
    assert store.find_evaluation("other", KEY_A, "measured") is None
    assert store.find_evaluation("study", KEY_B, "measured") is None


def test_study_names_lists_studies_with_evaluations(store: Store) -> None:
    store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
    for name in ["zeta", "alpha", "zeta"]:
        store.add_evaluation(evaluation(study_name=name))
    store.add_pareto_snapshot("only-pareto", [], 0, None)

    assert store.study_names() == ["alpha", "zeta"]


# -- Pareto snapshots -------------------------------------------------------------------------


def test_pareto_snapshots_round_trip_oldest_first(store: Store) -> None:
    fronts = [
        [{"key": KEY_A, "accuracy": 0.5, "memory_bytes": 1000}],
        [{"key": KEY_A, "accuracy": 0.5}, {"key": KEY_B, "accuracy": 0.75, "pareto": True}],
        [],
    ]
    ids = [
        store.add_pareto_snapshot("study", points, n_trials=4 * i, hypervolume=hv)
        for i, (points, hv) in enumerate(zip(fronts, [0.25, 0.5, None], strict=True))
    ]
    store.add_pareto_snapshot("other", [{"a": 1}], 1, 1.0)

    snapshots = store.pareto_snapshots("study")

    assert all(isinstance(s, ParetoSnapshot) for s in snapshots)
    assert [s.id for s in snapshots] == ids
    assert [s.points for s in snapshots] == fronts
    assert [s.n_trials for s in snapshots] == [0, 4, 8]
    assert [s.hypervolume for s in snapshots] == [0.25, 0.5, None]
    assert all(is_utc(s.created_at) for s in snapshots)
    assert [s.created_at for s in snapshots] == sorted(s.created_at for s in snapshots)
    assert store.latest_pareto("study") == snapshots[-1]
    assert store.latest_pareto("missing") is None
    assert store.pareto_snapshots("missing") == []


@pytest.mark.parametrize(
    ("points", "n_trials", "hypervolume"),
    [
        ({"a": 1}, 1, None),  # not a list
        ([1, 2], 1, None),  # not dicts
        ([{"a": math.nan}], 1, None),
        ([{"a": object()}], 1, None),
        ([{1: 2}], 1, None),  # int key would come back as a string
        ([], -1, None),
        ([], 1.5, None),
        ([], 1, math.inf),
    ],
)
def test_pareto_snapshot_rejects_bad_input(
    sqlite_store: Store, points, n_trials, hypervolume
) -> None:
    with pytest.raises(StorageError):
        sqlite_store.add_pareto_snapshot("study", points, n_trials, hypervolume)


# -- records ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"fidelity": "guessed"}, "'measured', 'proxy'"),
        ({"status": "maybe"}, "'ok', 'failed'"),
        ({"status": "failed"}, "expected the error text"),
        ({"status": "failed", "error": ""}, "expected the error text"),
        ({"candidate_key": "short"}, "16 to 64"),
        ({"study_name": ""}, "non-empty"),
        ({"accuracy": 1.5}, r"\[0, 1.0\]"),
        ({"accuracy": math.nan}, "accuracy"),
        ({"latency_ms": -1.0}, "latency_ms"),
        ({"memory_bytes": 1.5}, "memory_bytes"),
        ({"trial_number": True}, "trial_number"),
        ({"details": [1]}, "not a dict"),
        ({"details": {"t": (1, 2)}}, "JSON round trip"),
        ({"created_at": dt.datetime(2025, 1, 1)}, "timezone-aware"),
    ],
)
def test_evaluation_record_validation(overrides, message) -> None:
    with pytest.raises(StorageError, match=message):
        evaluation(**overrides)


def test_evaluation_record_normalizes_numbers() -> None:
    rec = evaluation(accuracy=Fraction(1, 2), memory_bytes=10, latency_ms=3)

    assert (rec.accuracy, rec.latency_ms) == (0.5, 3.0)
    assert type(rec.accuracy) is float and type(rec.latency_ms) is float
    assert type(rec.memory_bytes) is int
    assert set(FIDELITIES) == {"measured", "proxy", "short", "int8"}


_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_json_leaf |= st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_fraction = st.none() | st.floats(0.0, 1.0)
_positive = st.none() | st.floats(0.0, 1e12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    accuracy=_fraction,
    val_accuracy=_fraction,
    latency_ms=_positive,
    wall_time_s=_positive,
    memory_bytes=st.none() | st.integers(0, 2**62),
    trial_number=st.none() | st.integers(0, 2**31 - 1),
    details=st.none() | st.dictionaries(st.text(max_size=5), _json, max_size=4),
)
def test_any_valid_evaluation_round_trips_exactly(sqlite_url: str, **fields) -> None:
    with open_store(sqlite_url) as store:
        store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
        rec = evaluation(**fields)
        new_id = store.add_evaluation(rec)
        got = store.evaluations("study")[-1]

    assert got == dataclasses.replace(rec, id=new_id, created_at=got.created_at)


# -- lifecycle --------------------------------------------------------------------------------


def test_reopening_keeps_every_record(db_url: str) -> None:
    with open_store(db_url) as store:
        store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
        store.add_evaluation(evaluation(accuracy=0.5))
        store.add_pareto_snapshot("study", [{"a": 1}], 1, 0.5)
        before = (
            store.get_candidate(KEY_A),
            store.evaluations("study"),
            store.pareto_snapshots("study"),
        )

    with open_store(db_url) as store:
        after = (
            store.get_candidate(KEY_A),
            store.evaluations("study"),
            store.pareto_snapshots("study"),
        )

    assert after == before


def test_closed_store_refuses_calls(sqlite_url: str) -> None:
    with open_store(sqlite_url) as store:
        pass

    with pytest.raises(StorageError, match="closed"):
        store.get_candidate(KEY_A)
    store.close()  # closing twice is harmless


def test_in_memory_sqlite_works() -> None:
    with open_store("sqlite://") as store:
        store.add_candidate(KEY_A, "ofa_mbv3", PAYLOAD_A)
        assert store.get_candidate(KEY_A).payload == PAYLOAD_A


def test_sqlite_connections_use_wal_normal_sync_and_foreign_keys(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    try:
        with engine.connect() as connection:
            pragma = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ["journal_mode", "synchronous", "foreign_keys"]
            }
    finally:
        engine.dispose()

    assert pragma == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1}


# -- errors at the boundary -------------------------------------------------------------------


def test_unreachable_server_raises_quickly_with_masked_password() -> None:
    url = "postgresql+psycopg://tt:secret@127.0.0.1:1/x"
    start = time.monotonic()

    with pytest.raises(StorageError) as info:
        open_store(url)

    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "127.0.0.1:1/x" in message and "***" in message
    assert "secret" not in message
    assert "\n" not in message
    assert "expected a PostgreSQL server" in message


def test_postgresql_connections_get_a_connect_timeout() -> None:
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/x")
    seen: dict[str, object] = {}

    @sa.event.listens_for(engine, "do_connect")
    def capture(_dialect, _record, _args, params) -> None:
        seen.update(params)

    with pytest.raises(sa.exc.OperationalError):
        engine.connect()
    engine.dispose()

    assert 0 < seen["connect_timeout"] <= 30


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "://nothing",
        "postgresql+psycopg://tt:secret@host:notaport/db",
        "postgresql:/tt:secret@host/db",  # one slash: no URL, the password still masked
        "tt:secret@dbhost/tinytune",
    ],
)
def test_malformed_url_raises(url: str) -> None:
    with pytest.raises(StorageError, match="cannot parse database URL") as info:
        open_store(url)
    assert "secret" not in str(info.value)


def test_sqlite_arguments_its_driver_would_ignore_are_refused(tmp_path) -> None:
    """``?mode=ro`` without ``uri=true``: SQLAlchemy's driver would warn and open the file
    read-write; with ``uri=true`` SQLite takes it."""
    path = tmp_path / "t.db"
    open_store(f"sqlite:///{path}").close()
    with pytest.raises(StorageError, match=r"t.db\?cache=shared&mode=ro': cache, mode are SQLite"):
        open_store(f"sqlite:///{path}?mode=ro&cache=shared")
    with pytest.raises(StorageError, match=r"mode is a SQLite argument that takes effect only"):
        open_store(f"sqlite:///{path}?mode=ro")
    open_store(f"sqlite:///{path}?mode=ro&uri=true").close()
    open_store(f"sqlite:///{path}?timeout=5").close()


def test_unknown_database_kind_raises() -> None:
    with pytest.raises(StorageError, match="nosuchdb"):
        open_store("nosuchdb://host/x")


def test_sqlite_file_in_missing_directory_raises(tmp_path) -> None:
    missing = tmp_path / "missing" / "tinytune.db"

    with pytest.raises(StorageError, match="does not exist"):
        open_store(f"sqlite:///{missing}")

    assert not missing.parent.exists()


def test_file_that_is_not_a_database_raises(tmp_path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is not a database, just text " * 200)

    with pytest.raises(StorageError, match="SQLite"):
        open_store(f"sqlite:///{path}")
