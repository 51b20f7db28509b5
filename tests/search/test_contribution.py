"""Contribution analysis: the configurations it fine-tunes, the gains it derives, and reuse of
stored tables by key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tinytune.db import open_store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.search import InlineExecutor
from tinytune.search.ladder.contribution import (
    ContributionPlan,
    TableIdentity,
    file_sha256,
    run_contributions,
)
from tinytune.search.ladder.contribution_table import build_table, interpolate
from tinytune.spaces import Candidate, default_subnet

from .fakes import KINDS, SPEC, SUBNET, FakeEvaluator, made_up_records

N = len(KINDS)
SMALL = ContributionPlan(
    weight_layers=(N - 1,), ratios=(0.5, 1.0), bias_ks=(), lite_offsets=(0,), norm=False
)


def _identity(checkpoint: Path, **kw: object) -> TableIdentity:
    base: dict[str, object] = {
        "supernet": SPEC.name,
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": file_sha256(checkpoint),
        "dataset": "digits",
        "data_seed": 0,
        "finetune": FinetuneConfig(epochs=1),
        "subnet": SUBNET,
    }
    base.update(kw)
    return TableIdentity(**base)  # type: ignore[arg-type]


def _task(candidate: Candidate) -> FinetuneTask:
    return FinetuneTask(candidate.to_json(), None, "digits", 0, FinetuneConfig())


def test_default_plan_measures_the_tail_every_weight_entry_needs() -> None:
    entries = ContributionPlan().entries(SPEC, SUBNET)
    names = [e.entry for e in entries]
    assert names[0] == "base" and len(names) == len(set(names)) == 34
    tails = {e.layer for e in entries if e.part == "bias"}
    weights = [e for e in entries if e.part == "weight"]
    assert {e.layer for e in weights} == {N - 1, N - 2, N - 3, N - 4, 18}
    assert {KINDS[e.layer] for e in weights} == {"head", "pw2", "dw", "pw1"}
    assert N in tails
    for e in weights:
        assert N - e.layer in tails
        assert e.candidate.update.bias_last_k == N - e.layer  # the tail the layer needs
        assert e.candidate.update.weights == ((e.layer, e.ratio),)
    lite = [e for e in entries if e.part == "lite"]
    assert [e.layer for e in lite] == [11, 10, 9, 7, 4]
    assert all(e.candidate.lite_residual.blocks == (e.layer,) for e in lite)
    assert all(e.candidate.update.bias_last_k == 0 for e in lite)


def test_plan_refuses_layers_the_network_lacks() -> None:
    from tinytune.errors import ConfigError

    with pytest.raises(ConfigError, match="do not exist"):
        ContributionPlan(weight_layers=(N,)).entries(SPEC, SUBNET)
    with pytest.raises(ConfigError, match="ratio"):
        ContributionPlan(ratios=(0.3,))


def test_gains_are_measured_against_the_right_reference() -> None:
    table = build_table("t" * 64, SPEC, SUBNET, made_up_records())
    assert table is not None
    assert table.base == pytest.approx(0.40)
    assert dict(table.bias) == pytest.approx({0: 0.0, 1: 0.02, 4: 0.10, N: 0.20})
    assert table.weights == pytest.approx({(33, 0.5): 0.05, (36, 1.0): 0.03})  # failed: left out
    assert table.lite == pytest.approx({11: 0.03, 9: 0.01})
    assert table.norm == pytest.approx(0.02)
    assert table.bias_accuracy(2) == pytest.approx(0.40 + 0.02 + 0.08 / 3)


def test_a_table_without_its_base_is_none() -> None:
    assert build_table("t" * 64, SPEC, SUBNET, made_up_records()[1:]) is None


def test_interpolation_is_linear_and_flat_outside() -> None:
    points = ((0, 0.0), (2, 0.2), (6, 0.4))
    assert [interpolate(points, x) for x in (-1, 0, 1, 2, 4, 6, 9)] == pytest.approx(
        [0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.4]
    )


def test_tables_are_stored_and_reused(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    identity = _identity(ckpt)
    fake = FakeEvaluator()
    keys = iter(range(-1, -1000, -1))
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        first = run_contributions(
            store, InlineExecutor(fake), identity, SPEC, SMALL, _task, lambda: next(keys)
        )
        assert first is not None and first.tasks == len(fake.candidates) == 6
        stored = store.contributions(identity.key)
        assert {r.entry for r in stored} == {
            "base", "bias:1", f"bias:{N}", f"weight:{N - 1}:0.5", f"weight:{N - 1}:1", "lite:11",
        }  # fmt: skip
        assert all(r.status == "ok" and r.checkpoint_sha256 == file_sha256(ckpt) for r in stored)
        again = run_contributions(
            store, InlineExecutor(fake), identity, SPEC, SMALL, _task, lambda: next(keys)
        )
    assert again is not None and again.tasks == 0
    assert len(fake.candidates) == 6  # the second run trained nothing
    assert again.to_dict() == first.to_dict()


def test_only_failed_or_missing_entries_run_again(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    identity = _identity(ckpt)
    fake = FakeEvaluator()

    def flaky(task: FinetuneTask) -> EvaluationResult:
        result = fake(task)
        if fake.candidates[-1].lite_residual.blocks:
            return EvaluationResult.failed("RuntimeError: diverged")
        return result

    keys = iter(range(-1, -1000, -1))
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        table = run_contributions(
            store, InlineExecutor(flaky), identity, SPEC, SMALL, _task, lambda: next(keys)
        )
        assert table is not None and table.lite == {}
        failed = [r for r in store.contributions(identity.key) if r.status == "failed"]
        assert [(r.entry, r.error) for r in failed] == [("lite:11", "RuntimeError: diverged")]
        bigger = ContributionPlan(
            weight_layers=(N - 1,), ratios=(0.5, 1.0), bias_ks=(), lite_offsets=(0, 1), norm=False
        )
        table = run_contributions(
            store, InlineExecutor(fake), identity, SPEC, bigger, _task, lambda: next(keys)
        )
        assert table is not None and table.tasks == 2  # lite:11 again, lite:10 new
        assert set(table.lite) == {11, 10}
        assert all(r.status == "ok" for r in store.contributions(identity.key))


def test_the_key_follows_content_data_and_seed(tmp_path: Path) -> None:
    ckpt = tmp_path / "weights.pt"
    ckpt.write_bytes(b"supernet weights")
    moved = tmp_path / "elsewhere.pt"
    shutil.copy(ckpt, moved)
    other = tmp_path / "other.pt"
    other.write_bytes(b"other weights")
    key = _identity(ckpt).key
    assert _identity(moved).key == key  # identified by content, not by path
    assert _identity(other).key != key
    assert _identity(ckpt, dataset="procedural").key != key
    assert _identity(ckpt, data_seed=1).key != key
    assert _identity(ckpt, finetune=FinetuneConfig(epochs=1, seed=1)).key != key
    assert _identity(ckpt, subnet=default_subnet(SPEC, "max")).key != key
