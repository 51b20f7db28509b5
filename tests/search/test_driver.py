"""The driver end to end in one process: Optuna, tinytune's tables, budgets and failures."""

from __future__ import annotations

import re
import time
from pathlib import Path

import optuna
import pytest

from tinytune.db import open_store
from tinytune.errors import CLI, BudgetError, ConfigError, StorageError
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask, run_evaluation
from tinytune.search import InlineExecutor, run_search
from tinytune.search.config.budgets import CONSTRAINTS
from tinytune.search.study.attrs import Attr
from tinytune.spaces import Candidate, get_supernet

from .dashboard import dashboard_api
from .fakes import search_config

SPEC = get_supernet("ofa-proxyless-w0.35")


def _budgets(trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    """The trial's constraints as Optuna's samplers read them, by budget."""
    return dict(zip(CONSTRAINTS, trial.constraints.values(), strict=True))


@pytest.mark.slow
def test_search_stores_the_same_trials_in_optuna_and_tinytune(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    # full fine-tuning's arena at 40 px is about 241 KB: a budget under it
    config = search_config(tiny_checkpoint, reference=True, sram_budget_bytes=200 * 1024)
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(run_evaluation))
    assert result.counts.measured == 3  # the budget of 2, and the reference beside it
    study = optuna.load_study(study_name="s", storage=url)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    # the reference first (full fine-tuning, measured over the SRAM budget), then the baselines
    assert [t.params["scheme"] for t in complete] == ["full", "last", "bias-only"]
    assert complete[0].user_attrs["reference"] is True
    assert _budgets(complete[0])["sram"] > 0  # infeasible for the samplers
    # and for optuna-dashboard, which marks such trials on its Pareto-front plot
    detail = dashboard_api(url, f"/api/studies/{study._study_id}")
    shown = {t["number"]: t["constraints"] for t in detail["trials"]}
    assert shown[complete[0].number] == list(complete[0].constraints.values())
    assert shown[complete[0].number][0] > 0 and all(c <= 0 for c in shown[complete[1].number])
    assert result.reference is not None and result.reference.trial == complete[0].number
    assert complete[0].user_attrs["candidate_key"] not in {
        p.candidate_key for p in result.front
    }  # over the SRAM budget, so not on the front
    with open_store(url) as store:
        evals = store.evaluations("s", fidelity="measured")
        assert {e.trial_number for e in evals} == {t.number for t in complete}
        for t in complete:
            e = next(e for e in evals if e.trial_number == t.number)
            assert e.val_accuracy == t.values[0]  # chosen on validation
            assert t.user_attrs["test_accuracy"] == e.accuracy  # test reported beside it
            assert e.memory_bytes == t.values[1]
            assert e.latency_ms == pytest.approx(1000 * t.values[2])
            assert t.values[2] == t.user_attrs["latency_s"] > 0
            stored = store.get_candidate(t.user_attrs["candidate_key"])
            assert Candidate.from_json(stored.payload).key == e.candidate_key
        snap = store.latest_pareto("s")
    assert snap is not None and snap.points
    assert all(0.0 <= p["val_accuracy"] <= 1.0 for p in snap.points)


def test_the_reference_within_every_budget_is_on_the_front(tmp_path: Path) -> None:
    """Without an SRAM budget full fine-tuning is an option like any other: the most
    accurate here (the fake scores it highest), so on the front, labelled as the reference."""
    from .fakes import FakeEvaluator

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    config = search_config(ckpt, reference=True, sram_budget_bytes=None)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert result.reference is not None
    on_front = [p for p in result.front if p.candidate_key == result.reference.candidate_key]
    assert [p.scheme for p in on_front] == ["full (reference)"]
    assert on_front[0].val_accuracy == max(p.val_accuracy for p in result.front)


def test_the_drivers_own_seconds_leave_out_the_fine_tunes_it_waits_on(tmp_path: Path) -> None:
    """``driver_s`` is the search loop's own work: with fine-tunes that each take 0.2 s (run
    inside the inline executor's wait), it is under the wall time less every fine-tune's."""
    from .fakes import FakeEvaluator

    class Slow(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            time.sleep(0.2)
            return super().__call__(task)

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    slow = Slow()
    config = search_config(ckpt, trials=4, tune_lr=False)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(slow))
    assert len(slow.candidates) >= 4
    assert 0.0 < result.driver_s <= result.wall_time_s - 0.2 * len(slow.candidates)


def test_the_result_names_the_latency_profile_and_a_forced_calibration(
    tmp_path: Path,
) -> None:
    """A calibration stored with --force predicts the search's latencies all the same, and
    the result (which the CLI's front table names) says FORCED; a built-in one says so."""
    from tinytune.hwmodels import get_device

    from .fakes import FakeEvaluator

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(search_config(ckpt, trials=1), store, InlineExecutor(FakeEvaluator()))
        assert result.latency_profile == "stm32f746, bundle engine (built-in)"
        profile = get_device("stm32f746").to_dict()
        cid = store.add_calibration("stm32f746", profile, {}, forced=True)
        config = search_config(ckpt, trials=2)
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert result.latency_profile == (
        f"stm32f746, bundle engine (calibration {cid} (FORCED: held-out error above the "
        "accuracy required))"
    )


def test_a_study_with_another_space_is_refused_and_kept(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation))
    with open_store(url) as store, pytest.raises(StorageError, match="another search space"):
        run_search(
            search_config(tiny_checkpoint, dataset="procedural"),
            store,
            InlineExecutor(run_evaluation),
        )
    assert len(optuna.load_study(study_name="s", storage=url).trials) >= 1


def test_a_stored_space_that_lacks_a_key_is_refused_and_kept(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A study whose stored space lacks a key that every space of this version holds (the
    engine, the parameter update, the fine-tuning settings) is another search space: resuming
    it is refused in one line, and its trials stay."""
    from tinytune.search.study.attrs import Attr

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation))
    study = optuna.load_study(study_name="s", storage=url)
    n, space = len(study.trials), study.user_attrs[Attr.SPACE]
    for key, words in (
        ("engine", r"'engine': \(None, 'bundle'\)"),
        ("update", r"'update': \(None, 'fused'\)"),
        ("finetune", r"'finetune': \{'epochs': \(None, 1\)"),
    ):
        study.set_user_attr(Attr.SPACE, {k: v for k, v in space.items() if k != key})
        with open_store(url) as store, pytest.raises(StorageError, match=words) as raised:
            run_search(
                search_config(tiny_checkpoint, trials=2), store, InlineExecutor(run_evaluation)
            )
        assert "\n" not in str(raised.value)
        assert len(optuna.load_study(study_name="s", storage=url).trials) == n


def test_a_study_that_ranked_arenas_alone_is_refused_and_kept(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A study stored when a candidate's SRAM was its arena alone (objective
    ``peak_sram_bytes``) cannot share a front with one that counts the static data and the
    stack: resuming it is refused in one line that says so, and its trials stay."""
    from tinytune.search.study.attrs import Attr

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation))
    study = optuna.load_study(study_name="s", storage=url)
    n, space = len(study.trials), study.user_attrs[Attr.SPACE]
    assert space["objectives"] == ["accuracy", "sram_bytes", "latency_s"]
    study.set_user_attr(
        Attr.SPACE, {**space, "objectives": ["accuracy", "peak_sram_bytes", "latency_s"]}
    )
    with open_store(url) as store, pytest.raises(StorageError) as raised:
        run_search(search_config(tiny_checkpoint, trials=2), store, InlineExecutor(run_evaluation))
    words = str(raised.value)
    assert "\n" not in words and "another search space" in words
    assert "its SRAM figures are the planner's arenas alone" in words
    assert len(optuna.load_study(study_name="s", storage=url).trials) == n


def test_a_study_goes_on_only_with_its_own_fine_tuning_settings(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """Accuracies measured with other epochs, batch size, rate, repeats or weights would be
    ranked on one front with the study's own: each such change is refused, the study's own
    settings named, and its trials stay."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation))
    study = optuna.load_study(study_name="s", storage=url)
    n = len(study.trials)
    assert study.user_attrs[Attr.SPACE]["finetune"] == {
        "epochs": 1,
        "lr": 0.05,
        "batch_size": 32,
        "weight_decay": 0.0,
        "augment": "none",
        "repeats": "auto",
    }
    # the study's own settings, as each front end names them: (Python, command line)
    for change, diff, python, cli in (
        (
            {"finetune": FinetuneConfig(epochs=2, lr=0.05)},
            r"'epochs': \(1, 2\)",
            "epochs=1",
            "--epochs 1",
        ),
        (
            {"finetune": FinetuneConfig(epochs=1, batch_size=16, lr=0.05)},
            r"'batch_size': \(32, 16\)",
            "batch_size=32",
            "--batch-size 32",
        ),
        (
            {"finetune": FinetuneConfig(epochs=1, lr=0.1)},
            r"'lr': \(0.05, 0.1\)",
            "lr=0.05",
            "--lr 0.05",
        ),
        ({"tune_lr": True}, r"'lr': \(0.05, 'per family'\)", "lr=0.05", "--lr 0.05"),
        (
            {"repeats": 2},
            r"'repeats': \('auto', 2\)",
            r"repeats \(leave out repeats\)",
            r"repeats \(leave out --repeats\)",
        ),
        # another device: its own engine follows, so the device is what to pass
        (
            {"device": "rpi4"},
            r"'device': \('stm32f746', 'rpi4'\)",
            "study name or pass device='stm32f746'$",
            "--study name or pass --device stm32f746$",
        ),
    ):
        with open_store(url) as store, pytest.raises(StorageError) as raised:
            run_search(
                search_config(tiny_checkpoint, trials=2, **change),
                store,
                InlineExecutor(run_evaluation),
            )
        assert re.search(f"another search space.*{diff}.* {python}", str(raised.value))
        assert re.search(f"another search space.*{diff}.* {cli}", raised.value.worded(CLI))
    other = tmp_path / "other-weights.pt"
    other.write_bytes(tiny_checkpoint.read_bytes() + b"\0")  # other weights: another SHA-256
    with (
        open_store(url) as store,
        pytest.raises(
            StorageError,
            match=r"'weights': \('[0-9a-f]{12}…', '[0-9a-f]{12}…'\).*own weights='",
        ) as raised,
    ):
        run_search(search_config(other, trials=2), store, InlineExecutor(run_evaluation))
    assert f"its own --weights {tiny_checkpoint}" in raised.value.worded(CLI)
    assert len(optuna.load_study(study_name="s", storage=url).trials) == n
    # stored by a version without the bound on --epochs (or damaged): no option asks for its
    # length now, and no other option helps
    space = study.user_attrs[Attr.SPACE]
    for epochs, words in (
        (80_000_000, r"must lie in \[1, 1000\], got 80000000"),
        (0, r"must lie in \[1, 1000\], got 0"),
        (8.5, "must be an integer, got 8.5"),
        (None, "must be an integer, got None"),
    ):
        finetune = {**space["finetune"], "epochs": epochs}
        study.set_user_attr(Attr.SPACE, {**space, "finetune": finetune})
        for change in ({}, {"finetune": FinetuneConfig(epochs=1, lr=0.1)}, {"device": "rpi4"}):
            with open_store(url) as store, pytest.raises(StorageError) as raised:
                run_search(
                    search_config(tiny_checkpoint, trials=2, **change),
                    store,
                    InlineExecutor(run_evaluation),
                )
            # FinetuneConfig's own refusal, its option named as each front end names it
            for wording, name, option in (
                (str(raised.value), "study", "epochs"),
                (raised.value.worded(CLI), "--study", "--epochs"),
            ):
                assert re.search(
                    rf"another {name} name \(its length cannot be asked for now: {option} "
                    rf"{words}; so it cannot be continued\)$",
                    wording,
                )
    study.set_user_attr(Attr.SPACE, space)
    assert len(optuna.load_study(study_name="s", storage=url).trials) == n


def test_infeasible_budget_is_refused_before_anything_runs(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store, pytest.raises(BudgetError, match="no candidate"):
        run_search(
            search_config(tiny_checkpoint, sram_budget_bytes=1024),
            store,
            InlineExecutor(run_evaluation),
        )


def test_failed_evaluations_are_stored_not_lost(tmp_path: Path, tiny_checkpoint: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"

    def broken(task: FinetuneTask) -> EvaluationResult:
        return EvaluationResult.failed("RuntimeError: out of memory", 0.1)

    with open_store(url) as store:
        result = run_search(search_config(tiny_checkpoint), store, InlineExecutor(broken))
        failed = store.evaluations("s", status="failed")
    assert result.counts.failed == 2 and result.counts.measured == 0
    assert [e.error for e in failed] == ["RuntimeError: out of memory"] * 2
    assert result.errors == ("RuntimeError: out of memory",)  # distinct, for the user
    states = [t.state for t in optuna.load_study(study_name="s", storage=url).trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 2


@pytest.mark.slow
def test_over_budget_candidates_are_pruned_without_training(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    calls: list[FinetuneTask] = []

    def counting(task: FinetuneTask) -> EvaluationResult:
        calls.append(task)
        return run_evaluation(task)

    config = search_config(tiny_checkpoint, trials=5, sram_budget_bytes=60 * 1024)
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(counting))
    study = optuna.load_study(study_name="s", storage=url)
    pruned = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert result.counts.pruned == len(pruned) >= 1  # "full" needs far more than 60 KB
    assert all(t.user_attrs["memory_bytes"] > 60 * 1024 for t in pruned)
    assert len(calls) == result.counts.measured + result.counts.failed


@pytest.mark.parametrize(
    "beat",
    [
        True,  # a driver beat once for the trial, then died
        pytest.param(False, marks=pytest.mark.slow),  # it died before its first beat
    ],
)
def test_a_trial_whose_driver_died_is_failed_and_retried(
    tmp_path: Path, tiny_checkpoint: Path, beat: bool
) -> None:
    """A trial whose heartbeat went stale is failed and retried by the next driver. One that
    never beat (its driver was killed between creating it and its first heartbeat) is one that
    Optuna never finds stale: the next driver adopts it (one beat), and a grace period later
    it is failed and retried like any other."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        run_search(
            search_config(tiny_checkpoint, trials=1, baselines=False),
            store,
            InlineExecutor(run_evaluation),
        )
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=4)
    study = optuna.load_study(study_name="s", storage=storage)
    dead = study.ask()
    from tinytune.evaluators.hardware import SEARCHED_PATCHES
    from tinytune.spaces import suggest_candidate

    suggest_candidate(dead, SPEC, patches=SEARCHED_PATCHES)  # as the driver proposes
    # as if proposed under an SRAM budget raised since
    storage.set_trial_system_attr(dead._trial_id, Attr.CONSTRAINTS, [1e9, 0.0, 0.0])
    if beat:
        storage.record_heartbeat(dead._trial_id)
        time.sleep(5.5)  # SQLite's clock has whole seconds: a margin over the grace period
    with open_store(url) as store:
        result = run_search(
            search_config(
                tiny_checkpoint, trials=2, resume=True, baselines=False, heartbeat_s=1, grace_s=4
            ),
            store,
            InlineExecutor(run_evaluation),
        )
    assert result.counts.retried == 1
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert trials[dead.number].state == optuna.trial.TrialState.FAIL
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    retried = [
        t
        for t in trials
        if t.system_attrs.get("failed_trial") == dead.number  # RetryHeartbeatStaleTrialCallback
    ]
    assert len(retried) == 1 and retried[0].params == dead.params
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert retried[0].state in finished  # measured, or pruned as over budget
    # constrained afresh, under this run's budgets, not those the dead trial carried
    budget = search_config(tiny_checkpoint).sram_budget_bytes
    assert budget is not None
    assert _budgets(retried[0])["sram"] == retried[0].user_attrs["memory_bytes"] - budget


@pytest.mark.requires_postgres
def test_search_on_postgresql(postgres_url: str, tiny_checkpoint: Path) -> None:
    with open_store(postgres_url) as store:
        result = run_search(
            search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation)
        )
        evals = store.evaluations("s")
    assert result.counts.measured == 1 and len(evals) == 1
    study = optuna.load_study(study_name="s", storage=postgres_url)
    assert study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))[0].values[0] == (
        evals[0].val_accuracy
    )


def test_latency_objective_follows_the_device_profile(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """The third objective is the device profile's predicted step latency: the same candidate
    is predicted slower on the 64 MHz nRF52840 than on the 216 MHz STM32F746."""
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.builtin_devices import builtin_profiles
    from tinytune.spaces import default_subnet, make_preset

    profiles = builtin_profiles()
    candidate = make_preset("mcunetv3", SPEC, default_subnet(SPEC))
    f746 = HardwareEvaluator(SPEC, 10, HardwareConfig(), profiles["stm32f746"])(candidate)
    nrf = HardwareEvaluator(SPEC, 10, HardwareConfig(), profiles["nrf52840"])(candidate)
    assert f746.arena_bytes == nrf.arena_bytes
    assert nrf.latency_s > 2 * f746.latency_s > 0


def test_latency_budget_prunes_and_budgets_beyond_the_device_are_refused(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels import get_device
    from tinytune.spaces import default_subnet, make_preset

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store, pytest.raises(BudgetError, match="exceeds the 327680 bytes"):
        run_search(
            search_config(tiny_checkpoint, sram_budget_bytes=512 * 1024),
            store,
            InlineExecutor(run_evaluation),
        )
    with (
        open_store(url) as store,
        pytest.raises(BudgetError, match=r"latency budget of 0\.001 ms"),
    ):
        run_search(
            search_config(tiny_checkpoint, latency_budget_s=1e-6),
            store,
            InlineExecutor(run_evaluation),
        )
    # a budget just above the classifier-only baseline: it is measured, costlier schemes pruned
    hw = HardwareEvaluator(SPEC, 10, HardwareConfig(), get_device("stm32f746"))  # the bundle
    last = hw(make_preset("last", SPEC, default_subnet(SPEC))).latency_s
    with open_store(url) as store:
        result = run_search(
            search_config(tiny_checkpoint, latency_budget_s=1.001 * last, max_idle_proposals=8),
            store,
            InlineExecutor(run_evaluation),
        )
    assert result.counts.measured >= 1 and result.counts.pruned >= 1
    assert all(p.latency_s <= 1.001 * last for p in result.front)
    study = optuna.load_study(study_name="s", storage=url)
    pruned = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert all("latency exceeds its budget" in t.user_attrs["pruned_reason"] for t in pruned)
    assert all(_budgets(t)["latency"] > 0 for t in pruned)


def test_a_row_of_proposals_over_the_budget_ends_the_run_and_says_so(tmp_path: Path) -> None:
    """Under an SRAM budget that only classifier-only updates meet, the proposals that follow
    the baselines are pruned one after another until ``max_idle_proposals`` in a row end the
    run, short of the study's trials: ``stopped_by`` says so, for the command to print."""
    from .fakes import FakeEvaluator

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"weights")
    # the sampler's proposals alone: mutants are proposed within the budget only
    config = search_config(
        ckpt, trials=50, sram_budget_bytes=32 * 1024, max_idle_proposals=4, mutate=0.0
    )
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(FakeEvaluator()))
    assert result.finished < 50 and result.counts.pruned >= 4
    assert result.stopped_by == "idle"


def test_the_limit_that_stopped_the_run_is_the_first_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--proposals 1 is reached at the first proposal; the time budget runs out while its
    fine-tune trains (the run's clock jumps an hour inside it, so that no machine's speed
    decides). The run was stopped by the proposals, not the time."""
    import types

    import tinytune.search.config.budgets as budgets

    from .fakes import FakeEvaluator

    hour = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + hour[0])
    monkeypatch.setattr(budgets, "time", clock)

    class Slow(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            hour[0] = 3600.0
            return super().__call__(task)

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"weights")
    config = search_config(ckpt, trials=5, max_proposals=1, time_budget_s=600.0)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(Slow()))
    assert (result.proposals, result.finished) == (1, 1)
    assert not budgets.RunLimits(600.0, None, 1, time.monotonic()).time_left()  # it ran out
    assert result.stopped_by == "proposals"


def test_trials_count_over_the_whole_study(tmp_path: Path, tiny_checkpoint: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_store(url) as store:
        first = run_search(
            search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation)
        )
        again = run_search(
            search_config(tiny_checkpoint, trials=1), store, InlineExecutor(run_evaluation)
        )
        more = run_search(
            search_config(tiny_checkpoint, trials=2, resume=True),
            store,
            InlineExecutor(run_evaluation),
        )
        assert (first.counts.measured, again.counts.measured, more.counts.measured) == (1, 0, 1)
        assert first.stopped_by is again.stopped_by is more.stopped_by is None  # budget spent
        assert len(store.evaluations("s", fidelity="measured")) == 2
    with open_store(url) as store, pytest.raises(StorageError, match="no study 'other'"):
        run_search(
            search_config(tiny_checkpoint, study_name="other", resume=True),
            store,
            InlineExecutor(run_evaluation),
        )


def test_the_weights_hint_names_the_studys_own_weights(tmp_path: Path) -> None:
    from tinytune.checkpoints import shipped_checkpoint
    from tinytune.search.study.space_checks import weights_hint

    config = search_config(tmp_path / "w.pt")
    shipped = shipped_checkpoint(get_supernet(config.supernet))
    assert shipped is not None
    shipped_hint = weights_hint(config, str(shipped))
    assert shipped_hint.worded(CLI) == (
        " or leave out --weights (the study searched with the shipped checkpoint)"
    )
    assert str(shipped_hint) == (
        " or leave out weights (the study searched with the shipped checkpoint)"
    )
    mine = weights_hint(config, "my weights.pt")
    assert mine.worded(CLI) == " or pass its own --weights 'my weights.pt'"
    assert str(mine) == " or pass its own weights='my weights.pt'"


def test_a_device_whose_flash_holds_no_candidate_is_refused() -> None:
    """The floor of flash is the classifier-only scheme of the smallest sub-network: every
    weight in flash and the fewest kernels."""
    import dataclasses

    from tinytune.evaluators import HardwareConfig, HardwareEvaluator
    from tinytune.hwmodels.registry import get_device
    from tinytune.search import SearchConfig
    from tinytune.search.config.budgets import check_feasible
    from tinytune.spaces import get_supernet, make_preset

    spec = get_supernet("ofa-proxyless-w0.35")
    device = get_device("stm32f746")
    config = SearchConfig(checkpoint=None)
    hw = HardwareEvaluator(spec, config.n_classes, config.hardware, device)
    floor = hw(make_preset("last", spec)).flash_bytes
    for preset in ("bias-only", "mcunetv3", "tinytl", "full"):
        assert hw(make_preset(preset, spec)).flash_bytes > floor
    check_feasible(dataclasses.replace(config, flash_budget_bytes=floor), hw)
    with pytest.raises(BudgetError, match=f"flash budget of {floor - 1} bytes.*needs {floor}"):
        check_feasible(dataclasses.replace(config, flash_budget_bytes=floor - 1), hw)
    small = dataclasses.replace(device, flash_bytes=floor - 1)
    tiny = HardwareEvaluator(spec, config.n_classes, HardwareConfig(), small)
    with pytest.raises(BudgetError, match=f"the {floor - 1} bytes of flash of stm32f746"):
        check_feasible(config, tiny)


def test_the_hint_for_another_device_names_the_studys_engine_when_not_its_default() -> None:
    from tinytune.search import SearchConfig
    from tinytune.search.study.space_checks import another_space

    config = SearchConfig(checkpoint="", study_name="s", device="rpi4")
    default = another_space(
        config, {"device": ("stm32f746", "rpi4"), "engine": ("bundle", "published")}, None
    )
    assert default.worded(CLI).endswith("--study name or pass --device stm32f746")
    assert str(default).endswith("study name or pass device='stm32f746'")
    other = another_space(
        config, {"device": ("stm32f746", "rpi4"), "engine": ("published", "pytorch")}, None
    )
    assert other.worded(CLI).endswith("or pass --device stm32f746 and --engine published")
    assert str(other).endswith("or pass device='stm32f746' and engine='published'")


def test_fine_tunes_ask_for_their_gpu_share_and_the_int8_training_for_none(
    tmp_path: Path,
) -> None:
    """Every fp32 fine-tune's task carries ``--gpus-per-trial`` for the executor to ask Ray
    for; the front's int8 training asks for none. The result counts tasks by their device."""
    from .fakes import FakeEvaluator

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    fake = FakeEvaluator()
    asked: list[tuple[str, float]] = []

    def evaluate(task: FinetuneTask) -> EvaluationResult:
        asked.append(("fp32" if task.int8 is None else "int8", task.gpus))
        result = fake(task)
        return result.replace(details={**result.details, "device": "cpu"})

    config = search_config(ckpt, gpus_per_trial=0.5, verify_int8=True)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(evaluate))
    fp32 = [gpus for fidelity, gpus in asked if fidelity == "fp32"]
    int8 = [gpus for fidelity, gpus in asked if fidelity == "int8"]
    assert fp32 and set(fp32) == {0.5}
    assert int8 and set(int8) == {0.0}
    assert result.devices == {"cpu": len(asked)}


@pytest.mark.parametrize(
    ("gpus", "allowed"), [(0, True), (0.25, True), (1, True), (3, True), (1.5, False), (-1, False)]
)
def test_gpus_per_trial_is_a_share_of_one_gpu_or_whole_gpus(
    tmp_path: Path, gpus: float, allowed: bool
) -> None:
    if allowed:
        assert search_config(tmp_path / "w.pt", gpus_per_trial=gpus).gpus_per_trial == gpus
        return
    with pytest.raises(
        ConfigError,
        match=rf"^gpus_per_trial must be a share of one GPU in \[0, 1\] or a whole number of "
        rf"GPUs, got {gpus:g}$",
    ):
        search_config(tmp_path / "w.pt", gpus_per_trial=gpus)


def test_a_study_at_chance_says_so(tmp_path: Path) -> None:
    """Weights that kill the features: every candidate scores 10 % on ten classes, and the
    result says the front is at chance; an ordinary study's does not."""
    from tinytune.search.run.events import at_chance

    from .fakes import FakeEvaluator

    class Guessing(FakeEvaluator):
        def __call__(self, task: FinetuneTask) -> EvaluationResult:
            return super().__call__(task).replace(accuracy=0.1, val_accuracy=0.1)

    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    with open_store(f"sqlite:///{tmp_path / 'a.sqlite'}") as store:
        result = run_search(search_config(ckpt, trials=2), store, InlineExecutor(Guessing()))
    assert result.chance == 0.1
    with open_store(f"sqlite:///{tmp_path / 'b.sqlite'}") as store:
        fine = run_search(search_config(ckpt, trials=2), store, InlineExecutor(FakeEvaluator()))
    assert fine.chance is None
    # three standard errors of a binomial at 1/10 over 360 images: 14.7 %
    assert at_chance([0.10, 0.147], 10, 360) and not at_chance([0.10, 0.148], 10, 360)
    assert not at_chance([], 10, 360)
