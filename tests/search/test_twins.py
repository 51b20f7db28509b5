"""Schedule twins: a candidate fine-tuned once is priced under every other patch count the
search proposes and joins the front at its own cost with the measured accuracies, without a
fine-tune or a unit of the study's budget."""

from __future__ import annotations

from pathlib import Path

import optuna

from tinytune.db import TWIN_OF, open_store
from tinytune.evaluators import EvaluationResult, FinetuneTask
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.search import InlineExecutor, preflight, run_search
from tinytune.spaces import Candidate

from .fakes import FakeEvaluator, search_config


def _search(tmp_path: Path, **kw: object) -> tuple[str, FakeEvaluator, object]:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    evaluator = FakeEvaluator()
    config = search_config(ckpt, **{"trials": 10, "mutate": 0.5, **kw})
    with open_store(url) as store:
        result = run_search(config, store, InlineExecutor(evaluator))
    return url, evaluator, (config, result)


def test_a_measured_candidate_is_priced_under_other_patch_counts_not_fine_tuned_again(
    tmp_path: Path,
) -> None:
    # every proposal after the presets a mutant: joint schemes' twins and presets' moves' twins
    url, evaluator, (config, result) = _search(tmp_path, trials=12, mutate=1.0)
    trained = [c.key for c in evaluator.candidates]  # the worker gets whole-image candidates
    assert len(trained) == len(set(trained)) == result.counts.measured == config.trials
    with open_store(url) as store:
        hardware = preflight(config, store).hardware
        stored = store.evaluations("s", fidelity="measured", status="ok")
        by_trial = {e.trial_number: e for e in stored}
        twins = [e for e in stored if (e.details or {}).get(TWIN_OF) is not None]
        assert twins and len(twins) == result.counts.twins
        assert {t.details["scheme"] for t in twins} > {"joint"}  # a preset's twins too
        assert store.measured_budget_spent("s") == (config.trials, 0)
        for twin in twins:
            shared = by_trial[twin.details[TWIN_OF]]
            assert TWIN_OF not in (shared.details or {})  # a twin names the fine-tune itself
            mine = Candidate.from_json(store.get_candidate(twin.candidate_key).payload)
            theirs = Candidate.from_json(store.get_candidate(shared.candidate_key).payload)
            assert mine != theirs and mine.training == theirs.training
            assert mine.schedule.patches != theirs.schedule.patches
            assert (twin.val_accuracy, twin.accuracy) == (shared.val_accuracy, shared.accuracy)
            cost = hardware(mine)  # its own cost, the hardware model's
            assert twin.memory_bytes == cost.sram_bytes
            assert twin.latency_ms == 1000.0 * float(cost.latency_s or 0.0)
            assert twin.wall_time_s == 0.0
            assert twin.details["scheme"] == shared.details["scheme"]  # a preset's stays
    trials = optuna.load_study(study_name="s", storage=url).trials
    told = [t for t in trials if "twin_of" in t.user_attrs]
    assert {t.number for t in told if t.state.name == "COMPLETE"} == {
        e.trial_number for e in twins
    }
    for t in told:
        if t.state.name == "COMPLETE":
            assert t.values[0] == by_trial[t.number].val_accuracy
            assert t.values[1] == by_trial[t.number].memory_bytes


def test_a_front_point_of_fewer_bytes_for_more_time_comes_from_a_twin(tmp_path: Path) -> None:
    url, _, (_, result) = _search(tmp_path, trials=14)
    with open_store(url) as store:
        stored = {e.candidate_key: e for e in store.evaluations("s", fidelity="measured")}
    from_twins = [p for p in result.front if (stored[p.candidate_key].details or {}).get(TWIN_OF)]
    assert from_twins  # the front holds twins: the same accuracy for less SRAM


def test_a_preset_search_makes_no_twins(tmp_path: Path) -> None:
    url, _, (_, result) = _search(tmp_path, preset="mcunetv3", mutate=0.0)
    assert result.counts.twins == 0
    with open_store(url) as store:
        assert not [
            e
            for e in store.evaluations("s", fidelity="measured")
            if (e.details or {}).get(TWIN_OF) is not None
        ]


def test_the_device_accuracy_of_twins_on_the_front_is_trained_once(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    fake, int8 = FakeEvaluator(), []

    def evaluate(task: FinetuneTask) -> EvaluationResult:
        if task.int8 is not None:
            int8.append(Candidate.from_json(task.candidate).training.key)
            details = {"lr": 0.0125, "schedule": "halving", "epochs": 4, "qas": True}
            details["weight_lr_scale"] = WEIGHT_LR_SCALE
            return fake(task).replace(val_accuracy=0.5, details=details)
        return fake(task)

    config = search_config(ckpt, trials=10, mutate=0.5, verify_int8=True)
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        result = run_search(config, store, InlineExecutor(evaluate))
        keys = {
            p.candidate_key: Candidate.from_json(
                store.get_candidate(p.candidate_key).payload
            ).training.key
            for p in result.front
        }
    assert len(set(keys.values())) < len(keys)  # twins on the front
    assert sorted(int8) == sorted(set(keys.values()))  # one training per fine-tune
    assert set(result.int8) == set(keys)  # every point has its device accuracy
    assert {a.val_accuracy for a in result.int8.values()} == {0.5}
    # a second run finds them stored: nothing is trained again
    int8.clear()
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        again = run_search(config, store, InlineExecutor(evaluate))
    assert int8 == [] and set(again.int8) == set(keys)
