"""Several processes opening one new SQLite database at once: every one gets the schema (the
upgrade takes SQLite's write lock before it reads the version table)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any


def _open(url: str, barrier: Any, results: Any) -> None:
    from tinytune.db import open_store

    barrier.wait()
    try:
        with open_store(url) as store:
            store.study_names()
        results.put("ok")
    except Exception as e:  # reported to the test, which shows it
        results.put(f"{type(e).__name__}: {e}")


def test_processes_that_create_one_sqlite_database_at_once_all_succeed(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    for attempt in range(3):  # without the lock, most attempts failed
        url = f"sqlite:///{tmp_path / f'db{attempt}.sqlite'}"
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(url, barrier, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        outcomes = [results.get(timeout=10) for _ in procs]
        assert outcomes == ["ok"] * 4, outcomes
