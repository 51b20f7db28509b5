"""The device accuracies a study stores: read back with the rate's schedule they were measured
under, so that an exported bundle trains as measured."""

from __future__ import annotations

from pathlib import Path

from tinytune.db import EvaluationRecord, open_store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.exporting import _int8_entry
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.search.run.verify_int8 import Int8Accuracy, int8_accuracies


def test_a_device_accuracy_reads_back_with_its_rate_schedule_and_qas(
    tmp_path: Path,
) -> None:
    older = {"lr": 0.003125, "epochs": 4, "batch_size": 1, "schedule": "constant", "qas": True}
    newer = {**older, "lr": 0.1, "schedule": "halving", "epochs": 3, "qas": False}
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        for key, details in (("a" * 16, older), ("b" * 16, newer)):
            store.add_candidate(key, "ofa-proxyless-w0.35", "{}")
            store.add_evaluation(
                EvaluationRecord(
                    "s", key, "int8", "ok", accuracy=0.8, val_accuracy=0.9, details=details
                )
            )
        found = int8_accuracies(store, "s", ["a" * 16, "b" * 16, "c" * 16])
    assert set(found) == {"a" * 16, "b" * 16}
    assert found["a" * 16] == Int8Accuracy(0.9, 0.8, 0.003125, "constant", 4, True)
    assert found["b" * 16] == Int8Accuracy(0.9, 0.8, 0.1, "halving", 3, False)
    # what export trains the bundle by: the record read above, and nothing else of the store
    entry = _int8_entry(found["a" * 16], "the study")
    assert entry == {
        "accuracy": 0.8,
        "val_accuracy": 0.9,
        "lr": 0.003125,
        "schedule": "constant",
        "epochs": 4,
        "batch_size": 1,
        "qas": True,
        "source": "the study",
    }
    newest = _int8_entry(found["b" * 16], "the study")
    assert (newest["schedule"], newest["epochs"], newest["qas"]) == ("halving", 3, False)


def test_a_twin_of_a_point_trained_as_the_device_trains_is_stored_from_it(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from tinytune.search.execution.worker_tasks import Tasks
    from tinytune.search.front.recording import FrontPoint
    from tinytune.search.run.verify_int8 import verify_int8
    from tinytune.spaces import Candidate, Schedule, default_subnet, get_supernet, make_preset

    spec = get_supernet("ofa-proxyless-w0.35")
    whole = make_preset("last", spec, default_subnet(spec))
    patched, fresh = replace(whole, schedule=Schedule(2, 1)), make_preset("bias-only", spec)
    submitted: list[FinetuneTask] = []

    class Executor:  # trains nothing: a twin needs no task, a new fine-tune one
        def submit(self, key: int, task: FinetuneTask) -> None:
            submitted.append(task)
            result = EvaluationResult("ok", accuracy=0.7, val_accuracy=0.6, details=halving)
            self.done = [(key, result)]

        def wait(self, timeout: float) -> list:
            done, self.done = self.done, []
            return done

    def task(c: Candidate, lr: float | None = None) -> FinetuneTask:
        return FinetuneTask(c.to_json(), None, "digits", 0, FinetuneConfig())

    tasks = Tasks(Executor(), task, lambda: -1, _no)
    halving = {"lr": 0.0125, "schedule": "halving", "epochs": 4, "qas": True}
    halving["weight_lr_scale"] = WEIGHT_LR_SCALE
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        for c in (whole, patched, fresh):
            store.add_candidate(c.key, c.supernet, c.to_json())
        store.add_evaluation(
            EvaluationRecord(
                "s", whole.key, "int8", "ok", accuracy=0.8, val_accuracy=0.9, details=halving
            )
        )

        def point(c: Candidate, memory: int) -> FrontPoint:
            return FrontPoint(1, c.key, 0.9, 0.8, memory, None, 0.01, "joint", "s")

        runs, _ = verify_int8(tasks, store, "s", (point(patched, 100), point(fresh, 200)))
        found = int8_accuracies(store, "s", [patched.key, fresh.key])
        twin = store.find_evaluation("s", patched.key, "int8")
    assert runs == 1 and len(submitted) == 1  # the fresh point alone was trained
    assert found[patched.key] == Int8Accuracy(
        0.9, 0.8, 0.0125, "halving", 4, True, WEIGHT_LR_SCALE
    )
    assert twin is not None and twin.memory_bytes == 100
    assert (found[fresh.key].val_accuracy, found[fresh.key].test_accuracy) == (0.6, 0.7)


def test_a_device_accuracy_of_weights_at_the_full_rate_is_measured_again(tmp_path: Path) -> None:
    """A measurement stored before the device's weights learned at ``WEIGHT_LR_SCALE`` of the
    rate reads back at 1.0 and is not current: a bundle no longer trains as it did, so
    ``verify_int8`` trains the point again (and export measures it again)."""
    from tinytune.search.execution.worker_tasks import Tasks
    from tinytune.search.front.recording import FrontPoint
    from tinytune.search.run.verify_int8 import verify_int8
    from tinytune.spaces import Candidate, get_supernet, make_preset

    c = make_preset("bias-only", get_supernet("ofa-proxyless-w0.35"))
    old = {"lr": 0.0125, "schedule": "halving", "epochs": 4, "qas": True}
    new = {**old, "lr": 0.025, "weight_lr_scale": WEIGHT_LR_SCALE}
    submitted: list[FinetuneTask] = []

    class Executor:
        def submit(self, key: int, task: FinetuneTask) -> None:
            submitted.append(task)
            self.done = [(key, EvaluationResult("ok", 0.75, 0.85, details=new))]

        def wait(self, timeout: float) -> list:
            done, self.done = self.done, []
            return done

    def task(c: Candidate, lr: float | None = None) -> FinetuneTask:
        return FinetuneTask(c.to_json(), None, "digits", 0, FinetuneConfig())

    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        store.add_candidate(c.key, c.supernet, c.to_json())
        store.add_evaluation(
            EvaluationRecord("s", c.key, "int8", "ok", accuracy=0.8, val_accuracy=0.9, details=old)
        )
        before = int8_accuracies(store, "s", [c.key])[c.key]
        point = FrontPoint(1, c.key, 0.9, 0.8, 100, None, 0.01, "bias-only", "s")
        runs, _ = verify_int8(Tasks(Executor(), task, lambda: -1, _no), store, "s", (point,))
        after = int8_accuracies(store, "s", [c.key])[c.key]
    assert before.weight_lr_scale == 1.0 and not before.current
    assert runs == 1 and len(submitted) == 1
    assert after == Int8Accuracy(0.85, 0.75, 0.025, "halving", 4, True, WEIGHT_LR_SCALE)
    assert after.current


def _no(kind: str, /, **data: object) -> None:
    pass


def test_export_takes_a_stored_device_accuracy_only_where_the_bundle_trains_so(
    tmp_path: Path,
) -> None:
    """Export's manifest pairs the bundle with a stored measurement only when it is current;
    without measuring (``measure_int8=False``) an older one gives none."""
    from types import SimpleNamespace

    from tinytune.exporting import _device_accuracy

    storage = f"sqlite:///{tmp_path / 'db.sqlite'}"
    key = "d" * 16
    old = {"lr": 0.0125, "schedule": "halving", "epochs": 4, "qas": True}
    found = SimpleNamespace(
        candidate=SimpleNamespace(key=key), study="s", trial=1, evaluation=None
    )

    def stored(details: dict[str, object]) -> object:
        with open_store(storage) as store:
            store.add_evaluation(
                EvaluationRecord(
                    "s", key, "int8", "ok", accuracy=0.8, val_accuracy=0.9, details=details
                )
            )
        return _device_accuracy(storage, found, tmp_path, 0, False, None)

    with open_store(storage) as store:
        store.add_candidate(key, "ofa-proxyless-w0.35", "{}")
    assert stored(old) is None
    current = stored({**old, "weight_lr_scale": WEIGHT_LR_SCALE})
    assert current is not None
    accuracy, entry = current
    assert accuracy.current and entry["source"] == "the study" and entry["lr"] == 0.0125
