"""Successive halving (``--halving``): short fine-tunes screen each bracket, the most promising
member is fine-tuned in full, and every fine-tune's epochs are counted as the run's compute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tinytune.db import open_store
from tinytune.errors import BudgetError, ConfigError
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search import InlineExecutor, SearchConfig, run_search
from tinytune.search.execution.executor import Metered
from tinytune.search.study.adapter import EARLY_STARTUP_TRIALS, make_sampler
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate

from .fakes import fake_accuracy, search_config

EPOCHS = 4


class ScreeningFake:
    """Fine-tunes nothing: the accuracy of :func:`fake_accuracy`, 0.1 lower for a short
    fine-tune (fewer epochs or a share of the images), and the epochs it stands for."""

    def __init__(self, fail_short: bool = False) -> None:
        self.tasks: list[FinetuneTask] = []
        self.fail_short = fail_short

    def __call__(self, task: FinetuneTask) -> EvaluationResult:
        self.tasks.append(task)
        epochs = task.finetune.epochs
        fraction = task.train_fraction
        short = epochs < EPOCHS or fraction < 1.0
        if short and self.fail_short:
            return EvaluationResult.failed("RuntimeError: out of memory")
        acc = fake_accuracy(Candidate.from_json(task.candidate)) - (0.1 if short else 0.0)
        return EvaluationResult(
            "ok",
            accuracy=acc,
            val_accuracy=acc - 0.01,
            wall_time_s=0.5,
            details={"train_epochs": epochs * fraction},
        )


def _config(ckpt: Path, **kw: object) -> SearchConfig:
    """Brackets of 3, each screened for 1 epoch on half the training set."""
    fields: dict[str, object] = {
        "trials": 3,
        "baselines": False,
        "halving": True,
        "proxy_eta": 3,
        "screen_epochs": 1,
        "screen_fraction": 0.5,
        "finetune": FinetuneConfig(epochs=EPOCHS, batch_size=32, lr=0.05),
    }
    return search_config(ckpt, **{**fields, **kw})


def test_halving_screens_each_bracket_and_measures_one_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    fake = ScreeningFake()
    with open_store(url) as store:
        result = run_search(_config(ckpt), store, InlineExecutor(fake))
        measured = {e.candidate_key: e for e in store.evaluations("s", fidelity="measured")}
        short = {e.candidate_key: e for e in store.evaluations("s", fidelity="short")}
        snapshots = store.pareto_snapshots("s")
    c = result.counts
    assert c.measured == c.promoted == 3 and c.base_tasks == 0 and result.contribution_tasks == 0
    screens = [t for t in fake.tasks if t.train_fraction < 1.0]
    full = [t for t in fake.tasks if t.train_fraction == 1.0]
    assert len(screens) == c.screen_tasks == len(short) and len(full) == 3
    assert all(t.finetune.epochs == 1 and t.train_fraction == 0.5 for t in screens)
    assert all(t.finetune.epochs == EPOCHS for t in full)
    # compute: every task's epochs, short ones at their share of the images
    assert result.train_epochs == pytest.approx(3 * EPOCHS + 0.5 * len(screens))
    assert result.task_time_s == pytest.approx(0.5 * len(fake.tasks))

    study = optuna.load_study(study_name="s", storage=url)
    finished = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    # the schedule twins of the measured candidates are told their fine-tunes' results, and
    # a candidate proposed again the result it has (the sampler may draw one twice)
    again = [t for t in finished if Attr.REUSED_FROM in t.user_attrs]
    for t in again:
        first = study.trials[t.user_attrs[Attr.REUSED_FROM]]
        assert t.values == first.values
        assert t.user_attrs["candidate_key"] == first.user_attrs["candidate_key"]
    complete = [t for t in finished if "twin_of" not in t.user_attrs and t not in again]
    assert len(complete) == 3 and len(finished) == 3 + result.counts.twins + len(again)
    for t in complete:  # Optuna sees measured values only; each was screened first
        key = t.user_attrs["candidate_key"]
        assert t.user_attrs["promoted"] and t.values[0] == measured[key].val_accuracy
        assert t.user_attrs["short_val_accuracy"] == short[key].val_accuracy
    pruned = [
        t
        for t in study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
        if t.user_attrs.get("fidelity") == "short"
    ]
    assert len(pruned) == c.proxy_scored - c.promoted > 0
    for t in pruned:
        assert t.user_attrs["pruned_reason"].startswith("short: not promoted")
        assert t.user_attrs["candidate_key"] in short
        assert t.user_attrs["candidate_key"] not in measured
    # brackets share a sub-network; within each, the promoted member had a short score
    brackets: dict[int, list[Any]] = {}
    for t in [*complete, *pruned]:
        brackets.setdefault(t.user_attrs["ladder_bracket"], []).append(t)
    for members in brackets.values():
        assert len({t.params["resolution"] for t in members}) == 1
    # the front holds measured candidates only, and the short scores rank them (τ)
    assert {p.candidate_key for p in result.front} <= set(measured)
    for snap in snapshots:
        assert {p["candidate_key"] for p in snap.points} <= set(measured)
    assert result.proxy_pairs == 3
    from tinytune.cli.main import main

    assert main(["pareto", "--storage", url, "--study", "s"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"short: {len(short)} short fine-tunes in the study (not on the front)" in printed
    assert "over the 3 candidates measured too" in printed


def test_a_bracket_whose_screenings_all_failed_measures_nothing(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        result = run_search(
            _config(ckpt, trials=1, max_proposals=3),
            store,
            InlineExecutor(ScreeningFake(fail_short=True)),
        )
        failed = store.evaluations("s", fidelity="short", status="failed")
    assert result.counts.measured == 0 and result.counts.screen_tasks == len(failed) > 0
    assert all("out of memory" in (e.error or "") for e in failed)
    trials = optuna.load_study(study_name="s", storage=url).trials
    # a sibling enqueued after the last proposal waits for a later run, as with the proxy
    states = {optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.WAITING}
    assert {t.state for t in trials} <= states
    assert any(
        "every short fine-tune of its bracket failed" in t.user_attrs.get("pruned_reason", "")
        for t in trials
    )


def test_a_run_whose_screenings_all_fail_stops_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every member that joins a bracket is a proposal that may lead somewhere, so none is
    idle: with no proposal or time limit, a run whose short fine-tunes all fail once proposed
    for ever. ``max_idle_proposals`` short fine-tunes failed in a row end it, and the result,
    the log and the command's line say why (``max_proposals`` is set here only so that a run
    that would go on fails this test instead of hanging it)."""
    from tinytune.cli.search import _stopped

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    config = _config(ckpt, trials=5, max_idle_proposals=6, max_proposals=60)
    with open_store(url) as store, caplog.at_level("WARNING", logger="tinytune.search.run.driver"):
        result = run_search(config, store, InlineExecutor(ScreeningFake(fail_short=True)))
        failed = store.evaluations("s", fidelity="short", status="failed")
    assert result.stopped_by == "screening" and result.counts.measured == 0
    # the six in a row, and the members still to screen when the row ended (a bracket of 3)
    assert 6 <= result.counts.screen_tasks == len(failed) < 9
    assert (
        "stopped after 6 short fine-tunes in a row failed; the last: RuntimeError: out of "
        "memory" in caplog.messages
    )
    assert _stopped(result, 5, None, None, None) == (
        "the run stopped after a long row of short fine-tunes (--halving) that all failed, with "
        "0 of the study's 5 measured fine-tunes done (the reference not counted); the warning "
        "above names the last error"
    )


def test_a_screening_that_succeeds_ends_the_row_of_failed_ones(tmp_path: Path) -> None:
    """Short fine-tunes that fail now and then (every third succeeds) never make a row of
    ``max_idle_proposals``: the run measures its trials as before."""

    class EveryThird(ScreeningFake):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            short = task.train_fraction < 1.0
            self.fail_short = short and sum(t.train_fraction < 1.0 for t in self.tasks) % 3 != 2
            return super().__call__(task)

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    fake = EveryThird()
    with open_store(url) as store:
        result = run_search(
            _config(ckpt, trials=3, max_idle_proposals=3), store, InlineExecutor(fake)
        )
        short = store.evaluations("s", fidelity="short")
    assert result.stopped_by is None and result.counts.measured == result.counts.promoted == 3
    assert [e.status for e in short][:6] == ["failed", "failed", "ok"] * 2


def test_the_meter_adds_up_epochs_and_seconds() -> None:
    results = iter(
        [
            EvaluationResult("ok", wall_time_s=1.0, details={"train_epochs": 2.5}),
            EvaluationResult("ok"),
        ]
    )
    meter = Metered(InlineExecutor(lambda task: next(results)))
    task = FinetuneTask("{}", None, "digits", 0, FinetuneConfig())
    meter.submit(1, task)
    meter.submit(2, task)
    while meter.in_flight:
        meter.wait(timeout=0.1)
    assert (meter.train_epochs, meter.task_s, meter.slots) == (2.5, 1.0, 1)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"proxy": True}, "^proxy=True and halving=True are two low rungs"),
        ({"screen_epochs": 0}, "^screen_epochs must lie in \\[1, 1000\\], got 0"),
        (
            {"screen_epochs": 1001, "screen_fraction": 0.001},
            "^screen_epochs must lie in \\[1, 1000\\]",
        ),
        ({"screen_fraction": 0.0}, r"^screen_fraction must lie in \(0, 1\]"),
        ({"screen_epochs": EPOCHS, "screen_fraction": 1.0}, "must cost less than a measured"),
    ],
)
def test_bad_halving_settings_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(Path("w.pt"), **kw)


def test_bad_halving_options_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tinytune.cli.main import main

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code = main(["search", "--storage", url, "--halving", "--proxy"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "choose one" in err
    assert not (tmp_path / "db.sqlite").exists()


def test_tpe_early_and_gp_model_from_their_fifth_trial() -> None:
    """With one seed, Optuna's TPE and ``tpe-early`` draw the same start-up trials; from the
    5th on, ``tpe-early`` models the finished ones while TPE still draws at random. ``gp``
    draws its start-up trials as the random sampler does, then models them."""

    def draws(sampler_name: str) -> list[tuple[float, float]]:
        config = _config(Path("w.pt"), halving=False, sampler=sampler_name, seed=3)
        study = optuna.create_study(
            directions=["maximize", "minimize", "minimize"], sampler=make_sampler(config)
        )
        out = []
        for _ in range(EARLY_STARTUP_TRIALS + 3):
            trial = study.ask()
            x, y = trial.suggest_float("x", 0, 1), trial.suggest_float("y", 0, 1)
            study.tell(trial, (x + y, x * y, 1 - x))
            out.append((x, y))
        return out

    early, tpe, again = draws("tpe-early"), draws("tpe"), draws("tpe-early")
    assert early[:EARLY_STARTUP_TRIALS] == tpe[:EARLY_STARTUP_TRIALS]
    assert early[EARLY_STARTUP_TRIALS:] != tpe[EARLY_STARTUP_TRIALS:]
    assert early == again  # seeded
    gp, random = draws("gp"), draws("random")
    assert gp[:EARLY_STARTUP_TRIALS] == random[:EARLY_STARTUP_TRIALS]  # its start-up sampler
    assert gp[EARLY_STARTUP_TRIALS:] != random[EARLY_STARTUP_TRIALS:]
    assert gp == draws("gp")  # seeded


@pytest.mark.parametrize("halving", [False, True])
def test_the_epoch_budget_caps_the_run_s_compute(tmp_path: Path, halving: bool) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    budget = 23.0
    config = _config(ckpt, trials=100, epoch_budget=budget, halving=halving, baselines=True)
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(ScreeningFake()))
    fresh = EPOCHS + (3 * 0.5 if halving else 0.0)  # a measured fine-tune, with its screenings
    assert result.train_epochs <= budget < result.train_epochs + fresh
    assert result.stopped_by == "epochs"
    if not halving:  # five measured fine-tunes of 4 epochs fit 23, six do not
        assert result.counts.measured == 5 and result.train_epochs == 20.0
    else:  # the four baselines directly (16), then one bracket: three screenings and one
        assert result.counts.promoted == 1 and result.counts.measured == 5
        assert result.train_epochs == 16 + EPOCHS + 0.5 * result.counts.screen_tasks
    with pytest.raises(BudgetError, match=r"^epoch_budget must be > 0"):
        _config(ckpt, epoch_budget=0.0)
