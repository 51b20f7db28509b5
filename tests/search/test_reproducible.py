"""``reproducible``: results handed to the driver in the order their tasks were submitted
(:class:`tinytune.search.execution.executor.InOrder`), so that a seed makes the same search
whatever order the workers finish in."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest

from tinytune.db import open_store
from tinytune.search import run_search
from tinytune.search.execution.executor import Executor, InOrder

from .fakes import FakeEvaluator, search_config

TRIALS = 7  # the four baselines and three mutants


class Shuffled(Executor):
    """Workers that finish in an order drawn from ``seed``: each call to :meth:`wait` runs the
    tasks in flight and hands back a drawn, non-empty subset of them in a drawn order, as Ray
    workers of uneven speed would."""

    def __init__(self, fn: Any, seed: int, slots: int = 3) -> None:
        self.fn, self.slots = fn, slots
        self.rng = random.Random(seed)
        self.flight: list[tuple[int, dict[str, Any]]] = []

    def submit(self, key: int, task: dict[str, Any]) -> None:
        self.flight.append((key, task))

    def wait(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        if not self.flight:
            return []
        self.rng.shuffle(self.flight)
        done = self.rng.randint(1, len(self.flight))
        back, self.flight = self.flight[:done], self.flight[done:]
        return [(key, self.fn(task)) for key, task in back]

    @property
    def in_flight(self) -> int:
        return len(self.flight)


def test_in_order_hands_back_results_one_a_call_in_the_order_submitted() -> None:
    inner = Shuffled(lambda task: {"status": "ok", "n": task["n"]}, seed=3, slots=4)
    ordered = InOrder(inner)
    assert ordered.slots == 4
    for key in (7, 2, 9, 4):
        ordered.submit(key, {"n": key})
    back = []
    while ordered.in_flight:
        got = ordered.wait(timeout=0.0)
        assert len(got) <= 1
        back += got
    assert [(k, r["n"]) for k, r in back] == [(7, 7), (2, 2), (9, 9), (4, 4)]
    assert ordered.wait(timeout=0.0) == []


def _trials(tmp_path: Path, order: int, reproducible: bool) -> list[tuple[Any, ...]]:
    """Each trial of a new study's search (three workers finishing in the order drawn from
    ``order``): its parameters, whose mutant it is, its values and its state."""
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / f'{order}-{reproducible}.sqlite'}"
    config = search_config(ckpt, trials=TRIALS, reproducible=reproducible)
    with open_store(url) as store:
        run_search(config, store, Shuffled(FakeEvaluator(), seed=order))
    trials = optuna.load_study(study_name="s", storage=url).trials
    return [
        (sorted(t.params.items()), t.user_attrs.get("mutant_of"), t.values, t.state)
        for t in trials
    ]


@pytest.mark.slow
def test_a_reproducible_search_makes_the_same_trials_whatever_order_the_workers_finish_in(
    tmp_path: Path,
) -> None:
    first, second = (_trials(tmp_path, order, reproducible=True) for order in (0, 1))
    assert len(first) > TRIALS  # the measured fine-tunes and their schedule twins
    assert second == first
    # without it each proposal sees what has come back by then: these two orders differ
    assert _trials(tmp_path, 0, reproducible=False) != _trials(tmp_path, 1, reproducible=False)


def test_with_a_time_budget_the_log_says_where_the_run_stops_is_not_reproducible(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    config = search_config(ckpt, trials=1, reproducible=True, time_budget_s=600.0)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store, caplog.at_level("WARNING", logger="tinytune.search.run.driver"):
        run_search(config, store, Shuffled(FakeEvaluator(), seed=0))
    assert (
        "reproducible=True with time_budget: where the clock stops the run depends on the "
        "machine's speed, so another run may measure more or fewer fine-tunes"
    ) in caplog.messages
