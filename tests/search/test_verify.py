"""The device accuracies a study stores: read back with the rate's schedule they were measured
under, so that an exported bundle trains as measured."""

from __future__ import annotations

from pathlib import Path

from tinytune.api import _int8_entry
from tinytune.db import EvaluationRecord, open_store
from tinytune.search.verify import int8_accuracies


def test_a_device_accuracy_stored_before_the_rate_could_halve_reads_as_constant(
    tmp_path: Path,
) -> None:
    older = {"lr": 0.003125, "epochs": 4, "batch_size": 1, "qas": True}
    newer = {**older, "lr": 0.1, "schedule": "halving"}
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
    assert (found["a" * 16].lr, found["a" * 16].schedule) == (0.003125, "constant")
    assert (found["b" * 16].lr, found["b" * 16].schedule) == (0.1, "halving")
    # what export trains the bundle by: the record read above, and the details it lacks
    entry = _int8_entry(found["a" * 16], older, "the study")
    assert (entry["schedule"], entry["lr"], entry["epochs"]) == ("constant", 0.003125, 4)
    assert (entry["accuracy"], entry["val_accuracy"], entry["qas"]) == (0.8, 0.9, True)
    assert _int8_entry(found["b" * 16], newer, "the study")["schedule"] == "halving"
